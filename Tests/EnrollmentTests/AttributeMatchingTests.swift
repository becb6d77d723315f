import Enrollment
import MRZ
import TesseraCore
import Testing

/// A TD3 with the given name field and data; check digits computed with `MRZ.checkDigit`.
func td3(
    name: String, number: String = "L898902C3", dateOfBirth: String = "740812", dateOfExpiry: String = "120415",
    sex: String = "F", state: String = "UTO"
) -> String {
    func pad(_ s: String, _ n: Int) -> String { s + String(repeating: "<", count: max(0, n - s.count)) }
    let personal = pad("ZE184226B", 14)
    let numberPart = pad(number, 9) + String(MRZ.checkDigit(pad(number, 9)))
    let dobPart = dateOfBirth + String(MRZ.checkDigit(dateOfBirth))
    let doePart = dateOfExpiry + String(MRZ.checkDigit(dateOfExpiry))
    let personalPart = personal + String(MRZ.checkDigit(personal))
    let composite = MRZ.checkDigit(numberPart + dobPart + doePart + personalPart)
    return pad("P<" + state + name, 44) + "\n" + numberPart + state + dobPart + sex + doePart + personalPart
        + String(composite)
}

@Suite struct AttributeMatchingTests {
    let reference = MRZDate(year: 2026, month: 5, day: 1)!

    func mismatches(_ expected: ExpectedAttributes, _ mrz: String) throws -> [AttributeMismatch] {
        AttributeMatcher.compare(expected, with: try MRZ(mrz), relativeTo: reference)
    }

    static let everything = ExpectedAttributes(
        surname: "Eriksson", givenNames: "Anna Maria", documentNumber: "L898902C3", nationality: "UTO",
        issuingState: "UTO", dateOfBirth: "1974-08-12", dateOfExpiry: "2012-04-15", sex: "F", documentType: "P")

    @Test func td3SpecimenMatches() throws {
        #expect(try mismatches(Self.everything, Specimen.td3) == [])
        #expect(try mismatches(ExpectedAttributes(), Specimen.td3) == [])
    }

    @Test func td1AndTd2SpecimensMatch() throws {
        var e = Self.everything
        e.documentNumber = "D23145890"
        e.documentType = "I"
        #expect(try mismatches(e, Specimen.td1) == [])
        #expect(try mismatches(e, Specimen.td2) == [])
        e.documentType = "P"
        #expect(
            try mismatches(e, Specimen.td1) == [
                AttributeMismatch(
                    attribute: "documentType", expected: "P",
                    actual: "I")
            ])
    }

    @Test func everyKindOfMismatch() throws {
        let e = ExpectedAttributes(
            surname: "Eriksen", givenNames: "Anna", documentNumber: "L898902C4", nationality: "D",
            issuingState: "UTA", dateOfBirth: "1974-08-13", dateOfExpiry: "2012-04-16", sex: "M", documentType: "V")
        let found = try mismatches(e, Specimen.td3)
        #expect(
            found == [
                AttributeMismatch(attribute: "surname", expected: "ERIKSEN", actual: "ERIKSSON"),
                AttributeMismatch(attribute: "givenNames", expected: "ANNA", actual: "ANNA MARIA"),
                AttributeMismatch(attribute: "documentNumber", expected: "L898902C4", actual: "L898902C3"),
                AttributeMismatch(attribute: "nationality", expected: "D", actual: "UTO"),
                AttributeMismatch(attribute: "issuingState", expected: "UTA", actual: "UTO"),
                AttributeMismatch(attribute: "dateOfBirth", expected: "1974-08-13", actual: "1974-08-12"),
                AttributeMismatch(attribute: "dateOfExpiry", expected: "2012-04-16", actual: "2012-04-15"),
                AttributeMismatch(attribute: "sex", expected: "M", actual: "F"),
                AttributeMismatch(attribute: "documentType", expected: "V", actual: "P"),
            ])
        #expect(found[0].json == ["attribute": "surname", "expected": "ERIKSEN", "actual": "ERIKSSON"])
    }

    @Test func diacriticsAndPunctuation() throws {
        for surname in ["Erikßon", "ERIKSSON", "eriksson", " Eriksson "] {
            #expect(try mismatches(ExpectedAttributes(surname: surname), Specimen.td3) == [], "\(surname)")
        }
        #expect(try mismatches(ExpectedAttributes(givenNames: "Anna-Maria"), Specimen.td3) == [])
        #expect(try mismatches(ExpectedAttributes(givenNames: "Anna, María"), Specimen.td3) == [])
        #expect(try mismatches(ExpectedAttributes(givenNames: "AnnaMaria"), Specimen.td3).count == 1)
        #expect(try mismatches(ExpectedAttributes(surname: "Eriksson-Smith"), Specimen.td3).count == 1)

        // Doc 9303 Part 3 transliterates Ü as UE; some states print U: both are accepted.
        let mueller = td3(name: "MUELLER<<JOERG")
        let muller = td3(name: "MULLER<<JORG")
        for mrz in [mueller, muller] {
            #expect(try mismatches(ExpectedAttributes(surname: "Müller", givenNames: "Jörg"), mrz) == [])
        }
        #expect(try mismatches(ExpectedAttributes(surname: "Muller"), mueller).count == 1)
        #expect(try mismatches(ExpectedAttributes(surname: "d'Artagnan"), td3(name: "DARTAGNAN<<CHARLES")) == [])
    }

    /// TD3 name field: 39 characters, here filled to the last position (the name was truncated).
    @Test func truncatedGivenNames() throws {
        let full = td3(name: "ERIKSSON<<ANNA<MARIA<LOUISE<CHRISTINA<V")
        #expect(try MRZ(full).secondaryIdentifier == "ANNA MARIA LOUISE CHRISTINA V")
        let e = ExpectedAttributes(surname: "Eriksson", givenNames: "Anna Maria Louise Christina Victoria")
        #expect(try mismatches(e, full) == [])
        // Shorter than the MRZ name is never a match.
        #expect(try mismatches(ExpectedAttributes(givenNames: "Anna Maria Louise"), full).count == 1)
        // A prefix is a match only when the field is full.
        #expect(
            try mismatches(ExpectedAttributes(givenNames: "Anna Maria Louise"), Specimen.td3) == [
                AttributeMismatch(attribute: "givenNames", expected: "ANNA MARIA LOUISE", actual: "ANNA MARIA")
            ])
        let oneShort = td3(name: "ERIKSSON<<ANNA<MARIA<LOUISE<CHRISTINA")
        #expect(try mismatches(e, oneShort).count == 1)
    }

    /// TD1 name field: 30 characters, all taken by the surname (the given names were truncated away).
    @Test func truncatedSurnameInTD1() throws {
        let td1 = "I<UTOD231458907<<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nWOLFESCHLEGELSTEINHAUSENBERGER"
        let m = try MRZ(td1)
        #expect(m.primaryIdentifier == "WOLFESCHLEGELSTEINHAUSENBERGER" && m.secondaryIdentifier == "")
        let e = ExpectedAttributes(surname: "Wolfeschlegelsteinhausenbergerdorff", givenNames: "Hubert Blaine")
        #expect(try mismatches(e, td1) == [])
        #expect(try mismatches(ExpectedAttributes(surname: "Wolfeschlegel"), td1).count == 1)
        #expect(try mismatches(ExpectedAttributes(givenNames: "Anna"), Specimen.td1).count == 1)
    }

    @Test func documentNumbers() throws {
        #expect(try mismatches(ExpectedAttributes(documentNumber: "D23145890734"), Specimen.td1Extended) == [])
        #expect(try mismatches(ExpectedAttributes(documentNumber: "D23145890<734"), Specimen.td1Extended) == [])
        #expect(try mismatches(ExpectedAttributes(documentNumber: "D2314589073"), Specimen.td1Extended).count == 1)
        #expect(
            try mismatches(ExpectedAttributes(documentNumber: "L898902C"), td3(name: "X<<Y", number: "L898902C"))
                == [])
        #expect(
            try mismatches(ExpectedAttributes(documentNumber: "L898902C<"), td3(name: "X<<Y", number: "L898902C"))
                == [])
    }

    /// A German identity card: issuing state and nationality "D" (Doc 9303 Part 3), document code "ID".
    @Test func germanCodes() throws {
        let german = "IDD<<D231458907<<<<<<<<<<<<<<<\n7408122F1204159D<<<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<"
        let e = ExpectedAttributes(nationality: "D", issuingState: "D", documentType: "I")
        #expect(try mismatches(e, german) == [])
        #expect(try mismatches(ExpectedAttributes(documentType: "ID"), german) == [])
        #expect(try mismatches(ExpectedAttributes(documentType: "IP"), german).count == 1)
        #expect(
            try mismatches(ExpectedAttributes(nationality: "DEU"), german) == [
                AttributeMismatch(attribute: "nationality", expected: "DEU", actual: "D")
            ])
    }

    @Test func dateCenturies() throws {
        // 1925 and 2025 print alike; MRZ's rules resolve "250101" to 2025 (not after the reference).
        let old = td3(name: "X<<Y", dateOfBirth: "250101", dateOfExpiry: "300101")
        #expect(try mismatches(ExpectedAttributes(dateOfBirth: "1925-01-01"), old) == [])
        #expect(try mismatches(ExpectedAttributes(dateOfBirth: "2025-01-01"), old) == [])
        // A birth date after the reference date never matches.
        #expect(
            try mismatches(ExpectedAttributes(dateOfBirth: "2074-08-12"), Specimen.td3) == [
                AttributeMismatch(attribute: "dateOfBirth", expected: "2074-08-12", actual: "1974-08-12")
            ])
        #expect(try mismatches(ExpectedAttributes(dateOfExpiry: "2030-01-01"), old) == [])
        #expect(
            try mismatches(ExpectedAttributes(dateOfExpiry: "2030-01-02"), old) == [
                AttributeMismatch(attribute: "dateOfExpiry", expected: "2030-01-02", actual: "2030-01-01")
            ])
        // Unknown parts of a birth date ('<') never match and are reported as printed.
        let unknown = td3(name: "X<<Y", dateOfBirth: "7408<<")
        #expect(
            try mismatches(ExpectedAttributes(dateOfBirth: "1974-08-01"), unknown) == [
                AttributeMismatch(attribute: "dateOfBirth", expected: "1974-08-01", actual: "7408<<")
            ])
    }

    @Test func sexUnspecified() throws {
        let x = td3(name: "X<<Y", sex: "<")
        #expect(try mismatches(ExpectedAttributes(sex: "X"), x) == [])
        #expect(try mismatches(ExpectedAttributes(sex: "F"), x).count == 1)
    }
}

@Suite struct ExpectedAttributesTests {
    @Test func fromJSON() throws {
        let json: JSONValue = [
            "surname": "Eriksson", "givenNames": "Anna Maria", "documentNumber": "L898902C3", "nationality": "UTO",
            "issuingState": "D", "dateOfBirth": "1974-08-12", "dateOfExpiry": "2012-04-15", "sex": "F",
            "documentType": "P",
        ]
        let e = try ExpectedAttributes(json: json)
        #expect(e == AttributeMatchingTests.everything.with { $0.issuingState = "D" })
        #expect(e.json == json)
        #expect(try ExpectedAttributes(json: [:]) == ExpectedAttributes())
        #expect(try ExpectedAttributes(json: ["givenNames": ""]).givenNames == "")
        #expect(try ExpectedAttributes(json: ["dateOfBirth": "2000-02-29"]).dateOfBirth == "2000-02-29")
    }

    @Test(arguments: [
        ("height", JSONValue.string("180")),
        ("surname", 5), ("surname", .null), ("surname", ""), ("surname", "李"), ("givenNames", "明"),
        ("documentNumber", "l898902c3"), ("documentNumber", "<<<"), ("documentNumber", ""),
        ("documentNumber", "L898 902"),
        ("nationality", "uto"), ("nationality", "UTOP"), ("nationality", ""), ("issuingState", "D1"),
        ("dateOfBirth", "1974-02-30"), ("dateOfBirth", "74-08-12"), ("dateOfBirth", "1974-8-12"),
        ("dateOfExpiry", "1900-02-29"), ("dateOfExpiry", "2012/04/15"), ("dateOfExpiry", 20_120_415),
        ("sex", "W"), ("sex", "f"), ("documentType", "ID1"), ("documentType", "1"), ("documentType", ""),
    ])
    func refused(key: String, value: JSONValue) {
        let e = expectError(.invalidInput) { () throws(TesseraError) in
            try ExpectedAttributes(json: .object([key: value]))
        }
        #expect(e?.details["field"] == .string("expected." + key))
    }

    @Test func notAnObject() {
        expectError(.invalidInput) { () throws(TesseraError) in try ExpectedAttributes(json: ["surname"]) }
    }
}

extension ExpectedAttributes {
    func with(_ change: (inout ExpectedAttributes) -> Void) -> ExpectedAttributes {
        var copy = self
        change(&copy)
        return copy
    }
}
