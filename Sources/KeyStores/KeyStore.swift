import TesseraCore

/// What the passkey service needs from a hardware key store (PKCS#11 token, PIV card, ...).
/// The service never knows which backend it talks to.
public protocol KeyStoreToken: Sendable {
    /// Stable identifier (does not change when the token moves slots or readers).
    var id: String { get }
    /// "pkcs11" or "piv".
    var backend: String { get }
    /// Description for `tokens.list`: label, manufacturer, model, serial, flags, present.
    func describe() async -> JSONValue
    /// Whether signing needs a logged-in session / verified PIN and none is active now.
    func needsPIN() async -> Bool
    /// Generates a P-256 key pair on the token; returns the 65-byte uncompressed public point.
    /// With `pin`, the token verifies it first, exactly once (a wrong PIN costs one retry, never more), as part
    /// of the same operation, calling `pin.willSpendTry(retriesLeft:)` just before and `pin.didSpendTry(_:)` just
    /// after a try that can cost a retry (so the final-try guard and the back-off hold; see `PINRules`).
    func generateP256Key(handle: [UInt8], label: String, pin: PINAttempt?) async throws(TesseraError) -> [UInt8]
    /// Signs `message` (ECDSA P-256 with SHA-256) with the key; returns raw r||s (64 bytes).
    /// `pin` as for `generateP256Key`. On the caller's executor (the assertion path); blocking calls leave it.
    nonisolated(nonsending) func signP256(handle: [UInt8], message: [UInt8], pin: PINAttempt?)
        async throws(TesseraError)
        -> [UInt8]
    /// Deletes the key pair (and any object belonging to it). `pin` as for `generateP256Key`.
    func deleteKey(handle: [UInt8], pin: PINAttempt?) async throws(TesseraError)

    // SSH agent (defaults below: a backend without them offers no SSH keys and cannot be unlocked).
    /// The public keys on the token (P-256, and RSA where the backend has them), readable without a login.
    func publicKeys() async throws(TesseraError) -> [TokenKey]
    /// RSA PKCS#1 v1.5 signature over `message` (SSH `ssh-rsa` / `rsa-sha2-*` keys); the token hashes.
    func signRSA(handle: [UInt8], message: [UInt8], hash: RSASignatureHash) async throws(TesseraError) -> [UInt8]
    /// Logs the token in with `pin` (from `PINRules.withCallerPIN`), or checks it against the active login; one
    /// token try at most (the login stays until `logout`).
    func login(pin: PINAttempt) async throws(TesseraError)
    /// Ends the login.
    func logout() async
    /// The daemon holds this token's PIN (a PIN file) and keeps it logged in: for the SSH agent it counts as
    /// unlocked without `ssh-add -s`.
    var hasConfiguredPIN: Bool { get }
    /// Changes the token's user PIN from `old` (from `PINRules.withCallerPIN`: one token try at most) to `new`.
    func changePIN(old: PINAttempt, new: String) async throws(TesseraError)

    // CTAP hmac-secret (defaults below: a backend without them makes credentials without the extension).
    /// Whether the token can make and use a credential's hmac-secret keys on the token.
    func supportsHMACSecret() async -> Bool
    /// Makes the two CredRandoms (CTAP 2.1 §12.5: one for use with UV, one without) of the key `handle` on the
    /// token; `deleteKey(handle:)` deletes them with the key.
    func createHMACSecrets(handle: [UInt8], label: String) async throws(TesseraError)
    /// HMAC-SHA-256(CredRandom, `salt`) computed on the token, with the CredRandom for use with UV or without.
    func hmacSecret(handle: [UInt8], userVerified: Bool, salt: [UInt8]) async throws(TesseraError) -> [UInt8]
}

/// A public key on a token, with the handle of its private key.
public struct TokenKey: Sendable, Equatable {
    /// The key's type and public value.
    public enum Value: Sendable, Equatable {
        /// Uncompressed P-256 point (65 bytes).
        case p256(point: [UInt8])
        /// RSA modulus and public exponent (unsigned big-endian).
        case rsa(modulus: [UInt8], exponent: [UInt8])

        public var isP256: Bool {
            if case .p256 = self { return true }
            return false
        }
    }

    public var handle: [UInt8]
    public var label: String
    public var value: Value
    /// Signing with the key needs the token's PIN (a PKCS#11 token with `CKF_LOGIN_REQUIRED`, a PIV slot other
    /// than 9E).
    public var needsPIN: Bool
    /// The P-256 point; empty for an RSA key.
    public var publicPoint: [UInt8] {
        if case .p256(let point) = value { return point }
        return []
    }

    public init(handle: [UInt8], label: String, publicPoint: [UInt8], needsPIN: Bool = true) {
        self.init(handle: handle, label: label, value: .p256(point: publicPoint), needsPIN: needsPIN)
    }

    public init(handle: [UInt8], label: String, value: Value, needsPIN: Bool = true) {
        self.handle = handle; self.label = label; self.value = value; self.needsPIN = needsPIN
    }
}

extension KeyStoreToken {
    public func publicKeys() async throws(TesseraError) -> [TokenKey] { [] }
    public func signRSA(handle: [UInt8], message: [UInt8], hash: RSASignatureHash) async throws(TesseraError) -> [UInt8]
    {
        throw TesseraError(.unsupportedProtocol, "token \(id) (\(backend)) holds no RSA keys")
    }
    public func login(pin: PINAttempt) async throws(TesseraError) {
        throw TesseraError(.unsupportedProtocol, "token \(id) (\(backend)) cannot be unlocked for the SSH agent")
    }
    public func logout() async {}
    public var hasConfiguredPIN: Bool { false }
    public func changePIN(old: PINAttempt, new: String) async throws(TesseraError) {
        throw TesseraError(.unsupportedProtocol, "token \(id) (\(backend)) cannot change its PIN here")
    }
    public func supportsHMACSecret() async -> Bool { false }
    public func createHMACSecrets(handle: [UInt8], label: String) async throws(TesseraError) {
        throw TesseraError(.unsupportedProtocol, "token \(id) (\(backend)) cannot hold hmac-secret keys")
    }
    public func hmacSecret(handle: [UInt8], userVerified: Bool, salt: [UInt8]) async throws(TesseraError) -> [UInt8] {
        throw TesseraError(.unsupportedProtocol, "token \(id) (\(backend)) cannot hold hmac-secret keys")
    }
}

/// A source of tokens (one per backend).
public protocol KeyStore: Sendable {
    /// Tokens present now, as last seen: never waits for an enumeration.
    nonisolated(nonsending) func tokens() async -> [any KeyStoreToken]
    /// Tokens seen by an enumeration after this call, waiting at most `limit` for it (else as last seen): for
    /// listing the tokens, or a token looked for by name that the last enumeration did not see.
    func freshTokens(within limit: Duration) async -> [any KeyStoreToken]
    /// The daemon is about to present a card in a PC/SC reader (an mdoc on vpcd): until `endCardPresentation`, the
    /// store opens no reader it does not already hold (an enumeration would connect to the daemon's own card).
    func beginCardPresentation() async
    /// The presented card has left its reader.
    func endCardPresentation() async
}

extension KeyStore {
    public func freshTokens(within limit: Duration) async -> [any KeyStoreToken] { await tokens() }
    public func beginCardPresentation() async {}
    public func endCardPresentation() async {}
}

/// The hash of an RSA PKCS#1 v1.5 signature.
public enum RSASignatureHash: Sendable {
    case sha1, sha256, sha512
}
