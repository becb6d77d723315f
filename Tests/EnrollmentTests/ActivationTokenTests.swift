import Crypto
import Enrollment
import FoundationEssentials
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct ActivationTokenTests {
    static let issuer = "https://backend.example"
    let key = P256.Signing.PrivateKey()
    let now = Date(timeIntervalSince1970: 1_760_000_000)

    var claims: [String: JSONValue] {
        [
            "iss": .string(Self.issuer), "jti": "token-1", "workflow": "employee-badge", "sub": "user-42",
            "exp": .number(now.timeIntervalSince1970 + 300), "iat": .number(now.timeIntervalSince1970 - 10),
        ]
    }

    func sign(
        _ claims: [String: JSONValue], header: [String: JSONValue] = ["typ": "tessera-activation+jwt"],
        with key: P256.Signing.PrivateKey? = nil
    ) throws -> String {
        try JWS.signES256(header: header, payload: JSONValue.object(claims).serialized(), key: key ?? self.key)
    }

    func verifier(keyId: String? = nil, stationId: String? = nil) -> ActivationTokenVerifier {
        ActivationTokenVerifier(
            issuers: [IssuerKey(issuer: Self.issuer, keyId: keyId, publicKey: key.publicKey)],
            stationId: stationId)
    }

    func expectRefused(
        _ code: TesseraError.Code, _ compact: String, verifier: ActivationTokenVerifier? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let v = verifier ?? self.verifier()
        expectError(code, sourceLocation: sourceLocation) { () throws(TesseraError) in try v.verify(compact, now: now) }
    }

    @Test func validToken() throws {
        var c = claims
        c["nbf"] = .number(now.timeIntervalSince1970 - 5)
        c["aud"] = ["kiosk-berlin-1", "kiosk-hamburg-2"]
        c["user"] = ["name": "anna@example.com", "displayName": "Anna Maria Eriksson"]
        c["expected"] = ["surname": "ERIKSSON", "dateOfBirth": "1974-08-12"]
        let compact = try sign(c, header: ["typ": "tessera-activation+jwt", "kid": "2026-1"])
        let token = try verifier(keyId: "2026-1", stationId: "kiosk-berlin-1").verify(compact, now: now)
        #expect(
            token
                == ActivationToken(
                    issuer: Self.issuer, jti: "token-1", workflow: "employee-badge", subject: "user-42",
                    expiresAt: now.addingTimeInterval(300), issuedAt: now.addingTimeInterval(-10),
                    notBefore: now.addingTimeInterval(-5), audience: ["kiosk-berlin-1", "kiosk-hamburg-2"],
                    userName: "anna@example.com", userDisplayName: "Anna Maria Eriksson",
                    expected: ExpectedAttributes(surname: "ERIKSSON", dateOfBirth: "1974-08-12"), raw: compact))
    }

    @Test func minimalTokenWithoutKid() throws {
        let token = try verifier(keyId: "2026-1").verify(try sign(claims), now: now)
        #expect(token.audience == [] && token.userName == nil && token.expected == nil && token.notBefore == nil)
    }

    /// A token without `typ` could be any kind of token of the same issuer: refused (issue #27).
    @Test func tokenWithoutTypIsRefused() throws {
        expectRefused(.activationTokenMalformed, try sign(claims, header: [:]))
        expectRefused(
            .activationTokenMalformed, try sign(claims, header: ["kid": "2026-1"]), verifier: verifier(keyId: "2026-1"))
    }

    @Test func mediaTypeFormOfTyp() throws {
        let compact = try sign(claims, header: ["typ": "application/Tessera-Activation+JWT"])
        _ = try verifier().verify(compact, now: now)
        _ = try verifier().verify(try sign(claims, header: ["typ": "JWT"]), now: now)
        expectRefused(.activationTokenMalformed, try sign(claims, header: ["typ": "at+jwt"]))
        expectRefused(.activationTokenMalformed, try sign(claims, header: ["typ": 1]))
    }

    @Test func expiry() throws {
        var c = claims
        c["exp"] = .number(now.timeIntervalSince1970 - 59)
        _ = try verifier().verify(try sign(c), now: now)
        c["exp"] = .number(now.timeIntervalSince1970 - 61)
        let expired = try sign(c)
        let e = thrownError { () throws(TesseraError) in try verifier().verify(expired, now: now) }
        #expect(e?.code == .activationTokenExpired)
        #expect(e?.retryable == false)
        let strict = ActivationTokenVerifier(issuers: verifier().issuers, stationId: nil, leeway: 0)
        c["exp"] = .number(now.timeIntervalSince1970 - 1)
        expectRefused(.activationTokenExpired, try sign(c), verifier: strict)
    }

    @Test func notYetValid() throws {
        var c = claims
        c["nbf"] = .number(now.timeIntervalSince1970 + 59)
        _ = try verifier().verify(try sign(c), now: now)
        c["nbf"] = .number(now.timeIntervalSince1970 + 61)
        expectRefused(.activationTokenExpired, try sign(c))
    }

    @Test func wrongKeyUnknownIssuerAndKeyIds() throws {
        expectRefused(.activationTokenSignatureInvalid, try sign(claims, with: P256.Signing.PrivateKey()))

        var c = claims
        c["iss"] = "https://elsewhere.example"
        expectRefused(.activationTokenSignatureInvalid, try sign(c))

        expectRefused(
            .activationTokenSignatureInvalid,
            try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": "2025-9"]),
            verifier: verifier(keyId: "2026-1"))
        // A kid is matched only when the configuration names one.
        _ = try verifier().verify(
            try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": "anything"]), now: now)
        expectRefused(.activationTokenMalformed, try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": 7]))
    }

    @Test func keyRotation() throws {
        let old = P256.Signing.PrivateKey()
        let v = ActivationTokenVerifier(
            issuers: [
                IssuerKey(issuer: Self.issuer, keyId: "old", publicKey: old.publicKey),
                IssuerKey(issuer: Self.issuer, keyId: "new", publicKey: key.publicKey),
            ], stationId: nil)
        _ = try v.verify(
            try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": "old"], with: old), now: now)
        _ = try v.verify(try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": "new"]), now: now)
        _ = try v.verify(try sign(claims, with: old), now: now)
        expectRefused(
            .activationTokenSignatureInvalid,
            try sign(claims, header: ["typ": "tessera-activation+jwt", "kid": "new"], with: old), verifier: v)
    }

    /// Builds a token with an arbitrary header and signature part.
    func unsigned(header: JSONValue, signature: [UInt8]) -> String {
        Base64URL.encode(header.serialized()) + "." + Base64URL.encode(JSONValue.object(claims).serialized()) + "."
            + Base64URL.encode(signature)
    }

    @Test func algorithmOtherThanES256() throws {
        expectRefused(.activationTokenSignatureInvalid, unsigned(header: ["alg": "none"], signature: []))
        expectRefused(.activationTokenSignatureInvalid, unsigned(header: ["alg": "None"], signature: []))
        expectRefused(.activationTokenSignatureInvalid, unsigned(header: [:], signature: []))
        expectRefused(.activationTokenSignatureInvalid, unsigned(header: ["alg": "es256"], signature: []))
        // HS256 keyed with the issuer's public key (the classic algorithm-confusion attack).
        let header: JSONValue = ["alg": "HS256"]
        let input =
            Base64URL.encode(header.serialized()) + "." + Base64URL.encode(JSONValue.object(claims).serialized())
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array(input.utf8),
            using: SymmetricKey(data: key.publicKey.x963Representation))
        expectRefused(.activationTokenSignatureInvalid, input + "." + Base64URL.encode(mac))
        // ES256 with a signature of the wrong size.
        expectRefused(
            .activationTokenSignatureInvalid,
            unsigned(header: ["alg": "ES256", "typ": "JWT"], signature: [UInt8](repeating: 1, count: 64)))
        expectRefused(
            .activationTokenMalformed,
            try sign(claims, header: ["typ": "tessera-activation+jwt", "crit": ["exp"], "exp": 1]))
    }

    @Test func tamperedPayload() throws {
        let parts = try sign(claims).split(separator: ".").map(String.init)
        var c = claims
        c["workflow"] = "admin-badge"
        let forged = parts[0] + "." + Base64URL.encode(JSONValue.object(c).serialized()) + "." + parts[2]
        expectRefused(.activationTokenSignatureInvalid, forged)
    }

    @Test func badEncoding() throws {
        let compact = try sign(claims)
        expectRefused(
            .activationTokenMalformed,
            compact.replacing(".", with: ".*", maxReplacements: 1))
        expectRefused(.activationTokenMalformed, compact + "=")
        expectRefused(.activationTokenMalformed, "not a token")
        // A signed payload that is not a JSON object.
        expectRefused(
            .activationTokenMalformed,
            try JWS.signES256(header: ["typ": "JWT"], payload: Array("[1,2]".utf8), key: key))
    }

    @Test(arguments: ["jti", "workflow", "sub", "exp"])
    func missingClaim(name: String) throws {
        var c = claims
        c[name] = nil
        expectRefused(.activationTokenMalformed, try sign(c))
        c[name] = .bool(true)
        expectRefused(.activationTokenMalformed, try sign(c))
    }

    @Test func missingIssuer() throws {
        var c = claims
        c["iss"] = nil
        expectRefused(.activationTokenMalformed, try sign(c))
    }

    @Test func claimsOfTheWrongForm() throws {
        let wrong: [(String, JSONValue)] = [
            ("sub", .string(String(repeating: "s", count: 65))), ("jti", ""), ("iat", "yesterday"), ("nbf", .null),
            ("aud", 5), ("aud", [1]), ("user", "anna"), ("user", ["name": 1]),
            ("expected", ["surname": "ERIKSSON", "height": "180"]), ("expected", ["dateOfBirth": "1974-02-30"]),
        ]
        for (name, value) in wrong {
            var c = claims
            c[name] = value
            expectRefused(.activationTokenMalformed, try sign(c))
        }
        var c = claims
        c["sub"] = .string(String(repeating: "ü", count: 32))  // 64 bytes
        _ = try verifier().verify(try sign(c), now: now)
    }

    /// Claims are judged only after the signature: an expired token with a bad signature is a signature failure.
    @Test func signatureBeforeClaims() throws {
        var c = claims
        c["exp"] = .number(now.timeIntervalSince1970 - 3600)
        c["jti"] = nil
        expectRefused(.activationTokenSignatureInvalid, try sign(c, with: P256.Signing.PrivateKey()))
    }

    @Test func audience() throws {
        var c = claims
        c["aud"] = "kiosk-berlin-1"
        _ = try verifier(stationId: "kiosk-berlin-1").verify(try sign(c), now: now)
        _ = try verifier().verify(try sign(c), now: now)
        expectRefused(.activationTokenAudience, try sign(c), verifier: verifier(stationId: "kiosk-hamburg-2"))

        c["aud"] = ["kiosk-hamburg-2", "kiosk-munich-3"]
        expectRefused(.activationTokenAudience, try sign(c), verifier: verifier(stationId: "kiosk-berlin-1"))
        c["aud"] = []
        expectRefused(.activationTokenAudience, try sign(c), verifier: verifier(stationId: "kiosk-berlin-1"))
        // Without aud: refused by a station with an id, taken by one without.
        c["aud"] = nil
        expectRefused(.activationTokenAudience, try sign(c), verifier: verifier(stationId: "kiosk-berlin-1"))
        _ = try verifier().verify(try sign(c), now: now)
    }

    /// RFC 7515 A.3's header has no `typ`: refused before its signature and claims are looked at.
    @Test func rfc7515A3TokenLacksTyp() throws {
        let v = ActivationTokenVerifier(
            issuers: [IssuerKey(issuer: "joe", keyId: nil, publicKey: try RFC7515A3.publicKey())],
            stationId: nil)
        let e = thrownError { () throws(TesseraError) in
            try v.verify(RFC7515A3.compact, now: Date(timeIntervalSince1970: 1_300_819_000))
        }
        #expect(e?.code == .activationTokenMalformed)
        #expect(e?.message.contains("typ") == true)
    }

    @Test func issuerKeyFromPEM() throws {
        let pem = key.publicKey.pemRepresentation
        let issuerKey = try IssuerKey(issuer: Self.issuer, keyId: "k", pem: "\n" + pem + "\n")
        #expect(issuerKey.publicKey.x963Representation == key.publicKey.x963Representation)

        for bad in [
            P384.Signing.PrivateKey().publicKey.pemRepresentation, key.pemRepresentation, "garbage",
            pem.replacing("PUBLIC KEY", with: "CERTIFICATE"),
        ] {
            let e = expectError(.invalidInput) { () throws(TesseraError) in
                try IssuerKey(issuer: Self.issuer, keyId: nil, pem: bad)
            }
            #expect(e?.message.contains(Self.issuer) == true)
        }
    }
}
