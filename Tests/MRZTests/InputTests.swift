import MRZ
import Testing

@Suite struct InputTests {
    @Test func concatenatedLines() throws {
        let joined = String(Specimen.td3.filter { $0 != "\n" })
        #expect(joined.count == 88)
        #expect(try MRZ(joined) == MRZ(Specimen.td3))
        #expect(try MRZ(String(Specimen.td1.filter { $0 != "\n" })).format == .td1)
        #expect(try MRZ(String(Specimen.td2.filter { $0 != "\n" })).format == .td2)
        #expect(try MRZ(String(Specimen.mrvB.filter { $0 != "\n" })).format == .mrvB)
    }

    @Test func crlfWhitespaceAndBlankLines() throws {
        let lines = Specimen.td1.split(separator: "\n")
        let messy = "\r\n  \t" + lines[0] + "  \r\n\r\n" + lines[1] + "\r" + lines[2] + "\t\n\n"
        let m = try MRZ(messy)
        #expect(m.raw == Specimen.td1)
        #expect(m.documentNumber == "D23145890")
    }

    /// Lower case is upper-cased before parsing (documented choice).
    @Test func lowerCaseIsUpperCased() throws {
        let m = try MRZ(Specimen.td3.lowercased())
        #expect(m == (try MRZ(Specimen.td3)))
        #expect(m.raw == Specimen.td3)
    }

    @Test func spaceInsideLineIsRejected() {
        // An embedded space makes line 1 45 characters long: wrong shape.
        let e = parseError(
            "P<UTO ERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10")
        #expect(e?.code == .mrzInvalid)
        #expect(e?.details["field"] == "format")
    }

    @Test func parseIsInit() throws {
        #expect(try MRZ.parse(Specimen.td2) == MRZ(Specimen.td2))
    }
}
