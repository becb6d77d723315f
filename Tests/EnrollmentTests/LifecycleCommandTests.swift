import Crypto
import Enrollment
import FoundationEssentials
import TesseraCore
import Testing

@Suite struct LifecycleCommandTests {
    static let issuer = "https://pacs.example"
    let key = P256.Signing.PrivateKey()
    let now = Date(timeIntervalSince1970: 1_760_000_000)

    var claims: [String: JSONValue] {
        [
            "iss": .string(Self.issuer), "jti": "cmd-1", "action": "suspend", "credentialId": "AQID",
            "aud": "kiosk-1", "exp": .number(now.timeIntervalSince1970 + 300), "reason": "badge lost",
        ]
    }

    func sign(
        _ claims: [String: JSONValue], typ: String = "tessera-lifecycle+jwt",
        with key: P256.Signing.PrivateKey? = nil
    ) throws -> String {
        try JWS.signES256(
            header: ["typ": .string(typ)], payload: JSONValue.object(claims).serialized(), key: key ?? self.key)
    }

    var verifier: LifecycleCommandVerifier {
        LifecycleCommandVerifier(
            issuers: [IssuerKey(issuer: Self.issuer, keyId: nil, publicKey: key.publicKey)],
            stationId: "kiosk-1")
    }

    func refused(
        _ compact: String, verifier: LifecycleCommandVerifier? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let v = verifier ?? self.verifier
        expectError(.lifecycleCommandInvalid, sourceLocation: sourceLocation) { () throws(TesseraError) in
            try v.verify(compact, now: now)
        }
    }

    @Test func validCommands() throws {
        let c = try verifier.verify(sign(claims), now: now)
        #expect(c.action == .suspend && c.credentialId == [1, 2, 3] && c.jti == "cmd-1" && c.reason == "badge lost")
        var byUser = claims
        byUser["credentialId"] = nil
        byUser["rpId"] = "example.com"
        byUser["userId"] = "dXNlci0x"
        byUser["action"] = "deactivate"
        byUser["aud"] = ["kiosk-0", "kiosk-1"]
        let u = try verifier.verify(sign(byUser), now: now)
        #expect(
            u.action == .deactivate && u.rpId == "example.com" && u.userId == Array("user-1".utf8)
                && u.credentialId == nil)
    }

    @Test func refusals() throws {
        refused(try sign(claims, with: P256.Signing.PrivateKey()))  // another key
        refused(try sign(claims, typ: "JWT"))  // an activation token's generic type is not a command
        refused(try sign(claims, typ: "tessera-activation+jwt"))
        var c = claims
        c["aud"] = "kiosk-2"
        refused(try sign(c))
        c["aud"] = nil
        refused(try sign(c))
        c = claims
        c["exp"] = .number(now.timeIntervalSince1970 - 120)
        refused(try sign(c))
        c = claims
        c["action"] = "delete"
        refused(try sign(c))
        c = claims
        c["rpId"] = "example.com"  // both a credential and a user
        refused(try sign(c))
        c = claims
        c["credentialId"] = nil  // neither
        refused(try sign(c))
        c = claims
        c["iss"] = "https://other.example"
        refused(try sign(c))
        refused("a.b")
        // A station without an id takes no command.
        refused(
            try sign(claims),
            verifier: LifecycleCommandVerifier(
                issuers: [IssuerKey(issuer: Self.issuer, keyId: nil, publicKey: key.publicKey)], stationId: nil))
    }
}
