import Crypto
import Enrollment
import FoundationEssentials
import TesseraCore
import Testing

/// Activation tokens, lifecycle commands and recovery tokens are checked by one verifier with one rule set; only
/// the accepted `typ` and the error codes differ.
@Suite struct SignedTokenRulesTests {
    static let issuer = "https://backend.example"
    let key = P256.Signing.PrivateKey()
    let now = Date(timeIntervalSince1970: 1_760_000_000)

    /// One kind of token: its `typ`, claims that make a valid one, and how it is verified.
    struct Kind: Sendable {
        var name: String
        var typ: String
        var claims: [String: JSONValue]
        /// The code of a malformed token, of an expired one, of one not yet valid, and of a wrong `aud`.
        var malformed: TesseraError.Code
        var expired: TesseraError.Code
        var notYetValid: TesseraError.Code
        var audience: TesseraError.Code
        var verify: @Sendable (_ issuers: [IssuerKey], _ compact: String, _ now: Date) throws(TesseraError) -> Void
    }

    var kinds: [Kind] {
        let base: [String: JSONValue] = [
            "iss": .string(Self.issuer), "jti": "id-1", "aud": "kiosk-1",
            "exp": .number(now.timeIntervalSince1970 + 300), "iat": .number(now.timeIntervalSince1970 - 10),
        ]
        return [
            Kind(
                name: "activation", typ: "tessera-activation+jwt",
                claims: base.merging(["workflow": "employee-badge", "sub": "user-42"]) { a, _ in a },
                malformed: .activationTokenMalformed, expired: .activationTokenExpired,
                notYetValid: .activationTokenExpired, audience: .activationTokenAudience,
                verify: { issuers, compact, now throws(TesseraError) in
                    _ = try ActivationTokenVerifier(issuers: issuers, stationId: "kiosk-1").verify(compact, now: now)
                }),
            Kind(
                name: "lifecycle", typ: "tessera-lifecycle+jwt",
                claims: base.merging(["action": "suspend", "credentialId": "AQID"]) { a, _ in a },
                malformed: .lifecycleCommandInvalid, expired: .lifecycleCommandInvalid,
                notYetValid: .lifecycleCommandInvalid, audience: .lifecycleCommandInvalid,
                verify: { issuers, compact, now throws(TesseraError) in
                    _ = try LifecycleCommandVerifier(issuers: issuers, stationId: "kiosk-1").verify(compact, now: now)
                }),
            Kind(
                name: "recovery", typ: "tessera-recovery+jwt",
                claims: base.merging(["sub": "user-42", "rpId": "example.com", "bindingOf": "AQID"]) { a, _ in a },
                malformed: .recoveryTokenInvalid, expired: .recoveryAttemptExpired,
                notYetValid: .recoveryTokenInvalid, audience: .recoveryTokenInvalid,
                verify: { issuers, compact, now throws(TesseraError) in
                    _ = try RecoveryTokenVerifier(issuers: issuers, stationId: "kiosk-1").verify(compact, now: now)
                }),
        ]
    }

    func sign(_ claims: [String: JSONValue], header: [String: JSONValue]) throws -> String {
        try JWS.signES256(header: header, payload: JSONValue.object(claims).serialized(), key: key)
    }

    @Test func oneRuleSetForEveryKind() throws {
        let issuers = [IssuerKey(issuer: Self.issuer, keyId: nil, publicKey: key.publicKey)]
        for kind in kinds {
            let header: [String: JSONValue] = ["typ": .string(kind.typ)]
            func expect(_ code: TesseraError.Code, _ compact: String, _ what: String) {
                let e = thrownError { () throws(TesseraError) in try kind.verify(issuers, compact, now) }
                #expect(e?.code == code, "\(kind.name): \(what)")
            }
            try kind.verify(issuers, try sign(kind.claims, header: header), now)
            try kind.verify(issuers, try sign(kind.claims, header: ["typ": .string(kind.typ.uppercased())]), now)

            expect(kind.malformed, try sign(kind.claims, header: [:]), "no typ")
            expect(kind.malformed, try sign(kind.claims, header: ["typ": "at+jwt"]), "another typ")
            let wrongForm: [(String, JSONValue?)] = [
                ("nbf", "yesterday"), ("iat", "yesterday"), ("nbf", .null), ("aud", ["kiosk-1", 5]), ("aud", 5),
                ("jti", ""), ("jti", nil), ("exp", nil), ("exp", "tomorrow"),
            ]
            for (name, value) in wrongForm {
                var c = kind.claims
                c[name] = value
                expect(kind.malformed, try sign(c, header: header), "\(name): \(String(describing: value))")
            }
            var c = kind.claims
            c["exp"] = .number(now.timeIntervalSince1970 - 61)
            expect(kind.expired, try sign(c, header: header), "expired")
            c = kind.claims
            c["nbf"] = .number(now.timeIntervalSince1970 + 61)
            expect(kind.notYetValid, try sign(c, header: header), "not yet valid")
            c = kind.claims
            c["aud"] = ["kiosk-2"]
            expect(kind.audience, try sign(c, header: header), "another station")
            c["aud"] = nil
            expect(kind.audience, try sign(c, header: header), "no aud")
        }
    }
}
