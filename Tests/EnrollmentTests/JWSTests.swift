import Crypto
import Enrollment
import FoundationEssentials
import TesseraCore
import Testing

/// RFC 7515 Appendix A.3, "Example JWS Using ECDSA P-256 SHA-256".
enum RFC7515A3 {
    /// A.3.1: the JWK's "x", "y" and "d".
    static let x = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
    static let y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
    static let d = "jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"
    /// A.3.1: the complete JWS in compact serialization.
    static let compact =
        "eyJhbGciOiJFUzI1NiJ9"
        + ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
        + ".DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    /// A.3.1 (from A.1.1): the payload, with its CRLF line breaks.
    static let payload = "{\"iss\":\"joe\",\r\n \"exp\":1300819380,\r\n \"http://example.com/is_root\":true}"

    static func publicKey() throws -> P256.Signing.PublicKey {
        let x = try #require(Base64URL.decode(x))
        let y = try #require(Base64URL.decode(y))
        return try P256.Signing.PublicKey(x963Representation: [0x04] + x + y)
    }
}

@Suite struct JWSTests {
    @Test func rfc7515A3Parses() throws {
        let parsed = try JWS.parse(RFC7515A3.compact)
        #expect(parsed.header == ["alg": "ES256"])
        #expect(parsed.payload == Array(RFC7515A3.payload.utf8))
        let parts = RFC7515A3.compact.split(separator: ".")
        #expect(parsed.signingInput == Array((parts[0] + "." + parts[1]).utf8))
        #expect(parsed.signature.count == 64)
    }

    @Test func rfc7515A3Verifies() throws {
        let key = try RFC7515A3.publicKey()
        let parsed = try JWS.parse(RFC7515A3.compact)
        #expect(JWS.verifyES256(parsed, key: key))

        // The A.3 private key "d" belongs to that public key.
        let d = try #require(Base64URL.decode(RFC7515A3.d))
        let privateKey = try P256.Signing.PrivateKey(rawRepresentation: d)
        #expect(privateKey.publicKey.x963Representation == key.x963Representation)
    }

    @Test func rfc7515A3AlteredDoesNotVerify() throws {
        let key = try RFC7515A3.publicKey()
        let parsed = try JWS.parse(RFC7515A3.compact)

        var signature = parsed
        signature.signature[10] ^= 0x01
        #expect(!JWS.verifyES256(signature, key: key))

        var input = parsed
        input.signingInput[input.signingInput.count - 1] ^= 0x01
        #expect(!JWS.verifyES256(input, key: key))

        // The same r and s DER-encoded (as many ECDSA APIs emit) is not a JWS signature.
        var der = parsed
        der.signature = try Array(P256.Signing.ECDSASignature(rawRepresentation: parsed.signature).derRepresentation)
        #expect(!JWS.verifyES256(der, key: key))

        var short = parsed
        short.signature.removeLast()
        #expect(!JWS.verifyES256(short, key: key))

        #expect(!JWS.verifyES256(parsed, key: P256.Signing.PrivateKey().publicKey))
    }

    @Test func signedTokenRoundTrips() throws {
        let key = P256.Signing.PrivateKey()
        let compact = try JWS.signES256(header: ["kid": "k1"], payload: Array("hello".utf8), key: key)
        let parsed = try JWS.parse(compact)
        #expect(parsed.header == ["alg": "ES256", "kid": "k1"])
        #expect(parsed.payload == Array("hello".utf8))
        #expect(JWS.verifyES256(parsed, key: key.publicKey))
    }

    @Test(arguments: [
        "",
        "eyJhbGciOiJFUzI1NiJ9",
        "eyJhbGciOiJFUzI1NiJ9.e30",
        "eyJhbGciOiJFUzI1NiJ9.e30.AA.AA",
        "eyJhbGciOiJFUzI1NiJ9=.e30.AAAA",  // padding
        "eyJhbGciOiJFUzI1NiJ9.e30=.AAAA",
        "eyJhbGciOiJFUzI1NiJ9.e30.AAAA==",
        "eyJhbGciOiJFUzI1NiJ9.e3*.AAAA",  // not base64url
        "eyJhbGciOiJFUzI1NiJ9.e30.AA+/",  // base64, not base64url
        "eyJhbGciOiJFUzI1NiJ9.e30.A",  // impossible length
        "bm90IGpzb24.e30.AAAA",  // header "not json"
        "WyJFUzI1NiJd.e30.AAAA",  // header ["ES256"]: not an object
        ".e30.AAAA",
    ])
    func malformed(compact: String) {
        expectError(.activationTokenMalformed) { () throws(TesseraError) in try JWS.parse(compact) }
    }

    @Test func overlongTokenIsRefusedBeforeDecoding() {
        let compact = "eyJhbGciOiJFUzI1NiJ9." + String(repeating: "A", count: JWS.maxLength) + ".AAAA"
        expectError(.activationTokenMalformed) { () throws(TesseraError) in try JWS.parse(compact) }
    }
}
