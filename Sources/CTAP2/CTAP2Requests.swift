import CBOR

/// A user entity (PublicKeyCredentialUserEntity).
public struct CTAP2User: Sendable, Equatable {
    public var id: [UInt8]
    public var name: String?
    public var displayName: String?
    public init(id: [UInt8], name: String? = nil, displayName: String? = nil) {
        self.id = id; self.name = name; self.displayName = displayName
    }

    var cbor: CBORValue {
        var m: [(key: CBORValue, value: CBORValue)] = [("id", .byteString(id))]
        if let name { m.append(("name", .textString(name))) }
        if let displayName { m.append(("displayName", .textString(displayName))) }
        return .map(m)
    }
}

/// credProtect levels (CTAP 2.1 §12.1).
public enum CredProtect: UInt8, Sendable, Comparable {
    /// Usable with or without UV, listed or discovered.
    case userVerificationOptional = 1
    /// Without UV only when the client names it in an allowList.
    case userVerificationOptionalWithCredentialIDList = 2
    /// Only with UV.
    case userVerificationRequired = 3

    public static func < (a: CredProtect, b: CredProtect) -> Bool { a.rawValue < b.rawValue }
}

/// authenticatorMakeCredential parameters (§6.1).
public struct MakeCredentialRequest: Sendable, Equatable {
    public var clientDataHash: [UInt8]
    public var rpId: String
    public var rpName: String?
    public var user: CTAP2User
    public var algorithms: [Int64]
    public var excludeList: [[UInt8]]
    public var residentKey: Bool
    public var userVerification: Bool
    public var userPresence: Bool?
    public var credProtect: CredProtect?
    /// The hmac-secret extension asked for (§12.5).
    public var hmacSecret = false
    public var pinUvAuthParam: [UInt8]?
    public var pinUvAuthProtocol: Int?

    /// Parses the request map; the CTAP2 status of the first problem.
    public init(_ map: CBORValue) throws(CTAP2Error) {
        let p = try Params(map)
        clientDataHash = try p.bytes(1)
        let rp = try p.map(2)
        guard let id = rp["id"] else { throw CTAP2Error(.missingParameter, "rp.id missing") }
        guard let rpId = id.textValue else { throw CTAP2Error(.cborUnexpectedType, "rp.id is not text") }
        self.rpId = rpId
        rpName = rp["name"]?.textValue
        let u = try p.map(3)
        guard let uid = u["id"] else { throw CTAP2Error(.missingParameter, "user.id missing") }
        guard let userId = uid.bytesValue else { throw CTAP2Error(.cborUnexpectedType, "user.id is not bytes") }
        guard userId.count <= 64 else { throw CTAP2Error(.invalidLength, "user.id longer than 64 bytes") }
        user = CTAP2User(id: userId, name: u["name"]?.textValue, displayName: u["displayName"]?.textValue)
        algorithms = []
        for entry in try p.array(4) {
            guard entry.mapValue != nil else {
                throw CTAP2Error(.cborUnexpectedType, "pubKeyCredParams entry is not a map")
            }
            guard let type = entry["type"]?.textValue, let alg = entry["alg"]?.int64Value else {
                throw CTAP2Error(.missingParameter, "pubKeyCredParams entry lacks type or alg")
            }
            if type == "public-key" { algorithms.append(alg) }
        }
        excludeList = try p.optionalArray(5).map(Self.descriptorIds) ?? []
        let ext = try p.optionalMap(6)
        if let cp = ext?["credProtect"] {
            guard let level = cp.intValue, let value = CredProtect(rawValue: UInt8(clamping: level)), level <= 3 else {
                throw CTAP2Error(.invalidOption, "credProtect must be 1, 2 or 3")
            }
            credProtect = value
        }
        if let hs = ext?["hmac-secret"] {
            guard let b = hs.boolValue else { throw CTAP2Error(.cborUnexpectedType, "hmac-secret is not a boolean") }
            hmacSecret = b
        }
        let options = try p.optionalMap(7)
        residentKey = try Self.option(options, "rk") ?? false
        userVerification = try Self.option(options, "uv") ?? false
        userPresence = try Self.option(options, "up")
        pinUvAuthParam = try p.optionalBytes(8)
        pinUvAuthProtocol = try p.optionalInt(9)
    }

    static func option(_ options: CBORValue?, _ key: String) throws(CTAP2Error) -> Bool? {
        guard let v = options?[.textString(key)] else { return nil }
        guard let b = v.boolValue else { throw CTAP2Error(.cborUnexpectedType, "option \(key) is not a boolean") }
        return b
    }

    static func descriptorIds(_ list: [CBORValue]) throws(CTAP2Error) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for d in list {
            guard d.mapValue != nil else { throw CTAP2Error(.cborUnexpectedType, "credential descriptor is not a map") }
            guard let type = d["type"]?.textValue, let id = d["id"]?.bytesValue else {
                throw CTAP2Error(.missingParameter, "credential descriptor lacks type or id")
            }
            if type == "public-key" { out.append(id) }
        }
        return out
    }
}

/// authenticatorGetAssertion parameters (§6.2).
public struct GetAssertionRequest: Sendable, Equatable {
    public var rpId: String
    public var clientDataHash: [UInt8]
    /// nil: no allowList (discoverable credentials).
    public var allowList: [[UInt8]]?
    public var userPresence: Bool
    public var userVerification: Bool
    /// The hmac-secret extension's input (§12.5).
    public var hmacSecret: HMACSecretInput?
    public var pinUvAuthParam: [UInt8]?
    public var pinUvAuthProtocol: Int?

    public init(_ map: CBORValue) throws(CTAP2Error) {
        let p = try Params(map)
        rpId = try p.text(1)
        clientDataHash = try p.bytes(2)
        let list = try p.optionalArray(3).map(MakeCredentialRequest.descriptorIds)
        allowList = list?.isEmpty == true ? nil : list
        if let hs = try p.optionalMap(4)?["hmac-secret"] { hmacSecret = try HMACSecretInput(hs) }
        let options = try p.optionalMap(5)
        if try MakeCredentialRequest.option(options, "rk") != nil {
            throw CTAP2Error(.unsupportedOption, "rk is not an option of getAssertion")
        }
        userPresence = try MakeCredentialRequest.option(options, "up") ?? true
        userVerification = try MakeCredentialRequest.option(options, "uv") ?? false
        pinUvAuthParam = try p.optionalBytes(6)
        pinUvAuthProtocol = try p.optionalInt(7)
    }
}

/// The hmac-secret extension's getAssertion input (§12.5): the platform's key agreement key, the salts encrypted
/// with the shared secret and their MAC.
public struct HMACSecretInput: Sendable, Equatable {
    public var keyAgreement: CBORValue
    public var saltEnc: [UInt8]
    public var saltAuth: [UInt8]
    /// pinUvAuthProtocol (default 1).
    public var pinUvAuthProtocol: Int

    public init(_ map: CBORValue) throws(CTAP2Error) {
        let p = try Params(map)
        keyAgreement = try p.map(1)
        saltEnc = try p.bytes(2)
        saltAuth = try p.bytes(3)
        pinUvAuthProtocol = try p.optionalInt(4) ?? 1
    }
}

/// Typed access to a CTAP2 parameter map with integer keys.
struct Params {
    let root: CBORValue

    init(_ map: CBORValue) throws(CTAP2Error) {
        guard map.mapValue != nil else { throw CTAP2Error(.cborUnexpectedType, "parameters are not a map") }
        self.root = map
    }

    func value(_ key: Int) throws(CTAP2Error) -> CBORValue {
        guard let v = root[CBORValue(key)] else { throw CTAP2Error(.missingParameter, "parameter \(key) missing") }
        return v
    }

    func bytes(_ key: Int) throws(CTAP2Error) -> [UInt8] {
        guard let b = try value(key).bytesValue else {
            throw CTAP2Error(.cborUnexpectedType, "parameter \(key) is not bytes")
        }
        return b
    }

    func text(_ key: Int) throws(CTAP2Error) -> String {
        guard let t = try value(key).textValue else {
            throw CTAP2Error(.cborUnexpectedType, "parameter \(key) is not text")
        }
        return t
    }

    func map(_ key: Int) throws(CTAP2Error) -> CBORValue {
        let v = try value(key)
        guard v.mapValue != nil else { throw CTAP2Error(.cborUnexpectedType, "parameter \(key) is not a map") }
        return v
    }

    func array(_ key: Int) throws(CTAP2Error) -> [CBORValue] {
        guard let a = try value(key).arrayValue else {
            throw CTAP2Error(.cborUnexpectedType, "parameter \(key) is not an array")
        }
        return a
    }

    func optionalMap(_ key: Int) throws(CTAP2Error) -> CBORValue? {
        guard root[CBORValue(key)] != nil else { return nil }
        return try self.map(key)
    }

    func optionalArray(_ key: Int) throws(CTAP2Error) -> [CBORValue]? {
        guard root[CBORValue(key)] != nil else { return nil }
        return try array(key)
    }

    func optionalBytes(_ key: Int) throws(CTAP2Error) -> [UInt8]? {
        guard root[CBORValue(key)] != nil else { return nil }
        return try bytes(key)
    }

    func optionalInt(_ key: Int) throws(CTAP2Error) -> Int? {
        guard let v = root[CBORValue(key)] else { return nil }
        guard let n = v.intValue else { throw CTAP2Error(.cborUnexpectedType, "parameter \(key) is not an integer") }
        return n
    }
}
