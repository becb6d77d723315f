import CTAP2
import KeyStores
import Passkeys
import TesseraCore

/// `ctap` section: the CTAP 2.1 authenticator (docs/CTAP.md).
public struct CTAPConfig: Codable, Sendable {
    /// SOCK_SEQPACKET socket path (the authenticator is off without it, unless `--ctap-socket` gives one).
    public var socket: String?
    /// Socket file mode in octal, default "0660" (group from `socketGroup`).
    public var socketMode: String?
    /// Token new credentials go to (default: the only token present, else the first).
    public var tokenId: String?
    /// Whether ClientPIN (PIN/UV auth protocols 2 and 1) and user verification are offered: the token's PIN must be
    /// the hashed form, lower-case hex of LEFT(SHA-256(PIN), 16) (docs/CTAP.md). Default false.
    public var clientPin: Bool?
    public init() {}
}

extension MethodTable {
    /// `ctap.setPin`: gives a PKCS#11 token the hashed form of a CTAP PIN as its PIN (docs/CTAP.md), with one
    /// `C_SetPIN` under the PIN rules.
    func registerCTAP(_ passkeys: PasskeyService, defaultTokenId: String?) {
        register("ctap.setPin", .admin) { p, connection in
            let requested = try p.optionalString("tokenId") ?? defaultTokenId
            if requested == nil, await passkeys.tokens().count > 1 {
                throw TesseraError.invalidInput("several tokens are present: give tokenId")
            }
            let token = try await passkeys.chooseToken(requested)
            guard token.backend == "pkcs11" else {
                throw TesseraError(
                    .unsupportedProtocol, "token \(token.id) (\(token.backend)) cannot hold a CTAP PIN (32 characters)")
            }
            let pin = try p.string("pin")
            let ctapPIN = Array((try p.optionalString("newPin") ?? pin).utf8)
            do throws(CTAP2Error) { try CTAPTokenPIN.checkPolicy(ctapPIN) } catch {
                throw TesseraError.invalidInput("newPin: \(error.message)")
            }
            let newTokenPIN = CTAPTokenPIN.tokenPIN(hash: CTAPTokenPIN.hash(ctapPIN))
            try await passkeys.pinRules.withCallerPIN(
                pin, caller: connection.pinCaller, allowFinalTry: p.optionalBool("allowFinalPinTry") ?? false,
                tokenId: token.id
            ) { (old: PINAttempt) async throws(TesseraError) in
                try await token.changePIN(old: old, new: newTokenPIN)
            }
            return ["changed": true, "tokenId": .string(token.id)]
        }
    }
}
