import TesseraCore

/// What unlocks a document chip: the MRZ information (BAC, or PACE with the MRZ password) or a
/// 6-digit Card Access Number (PACE with the CAN password).
///
/// BAC/PACE code derives K_seed = SHA-1(`mrzInformation`)[0..<16] (Doc 9303 Part 11 §9.7.2) and the PACE
/// password from `passwordBytes`/`paceReference`. Construct through `init(mrz:)`, `fromFields(…)` or
/// `init(can:)`, which validate; the cases themselves are not checked.
public enum DocumentAccessKey: Sendable, Hashable {
    /// Document number + check digit + date of birth + check digit + date of expiry + check digit.
    case mrz(mrzInformation: String)
    /// Card Access Number, 6 digits.
    case can(String)

    /// The key from a verified MRZ (uses the full number for extended TD1/TD2 document numbers).
    public init(mrz: MRZ) { self = .mrz(mrzInformation: mrz.mrzInformation) }

    /// A validated CAN: exactly 6 ASCII digits once surrounding white space is removed.
    /// Throws `INVALID_INPUT` (`details.field` = "can").
    public init(can: String) throws(TesseraError) {
        let trimmed = DocumentAccessKey.trimWhitespace(can)
        guard trimmed.utf8.count == 6, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw TesseraError(.invalidInput, "CAN must be exactly 6 digits", details: ["field": "can"])
        }
        self = .can(trimmed)
    }

    /// The key from fields typed by a person: the document number is upper-cased, trailing '<'
    /// removed, and padded with '<' to 9 characters when shorter (longer numbers are used whole);
    /// dates must be YYMMDD with a real month and day. Check digits are computed here.
    /// Throws `INVALID_INPUT` with `details.field` naming the bad field.
    public static func fromFields(documentNumber: String, dateOfBirth: String, dateOfExpiry: String)
        throws(TesseraError) -> DocumentAccessKey
    {
        var number = Array(trimWhitespace(documentNumber).uppercased().utf8)
        while number.last == MRZ.filler { number.removeLast() }
        guard !number.isEmpty else {
            throw TesseraError(.invalidInput, "documentNumber is empty", details: ["field": "documentNumber"])
        }
        guard number.allSatisfy({ (0x41...0x5A).contains($0) || (0x30...0x39).contains($0) }) else {
            throw TesseraError(
                .invalidInput, "documentNumber may contain only A-Z and 0-9",
                details: ["field": "documentNumber"])
        }
        let numberText = MRZ.padded(String(decoding: number, as: UTF8.self))
        var parts = numberText + String(MRZ.checkDigit(numberText))
        for (name, value) in [("dateOfBirth", dateOfBirth), ("dateOfExpiry", dateOfExpiry)] {
            let d = trimWhitespace(value)
            guard MRZDate.isValidYYMMDD(d) else {
                throw TesseraError(
                    .invalidInput, "\(name) must be YYMMDD with a valid month and day",
                    details: ["field": .string(name)])
            }
            parts += d + String(MRZ.checkDigit(d))
        }
        return .mrz(mrzInformation: parts)
    }

    /// The MRZ information string, nil for a CAN.
    public var mrzInformation: String? {
        if case .mrz(let info) = self { return info }
        return nil
    }

    /// The ASCII bytes of the MRZ information or of the CAN. For MRZ keys this is the input to
    /// SHA-1 (BAC K_seed, PACE password π = SHA-1(MRZ information)); for a CAN it is π itself.
    public var passwordBytes: [UInt8] {
        switch self {
        case .mrz(let info): Array(info.utf8)
        case .can(let can): Array(can.utf8)
        }
    }

    /// PACE password reference (BSI TR-03110 / Doc 9303 Part 11): 1 = MRZ, 2 = CAN.
    public var paceReference: UInt8 {
        switch self {
        case .mrz: 1
        case .can: 2
        }
    }

    static func trimWhitespace(_ s: String) -> String {
        var v = Array(s.unicodeScalars)
        while let f = v.first, f.properties.isWhitespace { v.removeFirst() }
        while let l = v.last, l.properties.isWhitespace { v.removeLast() }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: v)
        return String(out)
    }
}

/// The name used by the access-key helpers in the design notes; identical to `DocumentAccessKey`.
public typealias AccessKeyInput = DocumentAccessKey

extension MRZ {
    /// This document's access key (`DocumentAccessKey.mrz` with `mrzInformation`).
    public var accessKey: DocumentAccessKey { DocumentAccessKey(mrz: self) }
}

extension DocumentAccessKey {
    /// The key from request parameters holding exactly one of: `mrz` (the MRZ text), `documentNumber` +
    /// `dateOfBirth` + `dateOfExpiry` (YYMMDD), or `can`. INVALID_INPUT / MRZ_INVALID name what is wrong.
    public init(params p: Params) throws(TesseraError) {
        let fields = ["documentNumber", "dateOfBirth", "dateOfExpiry"]
        let kinds = [p.has("mrz"), fields.contains { p.has($0) }, p.has("can")].filter { $0 }.count
        guard kinds == 1 else {
            throw TesseraError.invalidInput(
                "give exactly one access key: mrz, documentNumber+dateOfBirth+dateOfExpiry, or can")
        }
        if let text = try p.optionalString("mrz") {
            self = try MRZ.parse(text).accessKey
        } else if let can = try p.optionalString("can") {
            self = try DocumentAccessKey(can: can)
        } else {
            self = try DocumentAccessKey.fromFields(
                documentNumber: p.string("documentNumber"),
                dateOfBirth: p.string("dateOfBirth"), dateOfExpiry: p.string("dateOfExpiry"))
        }
    }
}
