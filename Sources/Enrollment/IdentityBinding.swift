import Crypto
import FoundationEssentials
import MRZ
import TesseraCore

/// The identity attributes of a verified document that a binding keeps (as hashes) and compares.
public struct DocumentIdentity: Sendable, Equatable {
    public var issuingState: String
    /// The first letter of the document code: "P" passport, "I" / "A" / "C" identity cards, …
    public var documentType: String
    public var documentNumber: String
    public var surname: String
    public var givenNames: String
    /// YYYY-MM-DD, or the MRZ's YYMMDD when the century cannot be told.
    public var birthDate: String

    public init(
        issuingState: String, documentType: String, documentNumber: String, surname: String,
        givenNames: String, birthDate: String
    ) {
        self.issuingState = issuingState; self.documentType = documentType; self.documentNumber = documentNumber
        self.surname = surname; self.givenNames = givenNames; self.birthDate = birthDate
    }

    /// From a chip's DG1.
    public init(mrz: MRZ) {
        self.init(
            issuingState: mrz.issuingState, documentType: String(mrz.documentCode.prefix(1)),
            documentNumber: mrz.documentNumber, surname: mrz.primaryIdentifier, givenNames: mrz.secondaryIdentifier,
            birthDate: mrz.birthDate()?.description ?? mrz.dateOfBirth)
    }

    /// From an enrollment's NFC_PHASE document summary (`transactionData.document`); nil when a field is missing.
    public init?(summary: JSONValue) {
        guard let state = summary["issuingState"]?.stringValue, let type = summary["documentType"]?.stringValue,
            let number = summary["documentNumber"]?.stringValue, let surname = summary["surname"]?.stringValue,
            let given = summary["givenNames"]?.stringValue, let birth = summary["dateOfBirth"]?.stringValue
        else { return nil }
        self.init(
            issuingState: state, documentType: type, documentNumber: number, surname: surname,
            givenNames: given, birthDate: birth)
    }
}

/// What a passkey created after a verified document read records about the person: issuing state and document
/// type in clear, the document number, the names and the birth date only as keyed, salted hashes (HMAC-SHA-256
/// under a key derived from the daemon's secret, with a random salt per binding), and the enrollment id. A copy
/// of the database without the daemon's secret cannot test guesses against the hashes.
public struct IdentityBinding: Sendable, Equatable {
    public var issuingState: String
    public var documentType: String
    public var salt: [UInt8]
    public var documentNumberHash: [UInt8]
    public var namesHash: [UInt8]
    public var birthDateHash: [UInt8]
    public var enrollmentId: String?
    public var createdAt: Date

    static let keyInfo = Array("tessera identity binding v1".utf8)

    /// A new binding of `identity` (a fresh random salt unless given).
    public init(
        identity: DocumentIdentity, secret: [UInt8], enrollmentId: String?, createdAt: Date = Date(),
        salt: [UInt8] = SecureRandom.bytes(16)
    ) {
        let h = Self.hashes(identity, secret: secret, salt: salt)
        self.issuingState = identity.issuingState; self.documentType = identity.documentType; self.salt = salt
        self.documentNumberHash = h.number; self.namesHash = h.names; self.birthDateHash = h.birth
        self.enrollmentId = enrollmentId
        self.createdAt = Date(timeIntervalSince1970: createdAt.timeIntervalSince1970.rounded(.down))
    }

    /// The fields of `identity` that differ from the bound person ("issuingState", "documentType",
    /// "documentNumber", "names", "birthDate"); empty when it is the same document. Hashes compare in constant time.
    public func mismatches(_ identity: DocumentIdentity, secret: [UInt8]) -> [String] {
        let h = Self.hashes(identity, secret: secret, salt: salt)
        var out: [String] = []
        if identity.issuingState != issuingState { out.append("issuingState") }
        if identity.documentType != documentType { out.append("documentType") }
        if !ConstantTime.equal(h.number, documentNumberHash) { out.append("documentNumber") }
        if !ConstantTime.equal(h.names, namesHash) { out.append("names") }
        if !ConstantTime.equal(h.birth, birthDateHash) { out.append("birthDate") }
        return out
    }

    /// Whether the person is the bound one: same names and birth date, and the same issuing state. A renewed
    /// document (another number) of the same person still matches.
    public func isSamePerson(_ identity: DocumentIdentity, secret: [UInt8]) -> Bool {
        mismatches(identity, secret: secret).allSatisfy { $0 == "documentNumber" || $0 == "documentType" }
    }

    static func hashes(_ i: DocumentIdentity, secret: [UInt8], salt: [UInt8]) -> (
        number: [UInt8], names: [UInt8], birth: [UInt8]
    ) {
        let key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), salt: salt, info: keyInfo,
            outputByteCount: 32)
        func mac(_ label: String, _ value: String) -> [UInt8] {
            Array(HMAC<SHA256>.authenticationCode(for: Array("\(label)\u{0}\(value)".utf8), using: key))
        }
        let number = i.documentNumber.uppercased().filter { $0 != "<" && $0 != " " }
        let names = MRZ.comparableName(i.surname) + "<<" + MRZ.comparableName(i.givenNames)
        return (mac("documentNumber", number), mac("names", names), mac("birthDate", i.birthDate))
    }

    /// The stored form (JSON text in the credential record).
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "v": .number(1), "issuingState": .string(issuingState), "documentType": .string(documentType),
            "salt": .string(Base64URL.encode(salt)), "documentNumber": .string(Base64URL.encode(documentNumberHash)),
            "names": .string(Base64URL.encode(namesHash)), "birthDate": .string(Base64URL.encode(birthDateHash)),
            "createdAt": .number(createdAt.timeIntervalSince1970),
        ]
        if let enrollmentId { o["enrollmentId"] = .string(enrollmentId) }
        return .object(o)
    }

    public var text: String { String(decoding: json.serialized(), as: UTF8.self) }

    /// The stored form read back; nil when it does not parse.
    public init?(text: String) {
        guard let o = try? JSONValue.parse(Array(text.utf8)), o["v"]?.intValue == 1,
            let state = o["issuingState"]?.stringValue, let type = o["documentType"]?.stringValue,
            let salt = o["salt"]?.stringValue.flatMap(Base64URL.decode),
            let number = o["documentNumber"]?.stringValue.flatMap(Base64URL.decode),
            let names = o["names"]?.stringValue.flatMap(Base64URL.decode),
            let birth = o["birthDate"]?.stringValue.flatMap(Base64URL.decode)
        else { return nil }
        issuingState = state; documentType = type; self.salt = salt; documentNumberHash = number; namesHash = names
        birthDateHash = birth; enrollmentId = o["enrollmentId"]?.stringValue
        createdAt = Date(timeIntervalSince1970: o["createdAt"]?.doubleValue ?? 0)
    }
}
