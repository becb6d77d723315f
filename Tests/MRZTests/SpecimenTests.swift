import MRZ
import Testing

@Suite struct SpecimenTests {
    @Test func td3() throws {
        let m = try MRZ(Specimen.td3)
        #expect(m.format == .td3)
        #expect(m.documentCode == "P")
        #expect(m.issuingState == "UTO")
        #expect(m.primaryIdentifier == "ERIKSSON")
        #expect(m.secondaryIdentifier == "ANNA MARIA")
        #expect(m.documentNumber == "L898902C3")
        #expect(m.documentNumberCheckDigit == "6")
        #expect(m.nationality == "UTO")
        #expect(m.dateOfBirth == "740812")
        #expect(m.dateOfBirthCheckDigit == "2")
        #expect(m.sex == .female)
        #expect(m.dateOfExpiry == "120415")
        #expect(m.dateOfExpiryCheckDigit == "9")
        #expect(m.optionalData == "ZE184226B")
        #expect(m.optionalData2 == nil)
        #expect(!m.hasExtendedDocumentNumber)
        #expect(m.raw == Specimen.td3)
        #expect(m.lines.count == 2)
        #expect(m.mrzInformation == "L898902C3674081221204159")
    }

    @Test func td1() throws {
        let m = try MRZ(Specimen.td1)
        #expect(m.format == .td1)
        #expect(m.documentCode == "I")
        #expect(m.issuingState == "UTO")
        #expect(m.documentNumber == "D23145890")
        #expect(m.documentNumberCheckDigit == "7")
        #expect(m.dateOfBirth == "740812")
        #expect(m.sex == .female)
        #expect(m.dateOfExpiry == "120415")
        #expect(m.nationality == "UTO")
        #expect(m.optionalData == "")
        #expect(m.optionalData2 == "")
        #expect(m.primaryIdentifier == "ERIKSSON")
        #expect(m.secondaryIdentifier == "ANNA MARIA")
        #expect(m.mrzInformation == "D23145890774081221204159")
    }

    @Test func td2() throws {
        let m = try MRZ(Specimen.td2)
        #expect(m.format == .td2)
        #expect(m.documentCode == "I")
        #expect(m.documentNumber == "D23145890")
        #expect(m.nationality == "UTO")
        #expect(m.dateOfBirth == "740812")
        #expect(m.dateOfExpiry == "120415")
        #expect(m.sex == .female)
        #expect(m.optionalData == "")
        #expect(m.primaryIdentifier == "ERIKSSON")
        #expect(m.secondaryIdentifier == "ANNA MARIA")
    }

    @Test func mrvA() throws {
        let m = try MRZ(Specimen.mrvA)
        #expect(m.format == .mrvA)
        #expect(m.documentCode == "V")
        #expect(m.issuingState == "UTO")
        #expect(m.documentNumber == "L8988901C")
        #expect(m.nationality == "XXX")
        #expect(m.dateOfBirth == "400907")
        #expect(m.sex == .female)
        #expect(m.dateOfExpiry == "961210")
        #expect(m.optionalData == "6ZE184226B")
        #expect(m.mrzInformation == "L8988901C440090789612109")
    }

    @Test func mrvB() throws {
        let m = try MRZ(Specimen.mrvB)
        #expect(m.format == .mrvB)
        #expect(m.documentNumber == "L8988901C")
        #expect(m.nationality == "XXX")
        #expect(m.dateOfExpiry == "961210")
        #expect(m.optionalData == "")
        #expect(m.secondaryIdentifier == "ANNA MARIA")
    }

    /// MRVs have no composite check digit: optional data is not covered by any check.
    @Test func mrvOptionalDataIsUnchecked() throws {
        let m = try MRZ(replacing(Specimen.mrvA, line: 2, column: 31, with: "Q"))
        #expect(m.optionalData == "6ZQ184226B")
    }

    /// Part 11 Appendix D.2: TD1 extended document number; MRZ information printed there is
    /// "D23145890734934071279507122". Check digit by hand: D=13·7 + 2·3 + 3·1 + 1·7 + 4·3 + 5·1
    /// + 8·7 + 9·3 + 0·1 + 7·7 + 3·3 + 4·1 = 269 → 9.
    @Test func td1ExtendedDocumentNumber() throws {
        let m = try MRZ(Specimen.td1Extended)
        #expect(m.hasExtendedDocumentNumber)
        #expect(m.documentNumber == "D23145890734")
        #expect(m.documentNumberCheckDigit == "9")
        #expect(m.optionalData == "")
        #expect(m.primaryIdentifier == "STEVENSON")
        #expect(m.secondaryIdentifier == "PETER JOHN")
        #expect(m.sex == .male)
        #expect(m.mrzInformation == "D23145890734934071279507122")
        #expect(m.jsonFields()["documentNumber"] == "D23145890734")
    }

    @Test func td2ExtendedDocumentNumber() throws {
        let m = try MRZ(Specimen.td2Extended)
        #expect(m.format == .td2)
        #expect(m.documentNumber == "D23145890734")
        #expect(m.optionalData == "")
        #expect(m.mrzInformation == "D23145890734934071279507122")
    }

    /// Constructed per Part 5: number D23145890AB; the run "AB0" in the optional data is
    /// continuation "AB" + check digit 0 (D=13·7 + 2·3 + 3·1 + 1·7 + 4·3 + 5·1 + 8·7 + 9·3 + 0·1
    /// + A=10·7 + B=11·3 = 310 → 0), then a filler, then further optional data "XYZ".
    /// Composite over "D23145890<AB0<XYZ<<<<<<<<" + "7408122" + "1204159" + "<<<<<<<<<<<" = 4 (Python).
    @Test func td1ExtendedNumberFollowedByOptionalData() throws {
        let m = try MRZ(
            "I<UTOD23145890<AB0<XYZ<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<4\nERIKSSON<<ANNA<MARIA<<<<<<<<<<")
        #expect(m.documentNumber == "D23145890AB")
        #expect(m.documentNumberCheckDigit == "0")
        #expect(m.optionalData == "XYZ")
        #expect(m.mrzInformation == "D23145890AB074081221204159")
    }

    @Test func bacWorkedExampleInformation() throws {
        let m = try MRZ(Specimen.td3BAC)
        #expect(m.documentNumber == "L898902C")
        #expect(m.mrzInformation == "L898902C<369080619406236")
        #expect(m.accessKey == .mrz(mrzInformation: "L898902C<369080619406236"))
    }

    @Test func jsonFieldsContract() throws {
        let fields = try MRZ(Specimen.td3).jsonFields()
        #expect(
            fields == [
                "documentCode": "P", "issuingState": "UTO", "documentNumber": "L898902C3",
                "primaryIdentifier": "ERIKSSON", "secondaryIdentifier": "ANNA MARIA", "nationality": "UTO",
                "dateOfBirth": "740812", "sex": "F", "dateOfExpiry": "120415", "optionalData": "ZE184226B",
            ])
    }

    /// The TD3 personal-number check digit may be '<' when the field is all fillers (Part 4).
    /// Composite over "L898902C36" + "7408122" + "1204159<<<<<<<<<<<<<<<" = 8 (Python).
    @Test func emptyPersonalNumberWithFillerCheckDigit() throws {
        let m = try MRZ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159<<<<<<<<<<<<<<<8")
        #expect(m.optionalData == "")
        let zero = try MRZ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159<<<<<<<<<<<<<<08")
        #expect(zero.optionalData == "")
    }

    @Test func sexUnspecifiedAndNamesWithoutSecondary() throws {
        // Sex '<' → unspecified; name field without "<<" → no secondary identifier.
        let text = pad("I<UTOERIKSSON<ANNA<MARIA", 36) + "\nD231458907UTO7408122<1204159<<<<<<<6"
        let m = try MRZ(text)
        #expect(m.sex == .unspecified)
        #expect(m.jsonFields()["sex"] == "X")
        #expect(m.primaryIdentifier == "ERIKSSON ANNA MARIA")
        #expect(m.secondaryIdentifier == "")
    }
}
