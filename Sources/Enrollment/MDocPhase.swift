import CBOR
import FoundationEssentials
import MDoc
import MRZ
import TesseraCore

/// What MDOC_PHASE asks the daemon's mdoc reader for.
public struct MDocReadOrder: Sendable, Equatable {
    /// The reader holding the mdoc (nil: the first one with a card).
    public var reader: String?
    public var docType: String
    /// namespace → element identifiers.
    public var elements: [String: [String]]

    public init(reader: String?, docType: String, elements: [String: [String]]) {
        self.reader = reader; self.docType = docType; self.elements = elements
    }
}

/// An mdoc read and verified by the daemon (the `mdoc.read` path: retrieval, then `MDocVerifier` against the IACAs).
public struct MDocReadOutcome: Sendable {
    public var reader: String
    public var documents: [MDocVerification]

    public init(reader: String, documents: [MDocVerification]) {
        self.reader = reader; self.documents = documents
    }
}

/// Reads and verifies an mdoc for MDOC_PHASE. The daemon provides it (it holds the IACAs and the readerAuth key);
/// `progress` receives `mdoc.progress`-shaped objects `{phase, apdus?, bytes?}`.
public typealias MDocReading =
    @Sendable (MDocReadOrder, _ progress: @escaping @Sendable (JSONValue) -> Void) async throws(TesseraError) ->
    MDocReadOutcome

/// A document's identity attributes in a document-neutral form, for ATTRIBUTE_MATCHING when the document has no
/// MRZ (an mDL): names as the document prints them, full dates, the Doc 9303 three-letter state codes.
public struct DocumentAttributes: Sendable, Equatable {
    public var surname: String
    public var givenNames: String
    public var documentNumber: String
    /// Doc 9303 code (ISO 3166-1 alpha-3, "D" for Germany).
    public var issuingState: String
    public var nationality: String?
    /// YYYY-MM-DD.
    public var dateOfBirth: String
    /// YYYY-MM-DD.
    public var dateOfExpiry: String?
    /// "M", "F" or "X".
    public var sex: String?
    /// The document's type: for an mDL its docType.
    public var documentType: String

    public init(
        surname: String, givenNames: String, documentNumber: String, issuingState: String, nationality: String?,
        dateOfBirth: String, dateOfExpiry: String?, sex: String?, documentType: String
    ) {
        self.surname = surname; self.givenNames = givenNames; self.documentNumber = documentNumber
        self.issuingState = issuingState; self.nationality = nationality; self.dateOfBirth = dateOfBirth
        self.dateOfExpiry = dateOfExpiry; self.sex = sex; self.documentType = documentType
    }

    /// The mDL elements (namespace `org.iso.18013.5.1`, identifier → value) MDOC_PHASE requests and maps.
    public static let mdlElements = [
        "family_name", "given_name", "birth_date", "document_number", "issuing_country", "expiry_date", "sex",
        "nationality",
    ]

    /// From an mDL's `org.iso.18013.5.1` elements: family_name, given_name, birth_date (full-date),
    /// document_number and issuing_country (ISO 3166-1 alpha-2) are required; expiry_date (full-date or tdate),
    /// sex (ISO/IEC 5218: 1 → M, 2 → F, 0 and 9 → X) and nationality (alpha-2) are taken when present.
    /// MALFORMED_DATA names the first element missing or of the wrong form.
    public init(mdl elements: [String: CBORValue], docType: String) throws(TesseraError) {
        func text(_ id: String) throws(TesseraError) -> String {
            guard let s = elements[id]?.textValue, !s.isEmpty else { throw Self.malformed(id, "is missing") }
            return s
        }
        func date(_ id: String) throws(TesseraError) -> String? {
            guard let value = elements[id] else { return nil }
            guard let d = Self.date(value) else { throw Self.malformed(id, "is not a date") }
            return d
        }
        func country(_ id: String) throws(TesseraError) -> String? {
            guard let value = elements[id] else { return nil }
            guard let alpha2 = value.textValue, let code = CountryCodes.docCode(alpha2: alpha2) else {
                throw Self.malformed(id, "is not an ISO 3166-1 alpha-2 code")
            }
            return code
        }
        let surname = try text("family_name")
        // given_name is required by 18013-5; a holder without given names has an empty one.
        guard let given = elements["given_name"]?.textValue else { throw Self.malformed("given_name", "is missing") }
        let number = try text("document_number")
        guard let birth = try date("birth_date") else { throw Self.malformed("birth_date", "is missing") }
        guard let state = try country("issuing_country") else {
            throw Self.malformed("issuing_country", "is missing")
        }
        var sex: String?
        if let value = elements["sex"] {
            switch value.int64Value {
            case 1: sex = "M"
            case 2: sex = "F"
            case 0, 9: sex = "X"
            default: throw Self.malformed("sex", "is not an ISO/IEC 5218 code")
            }
        }
        self.init(
            surname: surname, givenNames: given, documentNumber: number, issuingState: state,
            nationality: try country("nationality"), dateOfBirth: birth, dateOfExpiry: try date("expiry_date"),
            sex: sex, documentType: docType)
    }

    /// "YYYY-MM-DD" of a full-date (`#6.1004`), a tdate (`#6.0`, its date part) or a plain date text.
    static func date(_ value: CBORValue) -> String? {
        var inner = value
        if case .tagged(let tag, let v) = value {
            guard tag == 1004 || tag == 0 else { return nil }
            inner = v
        }
        guard let s = inner.textValue, s.utf8.count >= 10 else { return nil }
        let day = String(s.prefix(10))
        guard ExpectedAttributes.date(day) != nil, s.utf8.count == 10 || s.dropFirst(10).first == "T" else {
            return nil
        }
        return day
    }

    /// A document number as compared and bound: its letters A–Z (upper-cased) and digits, nothing else.
    static func comparableNumber(_ number: String) -> String {
        String(number.uppercased().unicodeScalars.filter { ("A"..."Z").contains($0) || ("0"..."9").contains($0) })
    }

    static func malformed(_ element: String, _ problem: String) -> TesseraError {
        TesseraError(.malformedData, "the mDL's \(element) \(problem)", details: ["element": .string(element)])
    }

    /// The stored form (`transactionData.documentAttributes`).
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "surname": .string(surname), "givenNames": .string(givenNames), "documentNumber": .string(documentNumber),
            "issuingState": .string(issuingState), "dateOfBirth": .string(dateOfBirth),
            "documentType": .string(documentType),
        ]
        if let nationality { o["nationality"] = .string(nationality) }
        if let dateOfExpiry { o["dateOfExpiry"] = .string(dateOfExpiry) }
        if let sex { o["sex"] = .string(sex) }
        return .object(o)
    }

    /// The stored form read back.
    public init(json: JSONValue) throws(TesseraError) {
        guard let surname = json["surname"]?.stringValue, let given = json["givenNames"]?.stringValue,
            let number = json["documentNumber"]?.stringValue, let state = json["issuingState"]?.stringValue,
            let birth = json["dateOfBirth"]?.stringValue, let type = json["documentType"]?.stringValue
        else { throw TesseraError(.internalError, "the stored document attributes do not parse") }
        self.init(
            surname: surname, givenNames: given, documentNumber: number, issuingState: state,
            nationality: json["nationality"]?.stringValue, dateOfBirth: birth,
            dateOfExpiry: json["dateOfExpiry"]?.stringValue, sex: json["sex"]?.stringValue, documentType: type)
    }

    /// The `document` summary MDOC_PHASE stores (`transactionData.document`, read by the identity binding):
    /// names in `MRZ.comparableName` form, as NFC_PHASE stores them, the document number as `comparableNumber`.
    func summary(_ verification: MDocVerification) -> [String: JSONValue] {
        var o: [String: JSONValue] = [
            "documentType": .string(documentType), "docType": .string(verification.docType),
            "issuingState": .string(issuingState), "documentNumber": .string(Self.comparableNumber(documentNumber)),
            "surname": .string(MRZ.comparableName(surname)), "givenNames": .string(MRZ.comparableName(givenNames)),
            "dateOfBirth": .string(dateOfBirth), "verdict": .string(verification.verdict.rawValue),
            "issuerSignature": .string(verification.issuerSignature.rawValue),
            "certificateChain": .string(verification.certificateChain.rawValue),
            "deviceAuthentication": .string(verification.deviceAuthenticationKind ?? "none"),
        ]
        if let nationality { o["nationality"] = .string(nationality) }
        if let dateOfExpiry { o["dateOfExpiry"] = .string(dateOfExpiry) }
        if let sex { o["sex"] = .string(sex) }
        if let signer = verification.documentSigner { o["documentSigner"] = .string(signer.subjectDescription) }
        return o
    }
}

extension MDocVerification {
    /// DOCUMENT_NOT_AUTHENTIC for an mdoc whose verdict is not `authentic`: the verdict and its reasons.
    var notAuthenticError: TesseraError {
        TesseraError(
            .documentNotAuthentic,
            "the mDL is \(verdict.rawValue): " + reasons.map(\.rawValue).joined(separator: ", "),
            details: [
                "verdict": .string(verdict.rawValue), "reasons": .array(reasons.map { .string($0.rawValue) }),
                "digestFailures": .array(
                    elements.filter { !$0.digestValid }.map { .string("\($0.namespace)/\($0.identifier)") }),
            ])
    }

    /// The elements of one namespace, identifier → value.
    func elements(in namespace: String) -> [String: CBORValue] {
        var out: [String: CBORValue] = [:]
        for e in elements where e.namespace == namespace { out[e.identifier] = e.value }
        return out
    }
}

extension EnrollmentEngine {
    /// The elements MDOC_PHASE requests: those it maps, and the step's `elements`.
    static func mdocElements(_ step: WorkflowStep) -> [String: [String]] {
        var out: [String: [String]] = [MDL.namespace: DocumentAttributes.mdlElements]
        for text in (step.settings["elements"]?.arrayValue ?? []).compactMap(\.stringValue) {
            var namespace = MDL.namespace
            var identifier = text
            if let slash = text.lastIndex(of: "/") {
                namespace = String(text[..<slash])
                identifier = String(text[text.index(after: slash)...])
            }
            if !(out[namespace]?.contains(identifier) ?? false) { out[namespace, default: []].append(identifier) }
        }
        return out
    }
}
