import TesseraCore

/// A parsed and fully check-digit-verified ICAO Doc 9303 machine-readable zone.
///
/// Input handling (`init(_:)`): surrounding white space is ignored; lines may be separated by
/// LF, CRLF or CR (blank lines and spaces/tabs around each line are ignored) or given
/// concatenated (90, 72 or 88 characters). Lower-case ASCII letters are upper-cased before
/// parsing (the MRZ has no lower case, so this only helps typed or OCR'd input); every other
/// character outside 'A'–'Z', '0'–'9', '<' is rejected with its position.
/// Text fields have fillers at their end removed; names use a space where the MRZ has '<'.
public struct MRZ: Sendable, Hashable {
    public let format: MRZFormat
    /// The MRZ lines as parsed (upper-cased, without separators).
    public let lines: [String]
    /// Document code, e.g. "P", "I", "ID", "V" (fillers removed).
    public let documentCode: String
    public let issuingState: String
    /// The document number without trailing fillers; for an extended TD1/TD2 number
    /// (Doc 9303 Parts 5/6) the full number including the part carried in the optional data.
    public let documentNumber: String
    public let documentNumberCheckDigit: Character
    /// True when the document number was longer than 9 characters and continued in the optional data.
    public let hasExtendedDocumentNumber: Bool
    /// Primary identifier (surname), '<' turned into spaces.
    public let primaryIdentifier: String
    /// Secondary identifier (given names), '<' turned into spaces; empty when absent.
    public let secondaryIdentifier: String
    public let nationality: String
    /// Date of birth as printed, YYMMDD (may contain '<' for unknown parts).
    public let dateOfBirth: String
    public let dateOfBirthCheckDigit: Character
    public let sex: Sex
    /// Date of expiry as printed, YYMMDD.
    public let dateOfExpiry: String
    public let dateOfExpiryCheckDigit: Character
    /// Optional data (TD1: upper line, after any document-number extension; TD3: personal number).
    public let optionalData: String
    /// TD1 only: optional data of the middle line. Nil for other formats.
    public let optionalData2: String?

    /// Sex as encoded in the MRZ.
    public enum Sex: String, Sendable, Hashable {
        case male = "M"
        case female = "F"
        /// 'X' or '<' in the MRZ.
        case unspecified = "X"
    }

    /// The lines joined with "\n".
    public var raw: String { lines.joined(separator: "\n") }

    /// Parses and verifies an MRZ. Throws `MRZ_INVALID` naming the field and the 1-based line and
    /// column that failed (`details`: `field`, `line`, `column`, and for check digits `expected`, `found`).
    public init(_ text: String) throws(TesseraError) {
        var scalarLines = try MRZ.splitLines(text)
        let format = try MRZ.detectFormat(&scalarLines)
        let layout = Layout.of(format)

        var byteLines: [[UInt8]] = []
        for (li, line) in scalarLines.enumerated() {
            var bytes: [UInt8] = []
            for (ci, s) in line.enumerated() {
                guard s.isASCII, MRZ.isMRZCharacter(UInt8(s.value)) else {
                    let f = layout.field(line: li, column: ci)
                    let what = f.isCheckDigit ? "check digit of \(f.name)" : f.name
                    throw MRZ.failure(
                        "invalid character '\(MRZ.printable(s))' in \(what) at line \(li + 1) col \(ci + 1)",
                        field: f.name, line: li, column: ci)
                }
                bytes.append(UInt8(s.value))
            }
            byteLines.append(bytes)
        }
        let reader = Reader(lines: byteLines)

        // Sex and dates are checked for form before any check digit, so a misread letter is named precisely.
        let sexByte = reader.bytes(layout.sex)[0]
        switch sexByte {
        case UInt8(ascii: "M"): sex = .male
        case UInt8(ascii: "F"): sex = .female
        case UInt8(ascii: "X"), MRZ.filler: sex = .unspecified
        default:
            throw MRZ.failure(
                "invalid sex '\(Character(Unicode.Scalar(sexByte)))' at line \(layout.sex.line + 1) "
                    + "col \(layout.sex.start + 1) (expected M, F, X or <)",
                field: "sex", line: layout.sex.line, column: layout.sex.start)
        }
        try MRZ.checkDate(reader, layout.dateOfBirth, field: "dateOfBirth", allowFiller: true)
        try MRZ.checkDate(reader, layout.dateOfExpiry, field: "dateOfExpiry", allowFiller: false)

        self.format = format
        self.lines = byteLines.map { String(decoding: $0, as: UTF8.self) }
        documentCode = reader.text(layout.documentCode, trim: .both)
        issuingState = reader.text(layout.issuingState, trim: .both)
        nationality = reader.text(layout.nationality, trim: .both)
        dateOfBirth = reader.text(layout.dateOfBirth, trim: .none)
        dateOfExpiry = reader.text(layout.dateOfExpiry, trim: .none)
        optionalData2 = layout.optionalData2.map { reader.text($0, trim: .trailing) }
        (primaryIdentifier, secondaryIdentifier) = MRZ.splitName(reader.bytes(layout.name))

        // Document number, possibly extended into the optional data (Doc 9303 Part 5 §4.2.2, Part 6 §4.2.2).
        let numberBytes = reader.bytes(layout.documentNumber)
        let printedCheck = reader.bytes(layout.documentNumberCheck)[0]
        if layout.allowsExtendedDocumentNumber, printedCheck == MRZ.filler, !numberBytes.contains(MRZ.filler) {
            let optional = reader.bytes(layout.optionalData)
            let run = Array(optional.prefix { $0 != MRZ.filler })
            let o = layout.optionalData
            guard run.count >= 2 else {
                throw MRZ.failure(
                    "documentNumber extension missing: check digit position holds '<' but optional data "
                        + "at line \(o.line + 1) col \(o.start + 1) carries no continuation and check digit",
                    field: "documentNumber", line: o.line, column: o.start)
            }
            let full = numberBytes + run.dropLast()
            try MRZ.verify(
                full, against: run[run.count - 1], field: "documentNumber",
                line: o.line, column: o.start + run.count - 1)
            documentNumber = String(decoding: full, as: UTF8.self)
            documentNumberCheckDigit = Character(Unicode.Scalar(run[run.count - 1]))
            hasExtendedDocumentNumber = true
            let rest = optional.dropFirst(min(optional.count, run.count + 1))
            optionalData = MRZ.trimmed(Array(rest), .trailing)
        } else {
            let c = layout.documentNumberCheck
            try MRZ.verify(numberBytes, against: printedCheck, field: "documentNumber", line: c.line, column: c.start)
            documentNumber = MRZ.trimmed(numberBytes, .trailing)
            documentNumberCheckDigit = Character(Unicode.Scalar(printedCheck))
            hasExtendedDocumentNumber = false
            optionalData = reader.text(layout.optionalData, trim: .trailing)
        }

        let dobCheck = reader.bytes(layout.dateOfBirthCheck)[0]
        try MRZ.verify(
            reader.bytes(layout.dateOfBirth), against: dobCheck, field: "dateOfBirth",
            line: layout.dateOfBirthCheck.line, column: layout.dateOfBirthCheck.start)
        dateOfBirthCheckDigit = Character(Unicode.Scalar(dobCheck))
        let doeCheck = reader.bytes(layout.dateOfExpiryCheck)[0]
        try MRZ.verify(
            reader.bytes(layout.dateOfExpiry), against: doeCheck, field: "dateOfExpiry",
            line: layout.dateOfExpiryCheck.line, column: layout.dateOfExpiryCheck.start)
        dateOfExpiryCheckDigit = Character(Unicode.Scalar(doeCheck))

        if let span = layout.optionalDataCheck {
            // TD3 (Part 4 §4.2.2): when the personal number is all fillers its check digit may be '<' or '0'.
            let data = reader.bytes(layout.optionalData)
            let printed = reader.bytes(span)[0]
            if !(data.allSatisfy { $0 == MRZ.filler } && (printed == MRZ.filler || printed == UInt8(ascii: "0"))) {
                try MRZ.verify(data, against: printed, field: "optionalData", line: span.line, column: span.start)
            }
        }
        if let span = layout.composite {
            let data = layout.compositeRanges.flatMap { reader.bytes($0) }
            try MRZ.verify(
                data, against: reader.bytes(span)[0], field: "composite", line: span.line, column: span.start)
        }
    }

    /// Same as `init(_:)`.
    public static func parse(_ text: String) throws(TesseraError) -> MRZ { try MRZ(text) }

    /// The document number as used in the MRZ information for BAC/PACE: the printed 9 characters
    /// (filler-padded), or the full number for an extended TD1/TD2 number.
    public var documentNumberForAccessKey: String {
        hasExtendedDocumentNumber ? documentNumber : MRZ.padded(documentNumber)
    }

    /// The "MRZ information" of Doc 9303 Part 11 §9.7.2 (BAC) / §4.4 (PACE password):
    /// document number + check digit + date of birth + check digit + date of expiry + check digit.
    public var mrzInformation: String {
        documentNumberForAccessKey + String(documentNumberCheckDigit) + dateOfBirth + String(dateOfBirthCheckDigit)
            + dateOfExpiry + String(dateOfExpiryCheckDigit)
    }

    /// The stable public field set: keys documentCode, issuingState, documentNumber,
    /// primaryIdentifier, secondaryIdentifier, nationality, dateOfBirth (YYMMDD), sex ("M", "F"
    /// or "X" for unspecified), dateOfExpiry (YYMMDD), optionalData.
    public func jsonFields() -> [String: String] {
        [
            "documentCode": documentCode,
            "issuingState": issuingState,
            "documentNumber": documentNumber,
            "primaryIdentifier": primaryIdentifier,
            "secondaryIdentifier": secondaryIdentifier,
            "nationality": nationality,
            "dateOfBirth": dateOfBirth,
            "sex": sex.rawValue,
            "dateOfExpiry": dateOfExpiry,
            "optionalData": optionalData,
        ]
    }
}

// MARK: - Parsing helpers

extension MRZ {
    enum Trim { case none, trailing, both }

    struct Reader {
        let lines: [[UInt8]]
        func bytes(_ s: Span) -> [UInt8] { Array(lines[s.line][s.start..<(s.start + s.length)]) }
        func text(_ s: Span, trim: Trim) -> String { MRZ.trimmed(bytes(s), trim) }
    }

    static func trimmed(_ b: [UInt8], _ trim: Trim) -> String {
        var slice = b[...]
        if trim != .none { while slice.last == filler { slice = slice.dropLast() } }
        if trim == .both { while slice.first == filler { slice = slice.dropFirst() } }
        return String(decoding: slice, as: UTF8.self)
    }

    static func padded(_ number: String) -> String {
        number.count >= 9 ? number : number + String(repeating: "<", count: 9 - number.count)
    }

    static func printable(_ s: Unicode.Scalar) -> String {
        s.properties.isWhitespace || s.value < 0x20 ? "U+" + String(s.value, radix: 16, uppercase: true) : String(s)
    }

    /// Splits into non-empty lines of Unicode scalars, trimmed and with a–z upper-cased.
    static func splitLines(_ text: String) throws(TesseraError) -> [[Unicode.Scalar]] {
        var lines: [[Unicode.Scalar]] = []
        var current: [Unicode.Scalar] = []
        func flush() {
            var l = current[...]
            while let f = l.first, f == " " || f == "\t" { l = l.dropFirst() }
            while let e = l.last, e == " " || e == "\t" { l = l.dropLast() }
            if !l.isEmpty { lines.append(Array(l)) }
            current = []
        }
        for s in text.unicodeScalars {
            if s == "\n" || s == "\r" { flush(); continue }
            if ("a"..."z").contains(s) {
                current.append(Unicode.Scalar(s.value - 0x20) ?? s)
            } else {
                current.append(s)
            }
        }
        flush()
        guard !lines.isEmpty else {
            throw TesseraError(.mrzInvalid, "MRZ is empty")
        }
        return lines
    }

    /// Picks the format from the shape and, for 2-line zones, the first character ('V' = visa).
    /// A single line of 90, 72 or 88 characters is split into 3×30, 2×36 or 2×44.
    static func detectFormat(_ lines: inout [[Unicode.Scalar]]) throws(TesseraError) -> MRZFormat {
        if lines.count == 1 {
            let l = lines[0]
            let width: Int? =
                switch l.count {
                case 90: 30;
                case 72: 36;
                case 88: 44;
                default: nil
                }
            if let width { lines = stride(from: 0, to: l.count, by: width).map { Array(l[$0..<($0 + width)]) } }
        }
        let lengths = lines.map(\.count)
        let isVisa = lines[0].first == "V"
        switch (lines.count, Set(lengths)) {
        case (3, [30]): return .td1
        case (2, [36]): return isVisa ? .mrvB : .td2
        case (2, [44]): return isVisa ? .mrvA : .td3
        default:
            throw TesseraError(
                .mrzInvalid,
                "MRZ must be 3 lines of 30, 2 lines of 36 or 2 lines of 44 characters (got line lengths "
                    + lengths.map(String.init).joined(separator: ", ") + ")",
                details: ["field": "format", "lineLengths": .array(lengths.map { .number(Double($0)) })])
        }
    }

    static func checkDate(_ reader: Reader, _ span: Span, field: String, allowFiller: Bool) throws(TesseraError) {
        for (i, b) in reader.bytes(span).enumerated() where !(0x30...0x39).contains(b) && !(allowFiller && b == filler)
        {
            throw failure(
                "\(field) must be digits (YYMMDD) but has '\(Character(Unicode.Scalar(b)))' at line "
                    + "\(span.line + 1) col \(span.start + i + 1)",
                field: field, line: span.line, column: span.start + i)
        }
    }

    static func verify(_ data: [UInt8], against printed: UInt8, field: String, line: Int, column: Int)
        throws(TesseraError)
    {
        let expected = checkDigit(bytes: data)
        let found = Character(Unicode.Scalar(printed))
        guard expected != found else { return }
        throw failure(
            "check digit of \(field) wrong at line \(line + 1) col \(column + 1) "
                + "(expected \(expected), found \(found))",
            field: field, line: line, column: column,
            extra: ["expected": .string(String(expected)), "found": .string(String(found))])
    }

    /// `line` and `column` are 0-based here; the error carries them 1-based.
    static func failure(
        _ message: String, field: String, line: Int, column: Int,
        extra: [String: JSONValue] = [:]
    ) -> TesseraError {
        var details: [String: JSONValue] = [
            "field": .string(field), "line": .number(Double(line + 1)), "column": .number(Double(column + 1)),
        ]
        details.merge(extra) { a, _ in a }
        return TesseraError(.mrzInvalid, message, details: details)
    }

    /// Splits the name field at the first "<<"; each remaining '<' run becomes one space.
    static func splitName(_ field: [UInt8]) -> (String, String) {
        var primary = field[...]
        var secondary: ArraySlice<UInt8> = []
        if let i = field.indices.first(where: { $0 + 1 < field.count && field[$0] == filler && field[$0 + 1] == filler }
        ) {
            primary = field[..<i]
            secondary = field[(i + 2)...]
        }
        func words(_ s: ArraySlice<UInt8>) -> String {
            s.split(separator: filler).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
        }
        return (words(primary), words(secondary))
    }
}
