import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import Testing
import X509Support

@testable import ICAO

/// Whether an EC SubjectPublicKeyInfo carries explicit domain parameters (a SEQUENCE) instead of a curve OID.
private func explicitParameters(_ spki: [UInt8]) throws -> Bool {
    let algorithm = try #require(try TLV.parse(spki).children().first?.children())
    return algorithm.count == 2 && algorithm[1].tag == 0x30
}

@Suite struct TestPKITests {
    @Test(arguments: TestKeyAlgorithm.allCases)
    func certificatesPassOpenSSLVerify(algorithm: TestKeyAlgorithm) async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let pki = try TestPKI.generate(country: "UTO", algorithm: algorithm)
        try pki.write(to: dir.path)
        let out = String(
            decoding: try await OpenSSLCLI.run(["verify", "-CAfile", "csca.pem", "ds.pem"], in: dir), as: UTF8.self)
        #expect(out.contains("ds.pem: OK"))
        let text = String(
            decoding: try await OpenSSLCLI.run(
                ["x509", "-in", "csca.der", "-inform", "DER", "-noout", "-text"], in: dir),
            as: UTF8.self)
        #expect(text.contains("Certificate Sign"))
        #expect(text.contains("CA:TRUE"))
        #expect(text.contains("C = UT"))
        // The private key file is usable by openssl and matches the certificate.
        let certKey = try await OpenSSLCLI.run(["x509", "-in", "ds.pem", "-noout", "-pubkey"], in: dir)
        let fileKey = try await OpenSSLCLI.run(["pkey", "-in", "ds-key.pem", "-pubout"], in: dir)
        #expect(certKey == fileKey)
        #expect(pki.csca.certificate.keyUsage == ParsedCertificate.keyCertSign | 1 << 6)
        #expect(pki.documentSigner.certificate.keyUsage == ParsedCertificate.digitalSignature)
        #expect(pki.documentSigner.certificate.authorityKeyIdentifier == pki.csca.certificate.subjectKeyIdentifier)
        #expect(try pki.documentSigner.certificate.isSigned(by: pki.csca.certificate))
        #expect(try !pki.csca.certificate.isSigned(by: pki.documentSigner.certificate))
        #expect(pki.csca.certificate.subjectCountry == "UT")
    }

    @Test func parsesOpenSSLCertificates() async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await OpenSSLCLI.makePKI(in: dir, kind: "brainpoolP256r1", explicitCSCA: true)
        let csca = try ParsedCertificate(pemOrDER: OpenSSLCLI.read("csca.pem", in: dir))
        let ds = try ParsedCertificate(pemOrDER: OpenSSLCLI.read("ds.pem", in: dir))
        #expect(ds.serialNumber == [0x12, 0x34])
        #expect(ds.subjectDescription == "C=UT, O=OpenSSL Test, CN=DS OpenSSL")
        #expect(csca.isCA == true)
        #expect(try ds.isSigned(by: csca))
        #expect(try explicitParameters(csca.subjectPublicKeyInfo))
        #expect(try !explicitParameters(ds.subjectPublicKeyInfo))
        #expect(try Signatures.describe(publicKey: ds.subjectPublicKeyInfo).curveName == "brainpoolP256r1")
    }

    @Test func explicitParameterKeysFromSignatures() throws {
        let pair = try Signatures.generateKey(.ec(curve: "brainpoolP256r1", explicitParameters: true))
        let message = Array("explicit".utf8)
        let sig = try Signatures.sign(message, privateKey: pair.privateKeyDER, scheme: .ecdsa(.sha256))
        #expect(try Signatures.verify(sig, over: message, publicKey: pair.publicKeyDER, scheme: .ecdsa(.sha256)))
        #expect(try !Signatures.verify(sig, over: message + [0], publicKey: pair.publicKeyDER, scheme: .ecdsa(.sha256)))
        #expect(try explicitParameters(pair.publicKeyDER))
        #expect(try !explicitParameters(Signatures.generateKey(.ec(curve: "brainpoolP256r1")).publicKeyDER))
    }

    @Test func signatureDigestsMatchKnownAnswers() throws {
        // FIPS 180-2 "abc" test vectors.
        let abc = Array("abc".utf8)
        #expect(Hex.encode(try Signatures.digest(.sha1, abc)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(
            Hex.encode(try Signatures.digest(.sha224, abc))
                == "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7")
        #expect(
            Hex.encode(try Signatures.digest(.sha256, abc))
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
