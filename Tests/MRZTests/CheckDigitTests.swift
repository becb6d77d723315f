import MRZ
import Testing

@Suite struct CheckDigitTests {
    /// Doc 9303 Part 3, Appendix A (check digit examples), each re-derived independently.
    @Test(arguments: [
        // 5·7 + 2·3 + 0·1 + 7·7 + 2·3 + 7·1 = 103 → 3
        ("520727", Character("3")),
        // A=10: 10·7 + 11·3 + 2·1 + 1·7 + 3·3 + 4·1 + 0 + 0 + 0 = 125 → 5
        ("AB2134<<<", "5"),
        ("HA672242<658022549601086<<<<<<<<<<<<<<0", "8"),
        ("D231458907<<<<<<<<<<<<<<<34071279507122<<<<<<<<<<<", "2"),
        ("HA672242<658022549601086<<<<<<<0", "8"),
    ])
    func part3Examples(input: String, digit: Character) {
        #expect(MRZ.checkDigit(input) == digit)
    }

    /// Every check digit printed in the Part 4 TD3 specimen line 2 "L898902C36UTO7408122F1204159ZE184226B<<<<<10".
    @Test func td3SpecimenDigits() {
        #expect(MRZ.checkDigit("L898902C3") == "6")
        #expect(MRZ.checkDigit("740812") == "2")
        #expect(MRZ.checkDigit("120415") == "9")
        #expect(MRZ.checkDigit("ZE184226B<<<<<") == "1")
        #expect(MRZ.checkDigit("L898902C36" + "7408122" + "1204159ZE184226B<<<<<1") == "0")
    }

    /// TD1 composite (Part 5): upper line 6–30, middle line 1–7, 9–15, 19–29.
    @Test func td1SpecimenDigits() {
        #expect(MRZ.checkDigit("D23145890") == "7")
        #expect(MRZ.checkDigit("D231458907<<<<<<<<<<<<<<<" + "7408122" + "1204159" + "<<<<<<<<<<<") == "6")
    }

    /// TD2 composite (Part 6): line 2 positions 1–10, 14–20, 22–35.
    @Test func td2SpecimenComposite() {
        #expect(MRZ.checkDigit("D231458907" + "7408122" + "1204159<<<<<<<") == "6")
    }

    /// MRV specimen (Part 7): L8988901C → 4, 400907 → 8, 961210 → 9.
    @Test func mrvSpecimenDigits() {
        #expect(MRZ.checkDigit("L8988901C") == "4")
        #expect(MRZ.checkDigit("400907") == "8")
        #expect(MRZ.checkDigit("961210") == "9")
    }

    @Test func fillersAndLowerCase() {
        #expect(MRZ.checkDigit("") == "0")
        #expect(MRZ.checkDigit("<<<<<<<<<") == "0")
        #expect(MRZ.checkDigit("l898902c3") == "6")
        // Z = 35: 35·7 = 245 → 5
        #expect(MRZ.checkDigit("Z") == "5")
    }
}
