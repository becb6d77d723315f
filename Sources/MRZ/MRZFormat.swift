/// The machine-readable zone layouts of ICAO Doc 9303 Parts 4–7.
public enum MRZFormat: String, Sendable, Hashable, CaseIterable {
    /// ID-card size, 3 lines of 30 characters (Part 5).
    case td1 = "TD1"
    /// 2 lines of 36 characters (Part 6).
    case td2 = "TD2"
    /// Passport size, 2 lines of 44 characters (Part 4).
    case td3 = "TD3"
    /// Full-size visa, 2 lines of 44 characters (Part 7); first character 'V'.
    case mrvA = "MRV-A"
    /// Small visa, 2 lines of 36 characters (Part 7); first character 'V'.
    case mrvB = "MRV-B"

    /// Number of lines.
    public var lineCount: Int { self == .td1 ? 3 : 2 }

    /// Characters per line.
    public var lineLength: Int {
        switch self {
        case .td1: 30
        case .td2, .mrvB: 36
        case .td3, .mrvA: 44
        }
    }
}

/// A run of characters in the MRZ: 0-based line, 0-based start, length.
struct Span: Sendable {
    let line: Int
    let start: Int
    let length: Int
    init(_ line: Int, _ start: Int, _ length: Int) { self.line = line; self.start = start; self.length = length }
}

/// Where each field sits for one format.
struct Layout: Sendable {
    let documentCode = Span(0, 0, 2)
    let issuingState = Span(0, 2, 3)
    let name: Span
    let documentNumber: Span
    let documentNumberCheck: Span
    let nationality: Span
    let dateOfBirth: Span
    let dateOfBirthCheck: Span
    let sex: Span
    let dateOfExpiry: Span
    let dateOfExpiryCheck: Span
    let optionalData: Span
    /// TD3 only: the check digit over the personal number / optional data.
    let optionalDataCheck: Span?
    /// TD1 only.
    let optionalData2: Span?
    let composite: Span?
    let compositeRanges: [Span]
    /// Whether a document number longer than 9 may continue in `optionalData` (TD1, TD2).
    let allowsExtendedDocumentNumber: Bool

    static func of(_ format: MRZFormat) -> Layout {
        switch format {
        case .td1:
            return Layout(
                name: Span(2, 0, 30),
                documentNumber: Span(0, 5, 9), documentNumberCheck: Span(0, 14, 1),
                nationality: Span(1, 15, 3),
                dateOfBirth: Span(1, 0, 6), dateOfBirthCheck: Span(1, 6, 1),
                sex: Span(1, 7, 1),
                dateOfExpiry: Span(1, 8, 6), dateOfExpiryCheck: Span(1, 14, 1),
                optionalData: Span(0, 15, 15), optionalDataCheck: nil, optionalData2: Span(1, 18, 11),
                composite: Span(1, 29, 1),
                compositeRanges: [Span(0, 5, 25), Span(1, 0, 7), Span(1, 8, 7), Span(1, 18, 11)],
                allowsExtendedDocumentNumber: true)
        case .td2, .td3, .mrvA, .mrvB:
            let width = format.lineLength
            let optionalLength: Int
            switch format {
            case .td2: optionalLength = 7
            case .td3: optionalLength = 14
            case .mrvA: optionalLength = 16
            default: optionalLength = 8
            }
            let composite: Span?
            let ranges: [Span]
            switch format {
            case .td2:
                composite = Span(1, 35, 1)
                ranges = [Span(1, 0, 10), Span(1, 13, 7), Span(1, 21, 14)]
            case .td3:
                composite = Span(1, 43, 1)
                ranges = [Span(1, 0, 10), Span(1, 13, 7), Span(1, 21, 22)]
            default:
                composite = nil
                ranges = []
            }
            return Layout(
                name: Span(0, 5, width - 5),
                documentNumber: Span(1, 0, 9), documentNumberCheck: Span(1, 9, 1),
                nationality: Span(1, 10, 3),
                dateOfBirth: Span(1, 13, 6), dateOfBirthCheck: Span(1, 19, 1),
                sex: Span(1, 20, 1),
                dateOfExpiry: Span(1, 21, 6), dateOfExpiryCheck: Span(1, 27, 1),
                optionalData: Span(1, 28, optionalLength),
                optionalDataCheck: format == .td3 ? Span(1, 42, 1) : nil,
                optionalData2: nil,
                composite: composite, compositeRanges: ranges,
                allowsExtendedDocumentNumber: format == .td2)
        }
    }

    /// The field a position belongs to, for error messages: (field name, is a check digit).
    func field(line: Int, column: Int) -> (name: String, isCheckDigit: Bool) {
        var labelled: [(String, Bool, Span)] = [
            ("documentCode", false, documentCode), ("issuingState", false, issuingState), ("name", false, name),
            ("documentNumber", false, documentNumber), ("documentNumber", true, documentNumberCheck),
            ("nationality", false, nationality), ("dateOfBirth", false, dateOfBirth),
            ("dateOfBirth", true, dateOfBirthCheck), ("sex", false, sex), ("dateOfExpiry", false, dateOfExpiry),
            ("dateOfExpiry", true, dateOfExpiryCheck), ("optionalData", false, optionalData),
        ]
        if let optionalDataCheck { labelled.append(("optionalData", true, optionalDataCheck)) }
        if let optionalData2 { labelled.append(("optionalData2", false, optionalData2)) }
        if let composite { labelled.append(("composite", true, composite)) }
        for (name, isCheck, span) in labelled
        where span.line == line && column >= span.start && column < span.start + span.length {
            return (name, isCheck)
        }
        return ("unknown", false)
    }
}
