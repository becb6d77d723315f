import FoundationEssentials
import TesseraCore

/// The one verifier of the station's signed tokens (activation tokens, lifecycle commands, recovery tokens) with one
/// rule set, checked in this order so that no claim is trusted before the signature: a compact JWS; `alg` ES256; a
/// `typ` among the caller's types (required; compared case-insensitively); no `crit`; `kid` a string when present;
/// the payload a JSON object with a string `iss`; a configured key of that issuer (the one named `kid` when both
/// name one) verifies the signature; `jti` a non-empty string, `exp` a number, `nbf` and `iat` numbers and `aud` a
/// string or an array of strings when present; `exp + leeway ≥ now` and `nbf - leeway ≤ now`; `aud` names the
/// station's id when it has one (a station without one takes a kind of token only when `stationless` allows it).
/// Each caller names its own error code for each kind of failure; replays (`jti`) are the store's to refuse.
struct JWTVerifier: Sendable {
    /// The error code of each kind of failure; the caller's own.
    struct Codes: Sendable {
        /// Structure, header or a registered claim's form.
        var malformed: TesseraError.Code
        /// `alg`, issuer, key id or signature.
        var signature: TesseraError.Code
        var expired: TesseraError.Code
        var notYetValid: TesseraError.Code
        var audience: TesseraError.Code

        /// One code for every failure.
        static func all(_ code: TesseraError.Code) -> Codes {
            Codes(malformed: code, signature: code, expired: code, notYetValid: code, audience: code)
        }
    }

    /// A verified token: its issuer, its claims and the registered ones read.
    struct Verified: Sendable {
        var issuer: String
        var claims: [String: JSONValue]
        /// For the caller's replay check.
        var jti: String
        var expiresAt: Date
        var notBefore: Date?
        var issuedAt: Date?
        /// Empty when the token has no `aud`.
        var audience: [String]
    }

    var issuers: [IssuerKey]
    var stationId: String?
    /// Clock leeway for `exp` and `nbf`, in seconds.
    var leeway: TimeInterval
    /// Accepted `typ` values, lower case.
    var types: Set<String>
    /// The type named in the refusal.
    var typeName: String
    /// Whether a station without `stationId` takes this kind of token (then `aud` is not looked at).
    var stationless: Bool
    var codes: Codes

    func verify(_ compact: String, now: Date) throws(TesseraError) -> Verified {
        let parsed: JWS.Parsed
        do { parsed = try JWS.parse(compact) } catch { throw TesseraError(codes.malformed, error.message) }
        let header = parsed.header
        guard header["alg"]?.stringValue == "ES256" else {
            throw TesseraError(codes.signature, "the token's algorithm must be ES256")
        }
        guard let typ = header["typ"]?.stringValue, types.contains(typ.lowercased()) else {
            throw TesseraError(codes.malformed, "the token's typ must be \(typeName)")
        }
        if header["crit"] != nil { throw TesseraError(codes.malformed, "the token has critical header parameters") }
        let kid = header["kid"]
        if let kid, kid.stringValue == nil { throw TesseraError(codes.malformed, "the token's kid must be a string") }
        guard let payload = try? JSONValue.parse(parsed.payload), case .object(let c) = payload else {
            throw TesseraError(codes.malformed, "the token's payload is not a JSON object")
        }
        guard let issuer = c["iss"]?.stringValue else {
            throw TesseraError(codes.malformed, "the token has no string 'iss'")
        }
        if let failure = IssuerKey.signatureFailure(parsed, issuer: issuer, kid: kid?.stringValue, keys: issuers) {
            throw TesseraError(codes.signature, failure)
        }

        guard let jti = c["jti"]?.stringValue, !jti.isEmpty else {
            throw TesseraError(codes.malformed, "the token has no non-empty string 'jti'")
        }
        func date(_ key: String) throws(TesseraError) -> Date? {
            guard let v = c[key] else { return nil }
            guard let n = v.doubleValue, n.isFinite else {
                throw TesseraError(codes.malformed, "the token's '\(key)' must be a number")
            }
            return Date(timeIntervalSince1970: n)
        }
        guard let expiresAt = try date("exp") else { throw TesseraError(codes.malformed, "the token has no 'exp'") }
        let notBefore = try date("nbf")
        let issuedAt = try date("iat")
        var audience: [String] = []
        switch c["aud"] {
        case .none: break
        case .string(let s)?: audience = [s]
        case .array(let a)?:
            for v in a {
                guard let s = v.stringValue else {
                    throw TesseraError(codes.malformed, "the token's 'aud' must hold strings")
                }
                audience.append(s)
            }
        default: throw TesseraError(codes.malformed, "the token's 'aud' must be a string or an array of strings")
        }

        if expiresAt.addingTimeInterval(leeway) < now { throw TesseraError(codes.expired, "the token has expired") }
        if let notBefore, notBefore.addingTimeInterval(-leeway) > now {
            throw TesseraError(codes.notYetValid, "the token is not valid yet")
        }
        if let stationId {
            guard audience.contains(stationId) else {
                throw TesseraError(
                    codes.audience,
                    audience.isEmpty
                        ? "the token names no audience; station '\(stationId)' takes only tokens whose aud names it"
                        : "the token is not meant for station '\(stationId)'")
            }
        } else if !stationless {
            throw TesseraError(codes.audience, "this station has no stationId: it takes no such token")
        }
        return Verified(
            issuer: issuer, claims: c, jti: jti, expiresAt: expiresAt, notBefore: notBefore, issuedAt: issuedAt,
            audience: audience)
    }
}
