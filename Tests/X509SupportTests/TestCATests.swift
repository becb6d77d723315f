import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing
import X509Support

/// The test CA and the certificate reader, checked against OpenSSL: every chain `TestCA` makes verifies with
/// `openssl verify`, and what `ParsedCertificate` reads is what `openssl x509` prints.
@Suite struct TestCATests {
    @Test(arguments: TestKeyAlgorithm.allCases)
    func chainsPassOpenSSLVerify(algorithm: TestKeyAlgorithm) async throws {
        let (root, signer) = try TestCA.generateChain(
            rootCommonName: "Test Root", signerCommonName: "Test Signer", country: "UT", algorithm: algorithm,
            signerExtendedKeyUsage: "1.0.18013.5.1.6")
        let dir = Scratch.directory("testca")
        try Data(root.certificatePEM.utf8).write(to: URL(fileURLWithPath: dir + "/root.pem"))
        try Data(signer.certificatePEM.utf8).write(to: URL(fileURLWithPath: dir + "/signer.pem"))
        try Data(signer.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: dir + "/signer-key.pem"))
        let verify = try await Subprocess.run(
            "openssl", ["verify", "-purpose", "any", "-CAfile", "root.pem", "signer.pem"], directory: dir)
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.stdoutText.contains("signer.pem: OK"))
        let subject = try await Subprocess.run(
            "openssl", ["x509", "-in", "signer.pem", "-noout", "-subject", "-serial"], directory: dir)
        #expect(subject.stdoutText.contains("C = UT, O = Tessera Test, CN = Test Signer"))
        #expect(
            subject.stdoutText.lowercased().contains("serial=" + Hex.encode(signer.certificate.serialNumber)))
        // The key file belongs to the certificate.
        let certKey = try await Subprocess.run(
            "openssl", ["x509", "-in", "signer.pem", "-noout", "-pubkey"], directory: dir)
        let fileKey = try await Subprocess.run("openssl", ["pkey", "-in", "signer-key.pem", "-pubout"], directory: dir)
        #expect(certKey.status == 0 && certKey.stdout == fileKey.stdout)

        #expect(signer.certificate.subjectDescription == "C=UT, O=Tessera Test, CN=Test Signer")
        #expect(signer.certificate.issuerDescription == root.certificate.subjectDescription)
        #expect(signer.certificate.authorityKeyIdentifier == root.certificate.subjectKeyIdentifier)
        #expect(signer.certificate.extendedKeyUsage == ["1.0.18013.5.1.6"])
        #expect(root.certificate.isCA == true)
        #expect(root.certificate.keyUsage == ParsedCertificate.keyCertSign | 1 << 6)
        #expect(try signer.certificate.isSigned(by: root.certificate))
        #expect(try !root.certificate.isSigned(by: signer.certificate))
    }

    @Test func pemRoundTripsAndParsesEitherForm() throws {
        let (root, _) = try TestCA.generateChain(rootCommonName: "R", signerCommonName: "S")
        let pem = root.certificate.pem
        #expect(pem.hasPrefix("-----BEGIN CERTIFICATE-----\n"))
        #expect(pem.split(separator: "\n").allSatisfy { $0.count <= 64 })
        #expect(
            PEM.blocks(Array((pem + pem).utf8), label: "CERTIFICATE") == [root.certificate.der, root.certificate.der])
        #expect(PEM.blocks(Array(pem.utf8), label: "PRIVATE KEY").isEmpty)
        #expect(try ParsedCertificate(pemOrDER: Array(pem.utf8)) == root.certificate)
        #expect(try ParsedCertificate(pemOrDER: root.certificate.der) == root.certificate)
        #expect(throws: TesseraError.self) { try ParsedCertificate(der: Array(root.certificate.der.dropLast())) }
    }
}
