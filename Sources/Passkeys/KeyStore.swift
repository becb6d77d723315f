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
    /// `pin` as for `generateP256Key`.
    func signP256(handle: [UInt8], message: [UInt8], pin: PINAttempt?) async throws(TesseraError) -> [UInt8]
    /// Deletes the key pair (and any object belonging to it). `pin` as for `generateP256Key`.
    func deleteKey(handle: [UInt8], pin: PINAttempt?) async throws(TesseraError)
}

/// A source of tokens (one per backend).
public protocol KeyStore: Sendable {
    /// Tokens present now.
    func tokens() async -> [any KeyStoreToken]
}
