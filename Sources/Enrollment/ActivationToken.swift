import Crypto
import FoundationEssentials
import TesseraCore

/// A configured signer of activation tokens.
public struct IssuerKey: Sendable {
    /// The `iss` value its tokens carry.
    public var issuer: String
    /// When set, a token naming a `kid` must name this one.
    public var keyId: String?
    public var publicKey: P256.Signing.PublicKey

    public init(issuer: String, keyId: String?, publicKey: P256.Signing.PublicKey) {
        self.issuer = issuer
        self.keyId = keyId
        self.publicKey = publicKey
    }

    /// A P-256 key from a PEM "PUBLIC KEY" (SubjectPublicKeyInfo). `INVALID_INPUT` naming the issuer otherwise.
    public init(issuer: String, keyId: String?, pem: String) throws(TesseraError) {
        let key: P256.Signing.PublicKey
        do {
            key = try P256.Signing.PublicKey(pemRepresentation: pem.trimmingWhitespace())
        } catch {
            throw TesseraError(
                .invalidInput, "the public key of issuer '\(issuer)' is not a PEM P-256 public key",
                details: ["issuer": .string(issuer)])
        }
        self.init(issuer: issuer, keyId: keyId, publicKey: key)
    }
}

extension IssuerKey {
    /// Why no key of `issuer` among `keys` (the one named `kid`, when the token and the key both name one)
    /// verifies `parsed`'s ES256 signature; nil when one does.
    static func signatureFailure(_ parsed: JWS.Parsed, issuer: String, kid: String?, keys: [IssuerKey]) -> String? {
        let known = keys.filter { $0.issuer == issuer }
        guard !known.isEmpty else { return "unknown token issuer '\(issuer)'" }
        let candidates = known.filter { key in kid == nil || key.keyId == nil || key.keyId == kid }
        guard !candidates.isEmpty else { return "unknown key id '\(kid ?? "")' for issuer '\(issuer)'" }
        guard candidates.contains(where: { JWS.verifyES256(parsed, key: $0.publicKey) }) else {
            return "the token's signature does not verify"
        }
        return nil
    }
}

/// A verified activation token's claims (docs/ENROLLMENT.md, "Activation tokens").
public struct ActivationToken: Sendable, Equatable {
    public var issuer: String
    /// Unique token id; the store refuses a second use.
    public var jti: String
    public var workflow: String
    /// The passkey's user handle (≤ 64 UTF-8 bytes).
    public var subject: String
    public var expiresAt: Date
    public var issuedAt: Date?
    public var notBefore: Date?
    /// Empty when the token has no `aud`.
    public var audience: [String]
    public var userName: String?
    public var userDisplayName: String?
    public var expected: ExpectedAttributes?
    /// The compact token as received.
    public var raw: String

    public init(
        issuer: String, jti: String, workflow: String, subject: String, expiresAt: Date,
        issuedAt: Date? = nil, notBefore: Date? = nil, audience: [String] = [], userName: String? = nil,
        userDisplayName: String? = nil, expected: ExpectedAttributes? = nil, raw: String
    ) {
        self.issuer = issuer
        self.jti = jti
        self.workflow = workflow
        self.subject = subject
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.notBefore = notBefore
        self.audience = audience
        self.userName = userName
        self.userDisplayName = userDisplayName
        self.expected = expected
        self.raw = raw
    }
}

/// Verifies activation tokens against the configured issuers.
public struct ActivationTokenVerifier: Sendable {
    public var issuers: [IssuerKey]
    public var stationId: String?
    /// Clock leeway for `exp` and `nbf`, in seconds.
    public var leeway: TimeInterval

    /// Header `typ` values accepted (RFC 7515 §4.1.9: compared case-insensitively, "application/" optional):
    /// the explicit type, or the generic "JWT" most JOSE libraries write; a token without `typ` and other explicit
    /// types (an access token's `at+jwt`, …) are refused so that no other kind of token from the same issuer is
    /// taken for an activation.
    static let acceptedTypes: Set<String> = [
        "tessera-activation+jwt", "application/tessera-activation+jwt",
        "jwt", "application/jwt",
    ]

    static let codes = JWTVerifier.Codes(
        malformed: .activationTokenMalformed, signature: .activationTokenSignatureInvalid,
        expired: .activationTokenExpired, notYetValid: .activationTokenExpired, audience: .activationTokenAudience)

    public init(issuers: [IssuerKey], stationId: String?, leeway: TimeInterval = 60) {
        self.issuers = issuers
        self.stationId = stationId
        self.leeway = leeway
    }

    /// Checks a compact token by `JWTVerifier`'s rules, so that no claim is trusted before the signature:
    /// structure, header (a `typ` is required) and `iss` (`ACTIVATION_TOKEN_MALFORMED`); `alg` ES256, a configured
    /// issuer whose `keyId` matches a given `kid`, and the signature (`ACTIVATION_TOKEN_SIGNATURE_INVALID`); the
    /// claims (`ACTIVATION_TOKEN_MALFORMED`); `exp + leeway < now` or `nbf - leeway > now`
    /// (`ACTIVATION_TOKEN_EXPIRED`); when a station id is set, `aud` must name it (`ACTIVATION_TOKEN_AUDIENCE`, also
    /// when the token has no `aud`: a token meant for no station in particular is not taken for this one).
    /// Replays (`jti`) are the store's to refuse.
    public func verify(_ compact: String, now: Date) throws(TesseraError) -> ActivationToken {
        let verified = try JWTVerifier(
            issuers: issuers, stationId: stationId, leeway: leeway, types: Self.acceptedTypes,
            typeName: "tessera-activation+jwt (or JWT)", stationless: true, codes: Self.codes
        ).verify(compact, now: now)
        return try Self.claims(verified, raw: compact)
    }

    /// The activation claims of a verified token (its registered claims are `JWTVerifier`'s).
    static func claims(_ verified: JWTVerifier.Verified, raw: String) throws(TesseraError) -> ActivationToken {
        let c = verified.claims
        func string(_ key: String) throws(TesseraError) -> String {
            guard let s = c[key]?.stringValue, !s.isEmpty else {
                throw JWS.malformed("the token has no non-empty string '\(key)'")
            }
            return s
        }
        let workflow = try string("workflow")
        let subject = try string("sub")
        guard subject.utf8.count <= 64 else { throw JWS.malformed("the token's 'sub' is longer than 64 bytes") }

        var userName: String?
        var userDisplayName: String?
        if let user = c["user"] {
            guard case .object(let u) = user else { throw JWS.malformed("the token's 'user' must be an object") }
            func member(_ key: String) throws(TesseraError) -> String? {
                guard let v = u[key] else { return nil }
                guard let s = v.stringValue else { throw JWS.malformed("the token's user.\(key) must be a string") }
                return s
            }
            userName = try member("name")
            userDisplayName = try member("displayName")
        }

        var expected: ExpectedAttributes?
        if let e = c["expected"] {
            do {
                expected = try ExpectedAttributes(json: e)
            } catch {
                throw TesseraError(
                    .activationTokenMalformed, "the token's expected attributes: \(error.message)",
                    details: error.details)
            }
        }
        return ActivationToken(
            issuer: verified.issuer, jti: verified.jti, workflow: workflow, subject: subject,
            expiresAt: verified.expiresAt, issuedAt: verified.issuedAt, notBefore: verified.notBefore,
            audience: verified.audience, userName: userName, userDisplayName: userDisplayName, expected: expected,
            raw: raw)
    }
}
