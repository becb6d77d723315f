import Foundation
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

    /// Checks structure, `typ`, ES256 signature by a configured issuer, the claims, `exp`/`nbf`, and that `aud`
    /// names this station (a station without `stationId` takes no command). `LIFECYCLE_COMMAND_INVALID`
    /// with the reason; replays (`jti`) are the store's to refuse.
    public func verify(_ compact: String, now: Date) throws(TesseraError) -> LifecycleCommand {
        let checked = IssuedToken.check(
            compact, issuers: issuers, stationId: stationId, types: Self.acceptedTypes,
            leeway: leeway, now: now)
        switch checked {
        case .failure(let reason):
            throw Self.invalid(reason.message)
        case .success(let token):
            return try Self.claims(token.claims, issuer: token.issuer)
        }
    }

    static func claims(_ c: [String: JSONValue], issuer: String) throws(TesseraError) -> LifecycleCommand {
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
        guard let jti = try string("jti") else { throw invalid("the command has no 'jti'") }
        guard let a = try string("action"), let action = LifecycleCommand.Action(rawValue: a) else {
            throw invalid("the command's action must be suspend, resume or deactivate")
        }
        guard let exp = c["exp"]?.doubleValue, exp.isFinite else { throw invalid("the command has no numeric 'exp'") }
        let credentialId = try bytes("credentialId")
        let rpId = try string("rpId")
        let userId = try bytes("userId")
        let byCredential = credentialId != nil && rpId == nil && userId == nil
        let byUser = credentialId == nil && rpId != nil && userId != nil
        guard byCredential || byUser else {
            throw invalid("the command names either a credentialId or an rpId and a userId")
        }
        return LifecycleCommand(
            issuer: issuer, jti: jti, action: action, credentialId: credentialId, rpId: rpId,
            userId: userId, reason: try string("reason"), expiresAt: Date(timeIntervalSince1970: exp))
    }

    static func invalid(_ message: String) -> TesseraError { TesseraError(.lifecycleCommandInvalid, message) }
}

/// The checks shared by the station's signed tokens other than activation tokens (lifecycle commands, recovery
/// tokens): compact JWS, `alg` ES256, an explicit `typ` among `types`, no `crit`, `iss` a configured issuer whose
/// key (matching `kid`) verifies the signature, `exp` (and `nbf`) within `leeway`, `aud` naming `stationId` (a
/// station without one takes none).
enum IssuedToken {
    struct Verified { var issuer: String; var claims: [String: JSONValue] }
    enum Failure: Error {
        case invalid(String), expired(String)

        var message: String {
            switch self {
            case .invalid(let m), .expired(let m): return m
            }
        }
    }

    static func check(
        _ compact: String, issuers: [IssuerKey], stationId: String?, types: Set<String>,
        leeway: TimeInterval, now: Date
    ) -> Result<Verified, Failure> {
        let parsed: JWS.Parsed
        do { parsed = try JWS.parse(compact) } catch { return .failure(.invalid(error.message)) }
        guard parsed.header["alg"]?.stringValue == "ES256" else {
            return .failure(.invalid("the algorithm must be ES256"))
        }
        guard let typ = parsed.header["typ"]?.stringValue, types.contains(typ.lowercased()) else {
            return .failure(.invalid("the typ must be \(types.sorted().first ?? "")"))
        }
        if parsed.header["crit"] != nil { return .failure(.invalid("the token has critical header parameters")) }
        let kid = parsed.header["kid"]
        if let kid, kid.stringValue == nil { return .failure(.invalid("the kid must be a string")) }
        guard let claims = try? JSONValue.parse(parsed.payload), case .object(let c) = claims else {
            return .failure(.invalid("the payload is not a JSON object"))
        }
        guard let issuer = c["iss"]?.stringValue else { return .failure(.invalid("the token has no string 'iss'")) }
        if let failure = IssuerKey.signatureFailure(parsed, issuer: issuer, kid: kid?.stringValue, keys: issuers) {
            return .failure(.invalid(failure))
        }
        guard let exp = c["exp"]?.doubleValue, exp.isFinite else {
            return .failure(.invalid("the token has no numeric 'exp'"))
        }
        if Date(timeIntervalSince1970: exp).addingTimeInterval(leeway) < now {
            return .failure(.expired("the token has expired"))
        }
        if let nbf = c["nbf"]?.doubleValue, Date(timeIntervalSince1970: nbf).addingTimeInterval(-leeway) > now {
            return .failure(.invalid("the token is not valid yet"))
        }
        guard let stationId else { return .failure(.invalid("this station has no stationId: it takes no such token")) }
        let audience: [String]
        switch c["aud"] {
        case .string(let s)?: audience = [s]
        case .array(let a)?: audience = a.compactMap(\.stringValue)
        default: audience = []
        }
        guard audience.contains(stationId) else {
            return .failure(.invalid("the token's aud does not name station '\(stationId)'"))
        }
        return .success(Verified(issuer: issuer, claims: c))
    }
}
