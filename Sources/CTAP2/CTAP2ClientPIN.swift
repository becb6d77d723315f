import CBOR
import CryptoPrimitives
import TesseraCore

/// pinUvAuthToken permissions (§6.5.5.7).
public struct PINPermissions: OptionSet, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let makeCredential = PINPermissions(rawValue: 0x01)
    public static let getAssertion = PINPermissions(rawValue: 0x02)
    public static let credentialManagement = PINPermissions(rawValue: 0x04)
    /// The permissions this authenticator grants (mc, ga, cm).
    public static let supported: PINPermissions = [.makeCredential, .getAssertion, .credentialManagement]
}

/// A CTAP PIN as the token holds it (docs/CTAP.md): the token's PIN is the lower-case hex of LEFT(SHA-256(PIN), 16).
public enum CTAPTokenPIN {
    /// LEFT(SHA-256(pin), 16): what a platform sends as pinHashEnc's plaintext.
    public static func hash(_ pin: [UInt8]) -> [UInt8] { Array(MessageDigest.sha256(pin).prefix(16)) }

    /// The token PIN for a PIN hash: 32 lower-case hex digits.
    public static func tokenPIN(hash: [UInt8]) -> String { Hex.encode(hash) }

    /// The PIN policy (§6.5.1): 4 to 63 bytes of UTF-8, at least 4 code points; else PIN_POLICY_VIOLATION.
    public static func checkPolicy(_ pin: [UInt8]) throws(CTAP2Error) {
        guard pin.count <= 63, let text = String(validating: pin, as: UTF8.self), text.unicodeScalars.count >= 4
        else {
            throw CTAP2Error(.pinPolicyViolation, "a CTAP PIN is 4 to 63 bytes of UTF-8 (at least 4 code points)")
        }
    }
}

/// authenticatorClientPIN parameters (§6.5.5).
public struct ClientPINRequest: Sendable {
    enum Subcommand: Int {
        case getPINRetries = 1, getKeyAgreement = 2, setPIN = 3, changePIN = 4, getPINToken = 5
        case getPinUvAuthTokenUsingUvWithPermissions = 6, getUVRetries = 7
        case getPinUvAuthTokenUsingPinWithPermissions = 9
    }
    public var pinUvAuthProtocol: Int?
    public var subCommand: Int
    public var keyAgreement: CBORValue?
    public var pinUvAuthParam: [UInt8]?
    public var newPinEnc: [UInt8]?
    public var pinHashEnc: [UInt8]?
    public var permissions: Int?
    public var rpId: String?

    /// Parses the request map; the CTAP2 status of the first problem.
    public init(_ map: CBORValue) throws(CTAP2Error) {
        let p = try Params(map)
        pinUvAuthProtocol = try p.optionalInt(1)
        subCommand = try p.optionalInt(2) ?? -1
        if p.root[2] == nil { throw CTAP2Error(.missingParameter, "subCommand missing") }
        keyAgreement = try p.optionalMap(3)
        pinUvAuthParam = try p.optionalBytes(4)
        newPinEnc = try p.optionalBytes(5)
        pinHashEnc = try p.optionalBytes(6)
        permissions = try p.optionalInt(9)
        if p.root[10] != nil { rpId = try p.text(10) }
    }
}

/// The authenticator's PIN state (§6.5.2): key agreement key, the pinUvAuthToken and its state, and each uid's
/// count of wrong PINs in a row since power-up (the daemon's start): one client's mismatches never block ClientPIN
/// for another (the token's own retry counter stays shared).
struct PINState {
    /// A pinUvAuthToken is usable this long after it was issued (§6.5.2.1: at most 10 minutes).
    static let tokenLifetime: Duration = .seconds(600)
    /// Wrong PINs in a row after which the uid's PIN operations need a power cycle (§6.5.5.7: 3).
    static let mismatchLimit = 3

    var keyAgreement = PINKeyAgreement()
    var token = SecureRandom.bytes(32)
    var protocolInUse: PINUVAuthProtocol?
    var permissions: PINPermissions = []
    var rpId: String?
    var issued: ContinuousClock.Instant?
    /// Wrong PINs in a row by uid (nil: clients without peer credentials).
    var consecutiveMismatches: [UInt32?: Int] = [:]

    func blocked(_ uid: UInt32?) -> Bool { consecutiveMismatches[uid, default: 0] >= Self.mismatchLimit }

    /// resetPinUvAuthToken: a fresh token, not in use.
    mutating func resetToken() {
        token = SecureRandom.bytes(32)
        protocolInUse = nil
        permissions = []
        rpId = nil
        issued = nil
    }
}

extension CTAP2Authenticator {
    func clientPIN(_ r: ClientPINRequest, uid: UInt32?) async throws(CTAP2Error) -> CBORValue? {
        guard let sub = ClientPINRequest.Subcommand(rawValue: r.subCommand) else {
            throw CTAP2Error(.invalidSubcommand, "clientPIN subCommand \(r.subCommand)")
        }
        if sub == .getPINRetries {
            let retries = try await backend.pinRetries()
            return [3: CBORValue(retries), 4: .bool(pin.blocked(uid))]
        }
        guard let version = r.pinUvAuthProtocol else {
            throw CTAP2Error(.missingParameter, "pinUvAuthProtocol missing")
        }
        guard let proto = PINUVAuthProtocol(rawValue: version) else {
            throw CTAP2Error(.invalidParameter, "pinUvAuthProtocol \(version) is not supported")
        }
        switch sub {
        case .getKeyAgreement:
            return [1: pin.keyAgreement.coseKey]
        case .setPIN:
            throw CTAP2Error(.notAllowed, "the token already has a PIN: use changePIN")
        case .changePIN:
            try await changePIN(r, proto, uid: uid)
            return nil
        case .getPINToken:
            return try await pinToken(r, proto, permissions: nil, uid: uid)
        case .getPinUvAuthTokenUsingPinWithPermissions:
            guard let raw = r.permissions else { throw CTAP2Error(.missingParameter, "permissions missing") }
            guard raw != 0, raw > 0, raw <= 0xFF else { throw CTAP2Error(.invalidParameter, "permissions are empty") }
            let asked = PINPermissions(rawValue: UInt8(raw))
            guard PINPermissions.supported.isSuperset(of: asked) else {
                throw CTAP2Error(.unauthorizedPermission, "permissions 0x\(String(raw, radix: 16)) are not granted")
            }
            return try await pinToken(r, proto, permissions: asked, uid: uid)
        case .getPinUvAuthTokenUsingUvWithPermissions, .getUVRetries:
            throw CTAP2Error(.invalidSubcommand, "no built-in user verification")
        case .getPINRetries:
            return nil
        }
    }

    /// getPinToken (legacy: mc and ga, no rpId) and getPinUvAuthTokenUsingPinWithPermissions.
    private func pinToken(
        _ r: ClientPINRequest, _ proto: PINUVAuthProtocol, permissions: PINPermissions?, uid: UInt32?
    ) async throws(CTAP2Error) -> CBORValue {
        guard let peer = r.keyAgreement, let pinHashEnc = r.pinHashEnc else {
            throw CTAP2Error(.missingParameter, "keyAgreement or pinHashEnc missing")
        }
        if permissions == nil, r.rpId != nil { throw CTAP2Error(.invalidParameter, "getPinToken takes no rpId") }
        try checkNotBlocked(uid)
        let shared = try pin.keyAgreement.sharedSecret(with: peer, protocol: proto)
        try await verifyPINHash(pinHashEnc, shared: shared, proto: proto, uid: uid)
        pin.resetToken()
        pin.protocolInUse = proto
        pin.permissions = permissions ?? [.makeCredential, .getAssertion]
        pin.rpId = r.rpId
        pin.issued = .now
        return [2: .byteString(try proto.encrypt(key: shared, pin.token))]
    }

    private func changePIN(_ r: ClientPINRequest, _ proto: PINUVAuthProtocol, uid: UInt32?) async throws(CTAP2Error) {
        guard let peer = r.keyAgreement, let param = r.pinUvAuthParam, let newPinEnc = r.newPinEnc,
            let pinHashEnc = r.pinHashEnc
        else {
            throw CTAP2Error(.missingParameter, "keyAgreement, pinUvAuthParam, newPinEnc or pinHashEnc missing")
        }
        try checkNotBlocked(uid)
        let shared = try pin.keyAgreement.sharedSecret(with: peer, protocol: proto)
        guard proto.verify(key: shared, newPinEnc + pinHashEnc, signature: param) else {
            throw CTAP2Error(.pinAuthInvalid, "changePIN: pinUvAuthParam does not verify")
        }
        // The new PIN is checked before anything reaches the token (no token try for a PIN the policy refuses).
        let padded = try proto.decrypt(key: shared, newPinEnc)
        guard padded.count == 64 else { throw CTAP2Error(.invalidParameter, "newPinEnc is not 64 bytes of PIN") }
        let newPIN = Array(padded.prefix { $0 != 0 })
        try CTAPTokenPIN.checkPolicy(newPIN)
        let newHash = CTAPTokenPIN.hash(newPIN)
        let currentHash = try decryptPINHash(pinHashEnc, shared: shared, proto: proto)
        do throws(CTAP2Error) {
            try await backend.changePIN(currentHash: currentHash, newHash: newHash)
        } catch {
            throw wrongPIN(error, uid: uid)
        }
        pin.consecutiveMismatches[uid] = nil
        pin.resetToken()
    }

    private func checkNotBlocked(_ uid: UInt32?) throws(CTAP2Error) {
        if pin.blocked(uid) {
            throw CTAP2Error(.pinAuthBlocked, "\(PINState.mismatchLimit) wrong PINs in a row: restart the daemon")
        }
    }

    private func decryptPINHash(_ pinHashEnc: [UInt8], shared: [UInt8], proto: PINUVAuthProtocol) throws(CTAP2Error)
        -> [UInt8]
    {
        let hash = try proto.decrypt(key: shared, pinHashEnc)
        guard hash.count == 16 else { throw CTAP2Error(.invalidParameter, "pinHashEnc is not 16 bytes of hash") }
        return hash
    }

    /// The PIN check of getPinToken: one token try (`CTAP2Backend.verifyPIN`).
    private func verifyPINHash(_ pinHashEnc: [UInt8], shared: [UInt8], proto: PINUVAuthProtocol, uid: UInt32?)
        async throws(CTAP2Error)
    {
        let hash = try decryptPINHash(pinHashEnc, shared: shared, proto: proto)
        do throws(CTAP2Error) { try await backend.verifyPIN(hash: hash) } catch { throw wrongPIN(error, uid: uid) }
        pin.consecutiveMismatches[uid] = nil
    }

    /// After a failed token check: a wrong PIN makes a new key agreement key and counts towards the uid's
    /// power-cycle block (§6.5.5.7: PIN_INVALID, the third in a row PIN_AUTH_BLOCKED).
    private func wrongPIN(_ error: CTAP2Error, uid: UInt32?) -> CTAP2Error {
        guard error.status == .pinInvalid else { return error }
        pin.keyAgreement = PINKeyAgreement()
        pin.consecutiveMismatches[uid, default: 0] += 1
        if pin.blocked(uid) {
            return CTAP2Error(.pinAuthBlocked, "\(error.message); \(PINState.mismatchLimit) wrong PINs in a row")
        }
        return error
    }

    /// Checks a pinUvAuthParam over `message` (§6.1.2, §6.2.2, §6.8): the token in use with `permission`, its
    /// protocol, and its rpId: for makeCredential/getAssertion (`bind`) `rpId`, binding it when it has none yet;
    /// for credentialManagement `rpId` when it has one, and none when `rpId` is nil. PIN_AUTH_INVALID otherwise.
    func verifyPinUvAuthParam(
        _ param: [UInt8], protocol version: Int?, message: [UInt8], permission: PINPermissions, rpId: String?,
        bind: Bool = true
    ) throws(CTAP2Error) {
        guard let version else { throw CTAP2Error(.missingParameter, "pinUvAuthProtocol missing") }
        guard let proto = PINUVAuthProtocol(rawValue: version) else {
            throw CTAP2Error(.invalidParameter, "pinUvAuthProtocol \(version) is not supported")
        }
        guard pin.protocolInUse == proto, let issued = pin.issued, ContinuousClock.now - issued < PINState.tokenLifetime
        else {
            throw CTAP2Error(.pinAuthInvalid, "no pinUvAuthToken in use")
        }
        guard proto.verify(key: pin.token, message, signature: param) else {
            throw CTAP2Error(.pinAuthInvalid, "pinUvAuthParam does not verify")
        }
        guard pin.permissions.contains(permission) else {
            throw CTAP2Error(.pinAuthInvalid, "the pinUvAuthToken lacks the permission")
        }
        if let bound = pin.rpId, bound != rpId {
            throw CTAP2Error(.pinAuthInvalid, "the pinUvAuthToken is bound to another rpId")
        }
        if bind { pin.rpId = rpId }
    }

    /// After a makeCredential/getAssertion with the token: its mc and ga permissions are used up (§6.1.2, §6.2.2).
    func usedPinUvAuthToken() {
        pin.permissions = []
    }
}
