import CBOR
import Crypto
import TesseraCore
import TesseraTestSupport
import Testing
import WebAuthn

/// SHA-256("example.com"), as in the WebAuthn spec's examples.
let exampleRpIdHash = Hex.decode("a379a6f6eeafb9a55e378c118034e2751e682fab9f2d30ab13d2125586ce1947")!

/// `count` bytes from the suite's seeded generator (`TESSERA_TEST_SEED` repeats them), one stream per `purpose`.
private func randomBytes(_ count: Int, _ purpose: String) -> [UInt8] {
    var generator = SeededRandom(stream: "RegistrationTests." + purpose)
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

@Suite struct Registration {
    let privateKey = P256.Signing.PrivateKey()
    var x: [UInt8] { Array(privateKey.publicKey.rawRepresentation.prefix(32)) }
    var y: [UInt8] { Array(privateKey.publicKey.rawRepresentation.suffix(32)) }

    @Test func coseKeyHasTheCTAP2CanonicalLayout() throws {
        let cose = try COSEKey.ec2P256(x: x, y: y)
        // {1: 2, 3: -7, -1: 1, -2: h'x', -3: h'y'} hand-encoded per RFC 8949 / RFC 9053.
        let expected: [UInt8] =
            [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + x + [0x22, 0x58, 0x20] + y
        #expect(cose == expected)
        #expect(try COSEKey.ec2P256(ecPoint: Array(privateKey.publicKey.x963Representation)) == expected)
        #expect(
            try COSEKey.ec2P256(ecPoint: [0x04, 0x41] + Array(privateKey.publicKey.x963Representation)) == expected)

        let parsed = try COSEKey(parsing: cose)
        #expect(parsed.algorithm == -7 && parsed.curve == 1 && parsed.x == x && parsed.y == y)
        #expect(parsed.encoded == cose)
        #expect(try parsed.p256PublicKey().rawRepresentation == privateKey.publicKey.rawRepresentation)
    }

    @Test func coseKeyRejectsBadInput() throws {
        #expect(throws: TesseraError.self) { try COSEKey.ec2P256(x: Array(x.prefix(31)), y: y) }
        #expect(throws: TesseraError.self) { try COSEKey.ec2P256(ecPoint: [0x02] + x) }
        // kty OKP (1) instead of EC2.
        let okp: CBORValue = [1: 1, 3: -8, -1: 6, -2: .byteString(x)]
        #expect(throws: TesseraError.self) { try COSEKey(parsing: try okp.encoded()) }
        // Missing y.
        let missing: CBORValue = [1: 2, 3: -7, -1: 1, -2: .byteString(x)]
        #expect(throws: TesseraError.self) { try COSEKey(parsing: try missing.encoded()) }
        // Not canonical: keys out of order.
        let unsorted: [UInt8] =
            [0xA5, 0x03, 0x26, 0x01, 0x02, 0x20, 0x01, 0x21, 0x58, 0x20] + x + [0x22, 0x58, 0x20] + y
        #expect(throws: TesseraError.self) { try COSEKey(parsing: unsorted) }
        // A point not on the curve.
        let offCurve = try COSEKey(parsing: try COSEKey.ec2P256(x: x, y: x))
        #expect(throws: TesseraError.self) { try offCurve.p256PublicKey() }
    }

    @Test func packedSelfAttestationVerifiesWithSwiftCrypto() throws {
        let credentialId = randomBytes(32, "credentialId")
        let cose = try COSEKey.ec2P256(x: x, y: y)
        let attested = try AttestedCredentialData(aaguid: tesseraAAGUID, credentialId: credentialId, publicKey: cose)
        let authData = AuthenticatorData(
            rpId: "example.com", flags: [.userPresent, .userVerified], signCount: 0,
            attestedCredential: attested
        ).encoded

        // Layout per WebAuthn §6.1 and §6.5.2.
        #expect(Array(authData[0..<32]) == exampleRpIdHash)
        #expect(authData[32] == 0x45)
        #expect(Array(authData[33..<37]) == [0, 0, 0, 0])
        #expect(Array(authData[37..<53]) == tesseraAAGUID)
        #expect(Array(authData[53..<55]) == [0x00, 0x20])
        #expect(Array(authData[55..<87]) == credentialId)
        #expect(Array(authData[87...]) == cose)
        #expect(authData.count == 37 + 18 + 32 + 77)

        let challenge = randomBytes(32, "challenge")
        let clientData = CollectedClientData(type: .create, challenge: challenge, origin: "https://example.com")
        let toSign = WebAuthnSigning.dataToSign(authenticatorData: authData, clientDataJSON: clientData.json)
        #expect(toSign == authData + Array(SHA256.hash(data: clientData.json)))
        #expect(toSign == WebAuthnSigning.dataToSign(authenticatorData: authData, clientDataHash: clientData.hash))

        // A PKCS#11 token returns raw r‖s; convert and verify independently.
        let raw = Array(try privateKey.signature(for: toSign).rawRepresentation)
        let der = try ECDSASignature.derFromRaw(raw)
        let signature = try P256.Signing.ECDSASignature(derRepresentation: der)
        #expect(privateKey.publicKey.isValidSignature(signature, for: toSign))
        #expect(WebAuthnSigning.verifyES256(signatureDER: der, data: toSign, publicKey: try COSEKey(parsing: cose)))
        #expect(
            !WebAuthnSigning.verifyES256(signatureDER: der, data: toSign + [0], publicKey: try COSEKey(parsing: cose)))

        let attestationObject = AttestationObject.packedSelf(authData: authData, signatureDER: der)
        let decoded = try CBORValue(decoding: attestationObject, options: .strict)
        let members = try #require(decoded.mapValue)
        #expect(members.map(\.key) == ["fmt", "attStmt", "authData"])
        #expect(members[0].value == "packed")
        let statement = try #require(members[1].value.mapValue)
        #expect(statement.map(\.key) == ["alg", "sig"])
        #expect(statement[0].value.int64Value == -7)
        #expect(statement[1].value.bytesValue == der)
        #expect(members[2].value.bytesValue == authData)
        // Header bytes: map(3), "fmt", "packed", "attStmt", map(2), "alg", -7, "sig".
        let header = ["a3", "63666d74", "667061636b6564", "6761747453746d74", "a2", "63616c67", "26", "63736967"]
            .joined()
        #expect(Hex.encode(attestationObject).hasPrefix(header))

        let parsedObject = try AttestationObject(parsing: attestationObject)
        #expect(parsedObject.format == "packed" && parsedObject.authData == authData)

        let parsed = try AuthenticatorData(parsing: members[2].value.bytesValue ?? [])
        #expect(parsed.rpIdHash == exampleRpIdHash)
        #expect(parsed.flags == [.userPresent, .userVerified, .attestedCredentialData])
        #expect(parsed.signCount == 0)
        #expect(parsed.attestedCredential?.aaguid == tesseraAAGUID)
        #expect(parsed.attestedCredential?.credentialId == credentialId)
        #expect(parsed.attestedCredential?.publicKey == cose)
        #expect(parsed.extensions == nil)
        #expect(parsed.encoded == authData)
    }

    @Test func noneAttestationIsExact() throws {
        let authData: [UInt8] = Array(repeating: 0xAB, count: 37)
        let object = AttestationObject.none(authData: authData)
        let expected = [
            "a3", "63666d74", "646e6f6e65", "6761747453746d74", "a0", "6861757468446174615825",
            String(repeating: "ab", count: 37),
        ].joined()
        #expect(Hex.encode(object) == expected)
        let parsed = try AttestationObject(parsing: object)
        #expect(parsed.format == "none" && parsed.statement == .map([]) && parsed.authData == authData)
    }
}

@Suite struct Assertion {
    @Test func assertionAuthenticatorDataLayoutAndSignature() throws {
        let key = P256.Signing.PrivateKey()
        let authData = AuthenticatorData(
            rpId: "example.com", flags: [.userPresent, .backupEligible, .backedUp],
            signCount: 0x0102_0304
        ).encoded
        #expect(authData.count == 37)
        #expect(Array(authData[0..<32]) == exampleRpIdHash)
        #expect(authData[32] == 0x19)
        #expect(Array(authData[33..<37]) == [0x01, 0x02, 0x03, 0x04])

        let clientData = CollectedClientData(type: .get, challenge: [1, 2, 3], origin: "https://example.com")
        let toSign = WebAuthnSigning.dataToSign(authenticatorData: authData, clientDataJSON: clientData.json)
        let der = try ECDSASignature.derFromRaw(Array(try key.signature(for: toSign).rawRepresentation))
        #expect(key.publicKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: der), for: toSign))

        let parsed = try AuthenticatorData(parsing: authData)
        #expect(parsed.signCount == 0x0102_0304 && parsed.attestedCredential == nil)
        #expect(parsed.flags == [.userPresent, .backupEligible, .backedUp])
    }

    @Test func flagBitsMatchTheSpec() {
        #expect(AuthenticatorFlags.userPresent.rawValue == 0x01)
        #expect(AuthenticatorFlags.userVerified.rawValue == 0x04)
        #expect(AuthenticatorFlags.backupEligible.rawValue == 0x08)
        #expect(AuthenticatorFlags.backedUp.rawValue == 0x10)
        #expect(AuthenticatorFlags.attestedCredentialData.rawValue == 0x40)
        #expect(AuthenticatorFlags.extensionData.rawValue == 0x80)
    }

    @Test func atAndEDFollowTheContent() throws {
        let forged = AuthenticatorData(
            rpId: "example.com", flags: [.userPresent, .attestedCredentialData, .extensionData],
            signCount: 1)
        #expect(forged.encoded[32] == 0x01)
        let extensions = try (["credProtect": 2] as CBORValue).encoded()
        let withExtensions = AuthenticatorData(
            rpId: "example.com", flags: .userPresent, signCount: 1,
            extensions: extensions)
        #expect(withExtensions.encoded[32] == 0x81)
        #expect(Array(withExtensions.encoded[37...]) == extensions)
        let parsed = try AuthenticatorData(parsing: withExtensions.encoded)
        #expect(parsed.extensions == extensions && parsed == withExtensions)
    }

    @Test func parserRejectsMalformedAuthenticatorData() throws {
        let cose = try COSEKey.ec2P256(x: [UInt8](repeating: 1, count: 32), y: [UInt8](repeating: 2, count: 32))
        let attested = try AttestedCredentialData(aaguid: tesseraAAGUID, credentialId: [9, 9, 9], publicKey: cose)
        let good = AuthenticatorData(
            rpId: "example.com", flags: .userPresent, signCount: 5, attestedCredential: attested
        ).encoded
        _ = try AuthenticatorData(parsing: good)

        var bad: [[UInt8]] = [
            Array(good.prefix(36)),  // shorter than the fixed header
            Array(good.prefix(50)),  // attested credential data cut short
            Array(good.dropLast()),  // COSE key truncated
            good + [0x00],  // trailing byte
        ]
        var hugeId = good
        hugeId[53] = 0x04  // credential ID length 1027 (> 1023)
        bad.append(hugeId)
        var longId = good
        longId[54] = 0x40  // credential ID length beyond the data
        bad.append(longId)
        var noMap = Array(good.prefix(58))
        noMap += [0x01]  // "public key" that is an integer
        bad.append(noMap)
        var edWithoutMap = Array(good.prefix(37))
        edWithoutMap[32] = 0x81
        bad.append(edWithoutMap)
        for bytes in bad {
            #expect(throws: TesseraError.self, "\(Hex.encode(bytes))") { try AuthenticatorData(parsing: bytes) }
        }
        do {
            _ = try AuthenticatorData(parsing: good + [0x00])
        } catch {
            #expect(error.code == .malformedData)
        }
    }

    @Test func attestedCredentialDataValidatesItsParts() throws {
        let cose = try COSEKey.ec2P256(x: [UInt8](repeating: 1, count: 32), y: [UInt8](repeating: 2, count: 32))
        #expect(throws: TesseraError.self) {
            try AttestedCredentialData(aaguid: [0], credentialId: [1], publicKey: cose)
        }
        #expect(throws: TesseraError.self) {
            try AttestedCredentialData(aaguid: tesseraAAGUID, credentialId: [], publicKey: cose)
        }
        #expect(throws: TesseraError.self) {
            try AttestedCredentialData(
                aaguid: tesseraAAGUID, credentialId: [UInt8](repeating: 0, count: 1024), publicKey: cose)
        }
        #expect(throws: TesseraError.self) {
            try AttestedCredentialData(aaguid: tesseraAAGUID, credentialId: [1], publicKey: cose + [0])
        }
        _ = try AttestedCredentialData(
            aaguid: tesseraAAGUID, credentialId: [UInt8](repeating: 0, count: 1023), publicKey: cose)
    }

    @Test func tesseraAAGUIDIsSixteenNonZeroBytes() {
        #expect(tesseraAAGUID.count == 16)
        #expect(tesseraAAGUID.contains { $0 != 0 })
    }
}
