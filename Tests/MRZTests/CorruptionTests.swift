import MRZ
import TesseraCore
import Testing

/// Each single-character corruption must be reported with the field and the 1-based position that failed.
/// Expected digits were computed independently (Python reference implementation of Part 3 §4.9).
@Suite struct CorruptionTests {
    // MARK: TD3 (line 2: L898902C36UTO7408122F1204159ZE184226B<<<<<10)

    @Test func td3DocumentNumberCheckDigit() {
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 10, with: "5"),
            field: "documentNumber", line: 2, column: 10, expected: "6", found: "5")
    }

    @Test func td3DocumentNumberCharacter() {
        // L898902C4 → 7, printed 6
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 9, with: "4"),
            field: "documentNumber", line: 2, column: 10, expected: "7", found: "6")
    }

    @Test func td3DateOfBirthDigit() {
        // 740813 → 3, printed 2
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 19, with: "3"),
            field: "dateOfBirth", line: 2, column: 20, expected: "3", found: "2")
    }

    @Test func td3DateOfExpiryCheckDigit() {
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 28, with: "8"),
            field: "dateOfExpiry", line: 2, column: 28, expected: "9", found: "8")
    }

    @Test func td3PersonalNumberCheckDigit() {
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 43, with: "2"),
            field: "optionalData", line: 2, column: 43, expected: "1", found: "2")
    }

    @Test func td3Composite() {
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 44, with: "7"),
            field: "composite", line: 2, column: 44, expected: "0", found: "7")
    }

    @Test func td3CheckDigitPositionHoldingFiller() {
        // TD3 has no extended-number rule: '<' in the check digit position is simply wrong.
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 10, with: "<"),
            field: "documentNumber", line: 2, column: 10, expected: "6", found: "<")
    }

    @Test func messageWording() {
        let e = parseError(replacing(Specimen.td1, line: 2, column: 7, with: "4"))
        #expect(e?.message == "check digit of dateOfBirth wrong at line 2 col 7 (expected 2, found 4)")
        #expect(e?.code == .mrzInvalid)
    }

    @Test func letterInDateIsNamed() {
        // OCR reads 'O' for '0' in the date of birth (line 2 col 16 = 3rd character of 740812).
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 16, with: "O"),
            field: "dateOfBirth", line: 2, column: 16)
        expectFailure(
            replacing(Specimen.td3, line: 2, column: 22, with: "I"),
            field: "dateOfExpiry", line: 2, column: 22)
    }

    @Test func invalidSex() {
        expectFailure(replacing(Specimen.td3, line: 2, column: 21, with: "Q"), field: "sex", line: 2, column: 21)
    }

    @Test func invalidCharacters() {
        expectFailure(replacing(Specimen.td3, line: 1, column: 10, with: "*"), field: "name", line: 1, column: 10)
        expectFailure(replacing(Specimen.td3, line: 1, column: 3, with: "ü"), field: "issuingState", line: 1, column: 3)
        expectFailure(
            replacing(Specimen.td1, line: 1, column: 15, with: "#"),
            field: "documentNumber", line: 1, column: 15)
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 20, with: "-"),
            field: "optionalData2", line: 2, column: 20)
    }

    // MARK: TD1

    @Test func td1EachCheckDigit() {
        expectFailure(
            replacing(Specimen.td1, line: 1, column: 15, with: "1"),
            field: "documentNumber", line: 1, column: 15, expected: "7", found: "1")
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 7, with: "4"),
            field: "dateOfBirth", line: 2, column: 7, expected: "2", found: "4")
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 15, with: "0"),
            field: "dateOfExpiry", line: 2, column: 15, expected: "9", found: "0")
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 30, with: "3"),
            field: "composite", line: 2, column: 30, expected: "6", found: "3")
    }

    @Test func td1CompositeCoversOptionalData() {
        // 'B' (11) at line 2 col 19 sits at index 39 of the composite string → weight 7: 6 + 77 → 3.
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 19, with: "B"),
            field: "composite", line: 2, column: 30, expected: "3", found: "6")
        // Optional data 1 (upper line) is covered too: '1' at line 1 col 20.
        expectFailure(replacing(Specimen.td1, line: 1, column: 20, with: "1"), field: "composite", line: 2, column: 30)
        // Both ends of the composite ranges: line 1 col 30 (index 24, weight 7: 6 + 7 → 3) and
        // line 2 col 29 (index 49, weight 3: 6 + 3 → 9).
        expectFailure(
            replacing(Specimen.td1, line: 1, column: 30, with: "1"),
            field: "composite", line: 2, column: 30, expected: "3", found: "6")
        expectFailure(
            replacing(Specimen.td1, line: 2, column: 29, with: "1"),
            field: "composite", line: 2, column: 30, expected: "9", found: "6")
    }

    @Test func td2CompositeCoversOptionalData() {
        // Line 2 col 35 is index 30 of the TD2 composite string (weight 7): 6 + 7 → 3.
        expectFailure(
            replacing(Specimen.td2, line: 2, column: 35, with: "1"),
            field: "composite", line: 2, column: 36, expected: "3", found: "6")
        // Sex (col 21) and nationality (cols 11–13) are outside every check: still parses.
        #expect((try? MRZ(replacing(Specimen.td2, line: 2, column: 21, with: "M")))?.sex == .male)
    }

    @Test func td1ExtendedCheckDigitWrong() {
        // Run "7349": its last character is the check digit of D23145890734 (9), at line 1 col 19.
        expectFailure(
            replacing(Specimen.td1Extended, line: 1, column: 19, with: "8"),
            field: "documentNumber", line: 1, column: 19, expected: "9", found: "8")
    }

    @Test func td1ExtendedContinuationWrong() {
        // D23145890735 → check digit 0 (269 − 4 + 5 = 270), printed 9.
        expectFailure(
            replacing(Specimen.td1Extended, line: 1, column: 18, with: "5"),
            field: "documentNumber", line: 1, column: 19, expected: "0", found: "9")
    }

    @Test func td1ExtendedMissingContinuation() {
        expectFailure(
            "I<UTOD23145890<<<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<",
            field: "documentNumber", line: 1, column: 16)
        // A run of one character is only a check digit, with no continuation.
        expectFailure(
            "I<UTOD23145890<7<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<",
            field: "documentNumber", line: 1, column: 16)
    }

    // MARK: TD2 and MRV

    @Test func td2CheckDigits() {
        expectFailure(
            replacing(Specimen.td2, line: 2, column: 10, with: "8"),
            field: "documentNumber", line: 2, column: 10, expected: "7", found: "8")
        expectFailure(
            replacing(Specimen.td2, line: 2, column: 36, with: "7"),
            field: "composite", line: 2, column: 36, expected: "6", found: "7")
        // TD2 extended: run "7349" at line 2 cols 29–32; D23145890735 → 0 (269 − 4 + 5 = 270).
        expectFailure(
            replacing(Specimen.td2Extended, line: 2, column: 31, with: "5"),
            field: "documentNumber", line: 2, column: 32, expected: "0", found: "9")
    }

    @Test func mrvCheckDigits() {
        expectFailure(
            replacing(Specimen.mrvB, line: 2, column: 10, with: "5"),
            field: "documentNumber", line: 2, column: 10, expected: "4", found: "5")
        expectFailure(
            replacing(Specimen.mrvA, line: 2, column: 20, with: "1"),
            field: "dateOfBirth", line: 2, column: 20, expected: "8", found: "1")
    }

    // MARK: Shape

    @Test func wrongShapes() {
        for bad in ["", "   \n  ", String(Specimen.td3.dropLast()), "P<UTO\nL898", Specimen.td1 + "\n" + Specimen.td1] {
            let e = parseError(bad)
            #expect(e?.code == .mrzInvalid)
        }
        let e = parseError(String(Specimen.td3.dropLast()))
        #expect(e?.details["lineLengths"] == [44, 43])
    }
}
