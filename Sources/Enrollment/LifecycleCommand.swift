import FoundationEssentials
import TesseraCore

/// A verified lifecycle command: an access-control backend suspends, resumes or deactivates credentials through a
/// station (docs/LIFECYCLE.md, "Lifecycle commands").
public struct LifecycleCommand: Sendable, Equatable {
    public enum Action: String, Sendable { case suspend, resume, deactivate }

    public var issuer: String
    /// Unique command id; the store refuses a second use.
    public var jti: String
    public var action: Action
    /// One credential, or (nil) every credential of `userId` at `rpId`.
    public var credentialId: [UInt8]?
    public var rpId: String?
    public var userId: [UInt8]?
    public var reason: String?
    public var expiresAt: Date
}

/// Verifies lifecycle commands against the configured issuers (`enrollment.issuers`) for this station.
public struct LifecycleCommandVerifier: Sendable {
    public var issuers: [IssuerKey]
    public var stationId: String?
    /// Clock leeway for `exp` and `nbf`, in seconds.
    public var leeway: TimeInterval

    /// The only header `typ` accepted (compared case-insensitively, "application/" optional): a command is never
    /// taken from another kind of token of the same issuer.
    static let acceptedTypes: Set<String> = ["tessera-lifecycle+jwt", "application/tessera-lifecycle+jwt"]

    public init(issuers: [IssuerKey], stationId: String?, leeway: TimeInterval = 60) {
        self.issuers = issuers
        self.stationId = stationId
        self.leeway = leeway
    }

    /// Checks the token by `JWTVerifier`'s rules (structure, `typ`, ES256 signature by a configured issuer, the
    /// registered claims, `exp`/`nbf`, and that `aud` names this station: a station without `stationId` takes no
    /// command), then the command's claims. `LIFECYCLE_COMMAND_INVALID` with the reason; replays (`jti`) are the
    /// store's to refuse.
    public func verify(_ compact: String, now: Date) throws(TesseraError) -> LifecycleCommand {
        let verified = try JWTVerifier(
            issuers: issuers, stationId: stationId, leeway: leeway, types: Self.acceptedTypes,
            typeName: "tessera-lifecycle+jwt", stationless: false, codes: .all(.lifecycleCommandInvalid)
        ).verify(compact, now: now)
        return try Self.claims(verified)
    }

    static func claims(_ verified: JWTVerifier.Verified) throws(TesseraError) -> LifecycleCommand {
        let c = verified.claims
        func string(_ key: String) throws(TesseraError) -> String? {
            guard let v = c[key] else { return nil }
            guard let s = v.stringValue, !s.isEmpty else {
                throw invalid("the command's '\(key)' must be a non-empty string")
            }
            return s
        }
        func bytes(_ key: String) throws(TesseraError) -> [UInt8]? {
            guard let s = try string(key) else { return nil }
            guard let b = Base64URL.decode(s), !b.isEmpty else {
                throw invalid("the command's '\(key)' must be base64url")
            }
            return b
        }
        guard let a = try string("action"), let action = LifecycleCommand.Action(rawValue: a) else {
            throw invalid("the command's action must be suspend, resume or deactivate")
        }
        let credentialId = try bytes("credentialId")
        let rpId = try string("rpId")
        let userId = try bytes("userId")
        let byCredential = credentialId != nil && rpId == nil && userId == nil
        let byUser = credentialId == nil && rpId != nil && userId != nil
        guard byCredential || byUser else {
            throw invalid("the command names either a credentialId or an rpId and a userId")
        }
        return LifecycleCommand(
            issuer: verified.issuer, jti: verified.jti, action: action, credentialId: credentialId, rpId: rpId,
            userId: userId, reason: try string("reason"), expiresAt: verified.expiresAt)
    }

    static func invalid(_ message: String) -> TesseraError { TesseraError(.lifecycleCommandInvalid, message) }
}
