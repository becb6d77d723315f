import APDU
import CryptoPrimitives
import Foundation
import MRZ
import TesseraCore

/// Key and signature algorithm of a generated test certificate.
public enum TestKeyAlgorithm: String, Sendable, CaseIterable {
    case p256, p384, brainpoolP256r1, brainpoolP384r1
    /// RSA 2048 with PKCS#1 v1.5 SHA-256 signatures.
    case rsa2048
    /// RSA 2048 with RSASSA-PSS SHA-256 (MGF1-SHA-256, salt 32) signatures.
    case rsaPSS2048

    var keySpec: SignatureKeySpec {
        switch self {
        case .p256: .ec(curve: "prime256v1")
        case .p384: .ec(curve: "secp384r1")
        case .brainpoolP256r1: .ec(curve: "brainpoolP256r1")
        case .brainpoolP384r1: .ec(curve: "brainpoolP384r1")
        case .rsa2048, .rsaPSS2048: .rsa(bits: 2048)
        }
    }

    /// The scheme certificates and SODs are signed with.
    public var scheme: SignatureScheme {
        switch self {
        case .p256, .brainpoolP256r1: .ecdsa(.sha256)
        case .p384, .brainpoolP384r1: .ecdsa(.sha384)
        case .rsa2048: .rsaPKCS1v15(.sha256)
        case .rsaPSS2048: .rsaPSS(.sha256, mgf1: .sha256, saltLength: 32)
        }
    }
}

/// A generated certificate with its private key.
public struct TestCertificate: Sendable {
    public var certificate: ParsedCertificate
    /// PKCS#8 DER.
    public var privateKeyDER: [UInt8]
    public var algorithm: TestKeyAlgorithm

    public var certificatePEM: String { certificate.pem }
    public var privateKeyPEM: String { PEM.encode(privateKeyDER, label: "PRIVATE KEY") }
}

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
        let cscaName = name(country: c, organization: "Tessera Test \(country)", commonName: "CSCA \(country)")
        let cscaSKI = try keyIdentifier(cscaKey.publicKeyDER)
        let cscaCert = try issue(
            subject: cscaName, issuer: cscaName, publicKey: cscaKey.publicKeyDER, signerKey: cscaKey.privateKeyDER,
            scheme: algorithm.scheme, notBefore: notBefore, days: cscaValidityDays,
            extensions: [
                extensionDER("2.5.29.19", critical: true, ASN1.seq([ASN1.node(ASN1.boolean, [0xFF]), ASN1.int(0)])),
                extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x01, 0x06])),
                extensionDER("2.5.29.14", critical: false, ASN1.octets(cscaSKI)),
                extensionDER("2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, cscaSKI)])),
            ])
        let dsAlg = documentSignerAlgorithm ?? algorithm
        let dsKey = try Signatures.generateKey(dsAlg.keySpec)
        var dsExtensions = [
            extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x07, 0x80])),
            extensionDER("2.5.29.14", critical: false, ASN1.octets(try keyIdentifier(dsKey.publicKeyDER))),
            extensionDER("2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, cscaSKI)])),
        ]
        if let eku = signerExtendedKeyUsage {
            dsExtensions.append(extensionDER("2.5.29.37", critical: false, ASN1.seq([ASN1.oid(eku)])))
        }
        let dsCert = try issue(
            subject: name(
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
            let path = (directory as NSString).appendingPathComponent(name)
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
                        Self.extensionDER(
                            "2.5.29.35", critical: false,
                            ASN1.seq([ASN1.node(0x80, ski)]))
                    ])))
        }
        let tbs = ASN1.seq(tbsParts)
        let signature = try Signatures.sign(tbs, privateKey: csca.privateKeyDER, scheme: csca.algorithm.scheme)
        return try CertificateRevocationList(der: ASN1.seq([tbs, sigAlg, ASN1.node(ASN1.bitString, [0] + signature)]))
    }

    // MARK: - Certificate construction

    static func name(country: String, organization: String, commonName: String) -> [UInt8] {
        func rdn(_ oid: String, _ tag: UInt32, _ v: String) -> [UInt8] {
            ASN1.setOf([ASN1.seq([ASN1.oid(oid), ASN1.node(tag, Array(v.utf8))])])
        }
        return ASN1.seq([
            rdn("2.5.4.6", ASN1.printableString, country), rdn("2.5.4.10", ASN1.utf8String, organization),
            rdn("2.5.4.3", ASN1.utf8String, commonName),
        ])
    }

    static func extensionDER(_ oid: String, critical: Bool, _ value: [UInt8]) -> [UInt8] {
        ASN1.seq([ASN1.oid(oid)] + (critical ? [ASN1.node(ASN1.boolean, [0xFF])] : []) + [ASN1.octets(value)])
    }

    /// SHA-1 of the subjectPublicKey bits (RFC 5280 §4.2.1.2 method 1).
    static func keyIdentifier(_ spki: [UInt8]) throws(TesseraError) -> [UInt8] {
        let parts = try TLV.parse(spki).children()
        guard parts.count == 2, parts[1].tag == ASN1.bitString else { throw TesseraError(.cryptoError, "bad SPKI") }
        return try Signatures.digest(.sha1, Array(parts[1].value.dropFirst()))
    }

    static func issue(
        subject: [UInt8], issuer: [UInt8], publicKey: [UInt8], signerKey: [UInt8], scheme: SignatureScheme,
        notBefore: Date, days: Int, extensions: [[UInt8]]
    ) throws(TesseraError) -> ParsedCertificate {
        var serial = SecureRandom.bytes(10)
        serial[0] = serial[0] & 0x7F | 0x10
        let sigAlg = AlgorithmOIDs.algorithmIdentifier(scheme)
        let tbs = ASN1.seq([
            ASN1.explicit(0, ASN1.int(2)), ASN1.node(ASN1.integer, serial), sigAlg, issuer,
            ASN1.seq([ASN1.x509Time(notBefore), ASN1.x509Time(notBefore.addingTimeInterval(Double(days) * 86_400))]),
            subject, publicKey, ASN1.explicit(3, ASN1.seq(extensions)),
        ])
        let signature = try Signatures.sign(tbs, privateKey: signerKey, scheme: scheme)
        return try ParsedCertificate(der: ASN1.seq([tbs, sigAlg, ASN1.node(ASN1.bitString, [0] + signature)]))
    }
}
