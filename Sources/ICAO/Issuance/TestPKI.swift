import APDU
import CryptoPrimitives
import FoundationEssentials
import MRZ
import TesseraCore
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// A throw-away ICAO PKI for tests and lab profiles: a self-signed CSCA (keyCertSign) and a document signer
/// certificate issued by it. Certificates are built as DER here and signed through OpenSSL, so every
/// `TestKeyAlgorithm` (including brainpool and RSA-PSS) works the same way.
public struct TestPKI: Sendable {
    public var country: String
    public var csca: TestCertificate
    public var documentSigner: TestCertificate

    /// Generates a CSCA and a document signer. `country` is the issuing state (e.g. "UTO"); the certificates'
    /// C attribute is `countryCode`, else the state's alpha-2 code (`IssuingStateCodes`), else its first two letters.
    /// `signerExtendedKeyUsage` (e.g. `CSCATrustStore.masterListSigningKeyUsage`) goes into the signer certificate.
    public static func generate(
        country: String = "UTO", countryCode: String? = nil, algorithm: TestKeyAlgorithm = .p256,
        documentSignerAlgorithm: TestKeyAlgorithm? = nil, notBefore: Date = Date(timeIntervalSinceNow: -86_400),
        cscaValidityDays: Int = 365 * 15, documentSignerValidityDays: Int = 365 * 11,
        signerExtendedKeyUsage: String? = nil
    )
        throws(TesseraError) -> TestPKI
    {
        let c = countryCode ?? IssuingStateCodes.alpha2(docCode: country) ?? String(country.prefix(2))
        guard c.count == 2, c.allSatisfy({ $0.isASCII && $0.isLetter }) else {
            throw .invalidInput("bad country code \(c)")
        }
        let cscaKey = try Signatures.generateKey(algorithm.keySpec)
        let cscaName = TestCA.name(country: c, organization: "Tessera Test \(country)", commonName: "CSCA \(country)")
        let cscaSKI = try TestCA.keyIdentifier(cscaKey.publicKeyDER)
        let cscaCert = try TestCA.issue(
            subject: cscaName, issuer: cscaName, publicKey: cscaKey.publicKeyDER, signerKey: cscaKey.privateKeyDER,
            scheme: algorithm.scheme, notBefore: notBefore, days: cscaValidityDays,
            extensions: [
                TestCA.extensionDER(
                    "2.5.29.19", critical: true, ASN1.seq([ASN1.node(ASN1.boolean, [0xFF]), ASN1.int(0)])),
                TestCA.extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x01, 0x06])),
                TestCA.extensionDER("2.5.29.14", critical: false, ASN1.octets(cscaSKI)),
                TestCA.extensionDER("2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, cscaSKI)])),
            ])
        let dsAlg = documentSignerAlgorithm ?? algorithm
        let dsKey = try Signatures.generateKey(dsAlg.keySpec)
        var dsExtensions = [
            TestCA.extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x07, 0x80])),
            TestCA.extensionDER(
                "2.5.29.14", critical: false, ASN1.octets(try TestCA.keyIdentifier(dsKey.publicKeyDER))),
            TestCA.extensionDER("2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, cscaSKI)])),
        ]
        if let eku = signerExtendedKeyUsage {
            dsExtensions.append(TestCA.extensionDER("2.5.29.37", critical: false, ASN1.seq([ASN1.oid(eku)])))
        }
        let dsCert = try TestCA.issue(
            subject: TestCA.name(
                country: c, organization: "Tessera Test \(country)", commonName: "Document Signer \(country)"),
            issuer: cscaName, publicKey: dsKey.publicKeyDER, signerKey: cscaKey.privateKeyDER, scheme: algorithm.scheme,
            notBefore: notBefore, days: documentSignerValidityDays, extensions: dsExtensions)
        return TestPKI(
            country: country,
            csca: TestCertificate(certificate: cscaCert, privateKeyDER: cscaKey.privateKeyDER, algorithm: algorithm),
            documentSigner: TestCertificate(certificate: dsCert, privateKeyDER: dsKey.privateKeyDER, algorithm: dsAlg))
    }

    /// The document signer as `SODBuilder` needs it.
    public var documentSignerKey: DocumentSignerKey {
        DocumentSignerKey(
            certificate: documentSigner.certificate, privateKeyDER: documentSigner.privateKeyDER,
            scheme: documentSigner.algorithm.scheme)
    }

    /// A trust store holding only this PKI's CSCA.
    public var trustStore: CSCATrustStore { CSCATrustStore(certificates: [csca.certificate]) }

    /// Writes csca.pem, csca.der, csca-key.pem, ds.pem, ds.der, ds-key.pem into `directory` (created if needed)
    /// and returns the paths written.
    @discardableResult
    public func write(to directory: String) throws(TesseraError) -> [String] {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw TesseraError(.storageError, "cannot create \(directory)") }
        let files: [(String, [UInt8])] = [
            ("csca.pem", Array(csca.certificatePEM.utf8)), ("csca.der", csca.certificate.der),
            ("csca-key.pem", Array(csca.privateKeyPEM.utf8)),
            ("ds.pem", Array(documentSigner.certificatePEM.utf8)), ("ds.der", documentSigner.certificate.der),
            ("ds-key.pem", Array(documentSigner.privateKeyPEM.utf8)),
        ]
        var written = [String]()
        for (name, bytes) in files {
            let path = FilePaths.join(directory, name)
            let perms: Int = name.hasSuffix("-key.pem") ? 0o600 : 0o644
            guard
                FileManager.default.createFile(
                    atPath: path, contents: Data(bytes), attributes: [.posixPermissions: perms])
            else { throw TesseraError(.storageError, "cannot write \(path)") }
            written.append(path)
        }
        return written
    }

    /// An ICAO CSCA master list (CMS SignedData over a CscaMasterList) holding `certificates`, signed by `signer`
    /// at `signingTime`.
    public static func masterList(
        certificates: [ParsedCertificate], signer: DocumentSignerKey, signingTime: Date = Date()
    ) throws(TesseraError) -> [UInt8] {
        let list = ASN1.seq([ASN1.int(0), ASN1.setOf(certificates.map(\.der))])
        return try SODBuilder.signedData(
            content: list, contentType: AlgorithmOIDs.cscaMasterList, signer: signer,
            digest: signer.scheme.hash, signingTime: signingTime)
    }

    /// A CRL of this PKI's CSCA revoking `serialNumbers` (INTEGER content octets), valid from `thisUpdate` to
    /// `nextUpdate`.
    public func crl(
        revoking serialNumbers: [[UInt8]], thisUpdate: Date = Date(),
        nextUpdate: Date = Date().addingTimeInterval(30 * 86_400)
    ) throws(TesseraError) -> CertificateRevocationList {
        let sigAlg = AlgorithmOIDs.algorithmIdentifier(csca.algorithm.scheme)
        let entries = serialNumbers.map { ASN1.seq([ASN1.node(ASN1.integer, $0), ASN1.x509Time(thisUpdate)]) }
        var tbsParts = [
            ASN1.int(1), sigAlg, csca.certificate.subject, ASN1.x509Time(thisUpdate), ASN1.x509Time(nextUpdate),
        ]
        if !entries.isEmpty { tbsParts.append(ASN1.seq(entries)) }
        if let ski = csca.certificate.subjectKeyIdentifier {
            tbsParts.append(
                ASN1.explicit(
                    0,
                    ASN1.seq([
                        TestCA.extensionDER(
                            "2.5.29.35", critical: false,
                            ASN1.seq([ASN1.node(0x80, ski)]))
                    ])))
        }
        let tbs = ASN1.seq(tbsParts)
        let signature = try Signatures.sign(tbs, privateKey: csca.privateKeyDER, scheme: csca.algorithm.scheme)
        return try CertificateRevocationList(der: ASN1.seq([tbs, sigAlg, ASN1.node(ASN1.bitString, [0] + signature)]))
    }
}
