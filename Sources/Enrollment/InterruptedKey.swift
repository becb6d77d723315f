import Logging
import Passkeys
import TesseraCore

extension PasskeyService {
    /// Crash-safe passkey creation (PASSKEY_CREATION, recovery) stores its ids in `plan` before generating the key
    /// and marks `generating` with the `tokenId`. After an interruption the key may exist without a record: delete
    /// it, or, when that cannot be checked (token absent, or it wants a PIN to delete), take fresh ids in `plan` so
    /// ids that may be taken are never reused.
    func clearInterruptedKey(
        plan: inout [String: JSONValue], credentialId: inout [UInt8], keyHandle: inout [UInt8], logger: Logger
    ) async {
        guard plan["generating"]?.boolValue == true, let previous = plan["tokenId"]?.stringValue else { return }
        do {
            try await discardUnrecordedKey(tokenId: previous, handle: keyHandle)
        } catch {
            logger.warning(
                "a key from an interrupted attempt may remain on the token",
                metadata: ["token": "\(previous)", "error": "\(error)"])
            credentialId = SecureRandom.bytes(32)
            keyHandle = SecureRandom.bytes(16)
            plan["credentialId"] = .string(Base64URL.encode(credentialId))
            plan["keyHandle"] = .string(Base64URL.encode(keyHandle))
        }
    }
}
