import FoundationEssentials
import MRZ
import TesseraCore

/// The attributes a document is expected to carry (an activation token's or a workflow's `expected`);
/// nil ones are not compared.
public struct ExpectedAttributes: Sendable, Equatable {
    public var surname: String?
    public var givenNames: String?
    public var documentNumber: String?
    /// ISO 3166-1 alpha-3 or another Doc 9303 code, e.g. "UTO", "D".
    public var nationality: String?
    public var issuingState: String?
    /// YYYY-MM-DD.
    public var dateOfBirth: String?
    /// YYYY-MM-DD.
    public var dateOfExpiry: String?
    /// "M", "F" or "X".
    public var sex: String?
    /// The first letter of the document code ("P", "I", "A", "C", …), or the whole two-letter code.
    public var documentType: String?

    static let keys = [
        "surname", "givenNames", "documentNumber", "nationality", "issuingState", "dateOfBirth",
        "dateOfExpiry", "sex", "documentType",
    ]

    public init(
        surname: String? = nil, givenNames: String? = nil, documentNumber: String? = nil,
        nationality: String? = nil, issuingState: String? = nil, dateOfBirth: String? = nil,
        dateOfExpiry: String? = nil, sex: String? = nil, documentType: String? = nil
    ) {
        self.surname = surname
        self.givenNames = givenNames
        self.documentNumber = documentNumber
        self.nationality = nationality
        self.issuingState = issuingState
        self.dateOfBirth = dateOfBirth
        self.dateOfExpiry = dateOfExpiry
        self.sex = sex
        self.documentType = documentType
    }

    /// Reads the `expected` object of docs/ENROLLMENT.md. `INVALID_INPUT` (`details.field` "expected.<key>")
    /// for an unknown key or a value that is not a string of the right form: names that keep at least one
    /// letter after transliteration (given names may be empty), a document number of A–Z, 0–9 and '<',
    /// codes of 1–3 letters A–Z, valid calendar dates YYYY-MM-DD, sex M/F/X, a document type of 1–2 letters.
    public init(json: JSONValue) throws(TesseraError) {
        guard let object = json.objectValue else {
            throw TesseraError(.invalidInput, "expected attributes must be an object", details: ["field": "expected"])
        }
        for key in object.keys.sorted() where !Self.keys.contains(key) {
            throw Self.invalid(key, "unknown expected attribute '\(key)'")
        }
        func string(_ key: String) throws(TesseraError) -> String? {
            guard let value = object[key] else { return nil }
            guard let s = value.stringValue else { throw Self.invalid(key, "expected.\(key) must be a string") }
            return s
        }
        surname = try string("surname")
        givenNames = try string("givenNames")
        documentNumber = try string("documentNumber")
        nationality = try string("nationality")
        issuingState = try string("issuingState")
        dateOfBirth = try string("dateOfBirth")
        dateOfExpiry = try string("dateOfExpiry")
        sex = try string("sex")
        documentType = try string("documentType")

        if let surname, MRZ.comparableName(surname).isEmpty {
            throw Self.invalid("surname", "expected.surname has no letters that can appear in an MRZ")
        }
        if let givenNames, MRZ.comparableName(givenNames).isEmpty,
            !givenNames.allSatisfy({ $0.isWhitespace })
        {
            throw Self.invalid("givenNames", "expected.givenNames has no letters that can appear in an MRZ")
        }
        if let documentNumber {
            let b = Array(documentNumber.utf8)
            guard (1...30).contains(b.count), b.contains(where: { $0 != Self.filler }),
                b.allSatisfy({ Self.isUpper($0) || (0x30...0x39).contains($0) || $0 == Self.filler })
            else { throw Self.invalid("documentNumber", "expected.documentNumber must be A–Z, 0–9 and '<'") }
        }
        for (key, value) in [("nationality", nationality), ("issuingState", issuingState)] {
            if let value, !Self.isLetters(value, 1...3) {
                throw Self.invalid(key, "expected.\(key) must be 1 to 3 letters A–Z")
            }
        }
        for (key, value) in [("dateOfBirth", dateOfBirth), ("dateOfExpiry", dateOfExpiry)] {
            if let value, Self.date(value) == nil {
                throw Self.invalid(key, "expected.\(key) must be a calendar date YYYY-MM-DD")
            }
        }
        if let sex, !["M", "F", "X"].contains(sex) {
            throw Self.invalid("sex", "expected.sex must be M, F or X")
        }
        if let documentType, !Self.isLetters(documentType, 1...2) {
            throw Self.invalid("documentType", "expected.documentType must be 1 or 2 letters A–Z")
        }
    }

    /// The given attributes as a JSON object (the form `init(json:)` reads).
    public var json: JSONValue {
        let values = [
            surname, givenNames, documentNumber, nationality, issuingState, dateOfBirth, dateOfExpiry,
            sex, documentType,
        ]
        var object: [String: JSONValue] = [:]
        for (key, value) in zip(Self.keys, values) { if let value { object[key] = .string(value) } }
        return .object(object)
    }

    static let filler = UInt8(ascii: "<")
    static func isUpper(_ b: UInt8) -> Bool { (0x41...0x5A).contains(b) }
    static func isLetters(_ s: String, _ counts: ClosedRange<Int>) -> Bool {
        counts.contains(s.utf8.count) && s.utf8.allSatisfy(isUpper)
    }

    static func invalid(_ key: String, _ message: String) -> TesseraError {
        TesseraError(.invalidInput, message, details: ["field": .string("expected." + key)])
    }

    /// "YYYY-MM-DD" as a date, nil unless it is one.
    static func date(_ text: String) -> MRZDate? {
        let b = Array(text.utf8)
        guard b.count == 10, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-") else { return nil }
        func number(_ r: Range<Int>) -> Int? {
            let digits = b[r]
            guard digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
            return digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
        }
        guard let y = number(0..<4), let m = number(5..<7), let d = number(8..<10) else { return nil }
        return MRZDate(year: y, month: m, day: d)
    }
}

/// One attribute that differs between the expectation and the document.
public struct AttributeMismatch: Sendable, Equatable {
    /// The `ExpectedAttributes` key, e.g. "surname".
    public var attribute: String
    public var expected: String
    public var actual: String

    public init(attribute: String, expected: String, actual: String) {
        self.attribute = attribute
        self.expected = expected
        self.actual = actual
    }

    /// `{attribute, expected, actual}`, an element of `ATTRIBUTE_MISMATCH`'s `details.mismatches`.
    public var json: JSONValue {
        ["attribute": .string(attribute), "expected": .string(expected), "actual": .string(actual)]
    }
}

/// Compares expected attributes with a document's MRZ (DG1).
public enum AttributeMatcher {
    /// The attributes given in `expected` that the MRZ does not match, in `ExpectedAttributes` key order;
    /// empty when all match.
    ///
    /// - Names: both sides in `MRZ.comparableName` form; an expected name with letters that Doc 9303
    ///   transliterates to two (Ä → AE) also matches the single-letter form (Ä → A) some states print.
    ///   When the MRZ name field is full (its last character a letter: the name may have been truncated),
    ///   an MRZ name that is a prefix of the expected one matches. Mismatches report the compared forms.
    /// - Dates: the MRZ has two year digits, so its YYMMDD is compared with the expected date's; a birth
    ///   date after `reference` never matches. `actual` is the MRZ date resolved with MRZ's century rules.
    /// - Document number: '<' fillers are ignored on both sides. Nationality, issuing state and sex: equal.
    /// - Document type: a one-letter type is the document code's first letter, two letters the whole code.
    public static func compare(
        _ expected: ExpectedAttributes, with mrz: MRZ,
        relativeTo reference: MRZDate = .today()
    ) -> [AttributeMismatch] {
        var mismatches: [AttributeMismatch] = []
        func check(
            _ attribute: String, _ expected: String?, _ actual: @autoclosure () -> String,
            expectedShown: ((String) -> String)? = nil, matches: (String, String) -> Bool
        ) {
            guard let expected else { return }
            let actual = actual()
            if !matches(expected, actual) {
                mismatches.append(
                    AttributeMismatch(
                        attribute: attribute, expected: expectedShown?(expected) ?? expected,
                        actual: actual))
            }
        }
        let full = nameFieldIsFull(mrz)
        let nameMatches = { (expected: String, actual: String) -> Bool in
            nameForms(expected).contains { $0 == actual || (full && $0.hasPrefix(actual)) }
        }
        check(
            "surname", expected.surname, MRZ.comparableName(mrz.primaryIdentifier),
            expectedShown: MRZ.comparableName, matches: nameMatches)
        check(
            "givenNames", expected.givenNames, MRZ.comparableName(mrz.secondaryIdentifier),
            expectedShown: MRZ.comparableName, matches: nameMatches)
        check("documentNumber", expected.documentNumber, mrz.documentNumber) {
            withoutFillers($0) == withoutFillers($1)
        }
        check("nationality", expected.nationality, mrz.nationality, matches: ==)
        check("issuingState", expected.issuingState, mrz.issuingState, matches: ==)
        check(
            "dateOfBirth", expected.dateOfBirth,
            MRZ.birthDate(mrz.dateOfBirth, relativeTo: reference)?.description ?? mrz.dateOfBirth
        ) { e, _ in
            guard let date = ExpectedAttributes.date(e) else { return false }
            return yymmdd(date) == mrz.dateOfBirth && date <= reference
        }
        check(
            "dateOfExpiry", expected.dateOfExpiry,
            MRZ.expiryDate(mrz.dateOfExpiry, relativeTo: reference)?.description ?? mrz.dateOfExpiry
        ) { e, _ in
            ExpectedAttributes.date(e).map(yymmdd) == mrz.dateOfExpiry
        }
        check("sex", expected.sex, mrz.sex.rawValue, matches: ==)
        check("documentType", expected.documentType, mrz.documentCode) { e, actual in
            e.count == 1 ? actual.first.map(String.init) == e : actual == e
        }
        return mismatches
    }

    /// The attributes given in `expected` that a document without an MRZ (an mDL) does not match, in
    /// `ExpectedAttributes` key order; empty when all match.
    ///
    /// - Names: equal when any `nameForms` of the two sides agree (the document prints names in full: no
    ///   truncation rule); mismatches report the compared forms.
    /// - Dates: full dates, equal as YYYY-MM-DD; a birth date after `reference` never matches.
    /// - An expected expiry date, sex or nationality the document does not carry is a mismatch with `actual` "".
    /// - Document number: compared as `DocumentAttributes.comparableNumber` (upper-case letters and digits only: an
    ///   mDL may print separators the MRZ form has not).
    /// - Nationality and issuing state: Doc 9303 codes, equal (Germany's "D" and "DEU" are the same state).
    /// - Document type: the document's own type (an mDL's docType); a one- or two-letter MRZ type never matches it.
    public static func compare(
        _ expected: ExpectedAttributes, with document: DocumentAttributes,
        relativeTo reference: MRZDate = .today()
    ) -> [AttributeMismatch] {
        var mismatches: [AttributeMismatch] = []
        func check(
            _ attribute: String, _ expected: String?, _ actual: String,
            expectedShown: ((String) -> String)? = nil, matches: (String, String) -> Bool
        ) {
            guard let expected, !matches(expected, actual) else { return }
            mismatches.append(
                AttributeMismatch(attribute: attribute, expected: expectedShown?(expected) ?? expected, actual: actual))
        }
        let nameMatches = { (expected: String, actual: String) -> Bool in
            !nameForms(expected).isDisjoint(with: nameForms(actual))
        }
        let state = { (a: String, b: String) -> Bool in a == b || Set([a, b]) == ["D", "DEU"] }
        check(
            "surname", expected.surname, MRZ.comparableName(document.surname), expectedShown: MRZ.comparableName,
            matches: { e, _ in nameMatches(e, document.surname) })
        check(
            "givenNames", expected.givenNames, MRZ.comparableName(document.givenNames),
            expectedShown: MRZ.comparableName, matches: { e, _ in nameMatches(e, document.givenNames) })
        check("documentNumber", expected.documentNumber, document.documentNumber) {
            DocumentAttributes.comparableNumber($0) == DocumentAttributes.comparableNumber($1)
        }
        check("nationality", expected.nationality, document.nationality ?? "", matches: state)
        check("issuingState", expected.issuingState, document.issuingState, matches: state)
        check("dateOfBirth", expected.dateOfBirth, document.dateOfBirth) { e, actual in
            guard let date = ExpectedAttributes.date(e) else { return false }
            return date.description == actual && date <= reference
        }
        check("dateOfExpiry", expected.dateOfExpiry, document.dateOfExpiry ?? "") { e, actual in
            ExpectedAttributes.date(e)?.description == actual
        }
        check("sex", expected.sex, document.sex ?? "", matches: ==)
        check("documentType", expected.documentType, document.documentType, matches: ==)
        return mismatches
    }

    /// Whether the MRZ name field's last position holds a letter rather than a filler.
    static func nameFieldIsFull(_ mrz: MRZ) -> Bool {
        let line = mrz.format == .td1 ? mrz.lines.last : mrz.lines.first
        return line?.last.map { $0 != "<" } ?? false
    }

    /// The comparable forms an expected name may take in an MRZ.
    static func nameForms(_ name: String) -> Set<String> {
        [
            MRZ.comparableName(name),
            MRZ.comparableName(MRZ.withoutDiacritics(name)),
        ]
    }

    static func withoutFillers(_ s: String) -> String { s.filter { $0 != "<" } }

    static func yymmdd(_ d: MRZDate) -> String {
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : String(v) }
        return two(d.year % 100) + two(d.month) + two(d.day)
    }
}
