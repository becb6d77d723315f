import MRZ
import TesseraCore
import Testing

@Suite struct AccessKeyTests {
    /// Doc 9303 Part 11 Appendix D: document number L898902C (8 characters) is padded to "L898902C<";
    /// the printed MRZ information is "L898902C<369080619406236".
    @Test func fieldsArePaddedLikePart11() throws {
        let key = try AccessKeyInput.fromFields(
            documentNumber: "L898902C", dateOfBirth: "690806", dateOfExpiry: "940623")
        #expect(key == .mrz(mrzInformation: "L898902C<369080619406236"))
        #expect(key.mrzInformation == "L898902C<369080619406236")
        #expect(key.passwordBytes == Array("L898902C<369080619406236".utf8))
        #expect(key.paceReference == 1)
        #expect(key == (try MRZ(Specimen.td3BAC)).accessKey)
    }

    @Test func shortNumberPadding() throws {
        // "1234<<<<<": 1·7 + 2·3 + 3·1 + 4·7 = 44 → 4
        let key = try DocumentAccessKey.fromFields(
            documentNumber: " 1234 ", dateOfBirth: "740812", dateOfExpiry: "120415")
        #expect(key.mrzInformation == "1234<<<<<474081221204159")
    }

    @Test func lowerCaseAndTrailingFillersAccepted() throws {
        let key = try DocumentAccessKey.fromFields(
            documentNumber: "l898902c<", dateOfBirth: "690806", dateOfExpiry: "940623")
        #expect(key.mrzInformation == "L898902C<369080619406236")
    }

    /// Long numbers are used whole (Part 11 D.2: D23145890734 → "D23145890734934071279507122").
    @Test func longNumberUsedWhole() throws {
        let key = try DocumentAccessKey.fromFields(
            documentNumber: "D23145890734", dateOfBirth: "340712",
            dateOfExpiry: "950712")
        #expect(key.mrzInformation == "D23145890734934071279507122")
        #expect(key == (try MRZ(Specimen.td1Extended)).accessKey)
        #expect(key == (try MRZ(Specimen.td2Extended)).accessKey)
    }

    @Test(arguments: [
        ("", "740812", "120415", "documentNumber"),
        ("<<<", "740812", "120415", "documentNumber"),
        ("L898-902", "740812", "120415", "documentNumber"),
        ("L898902C", "7408120", "120415", "dateOfBirth"),
        ("L898902C", "74081", "120415", "dateOfBirth"),
        ("L898902C", "741312", "120415", "dateOfBirth"),
        ("L898902C", "740800", "120415", "dateOfBirth"),
        ("L898902C", "74O812", "120415", "dateOfBirth"),
        ("L898902C", "740812", "120431", "dateOfExpiry"),
        ("L898902C", "740812", "130229", "dateOfExpiry"),
    ])
    func invalidFields(number: String, dob: String, doe: String, field: String) {
        do {
            _ = try DocumentAccessKey.fromFields(documentNumber: number, dateOfBirth: dob, dateOfExpiry: doe)
            Issue.record("accepted \(number) \(dob) \(doe)")
        } catch {
            #expect(error.code == .invalidInput)
            #expect(error.details["field"] == .string(field))
        }
    }

    @Test func leapDayAccepted() throws {
        _ = try DocumentAccessKey.fromFields(documentNumber: "X1", dateOfBirth: "000229", dateOfExpiry: "280229")
    }

    @Test func can() throws {
        let key = try DocumentAccessKey(can: " 123456\n")
        #expect(key == .can("123456"))
        #expect(key.passwordBytes == [0x31, 0x32, 0x33, 0x34, 0x35, 0x36])
        #expect(key.paceReference == 2)
        #expect(key.mrzInformation == nil)
        for bad in ["12345", "1234567", "12345a", "12 456", "", "１２３４５６"] {
            #expect(throws: TesseraError.self) { try DocumentAccessKey(can: bad) }
            do { _ = try AccessKeyInput(can: bad) } catch { #expect(error.details["field"] == "can") }
        }
    }
}
