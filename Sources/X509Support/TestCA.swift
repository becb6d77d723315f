import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

/// Key and signature algorithm of a generated test certificate.
public enum TestKeyAlgorithm: String, Sendable, CaseIterable {
    case p256, p384, brainpoolP256r1, brainpoolP384r1
    /// RSA 2048 with PKCS#1 v1.5 SHA-256 signatures.
    case rsa2048
    /// RSA 2048 with RSASSA-PSS SHA-256 (MGF1-SHA-256, salt 32) signatures.
    case rsaPSS2048

    package var keySpec: SignatureKeySpec {
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

    package init(certificate: ParsedCertificate, privateKeyDER: [UInt8], algorithm: TestKeyAlgorithm) {
        self.certificate = certificate; self.privateKeyDER = privateKeyDER; self.algorithm = algorithm
    }

    public var certificatePEM: String { certificate.pem }
    public var privateKeyPEM: String { PEM.encode(privateKeyDER, label: "PRIVATE KEY") }
}

/// A throw-away test certificate authority: certificates built as DER and signed through OpenSSL, so every
/// `TestKeyAlgorithm` (including brainpool and RSA-PSS) works the same way. ICAO's `TestPKI` and mdoc's test
/// issuance build on it.
public enum TestCA {
    /// A throw-away root CA and one signer certificate it issued, for document families other than ICAO 9303
    /// (an ISO/IEC 18013-5 IACA and document signer, a reader root and reader certificate). `country` (two
    /// letters) is put into both names when given; `signerExtendedKeyUsage` adds a critical EKU extension;
    /// `signerAuthorityKeyIdentifier` replaces the signer's authority key identifier (a forgery naming another root).
    public static func generateChain(
        rootCommonName: String, signerCommonName: String, country: String? = nil,
        organization: String = "Tessera Test", algorithm: TestKeyAlgorithm = .p256,
        signerExtendedKeyUsage: String? = nil, signerAuthorityKeyIdentifier: [UInt8]? = nil,
        notBefore: Date = Date(timeIntervalSinceNow: -86_400), rootValidityDays: Int = 365 * 9,
        signerValidityDays: Int = 365
    ) throws(TesseraError) -> (root: TestCertificate, signer: TestCertificate) {
        func subject(_ cn: String) -> [UInt8] {
            func rdn(_ oid: String, _ tag: UInt32, _ v: String) -> [UInt8] {
                ASN1.setOf([ASN1.seq([ASN1.oid(oid), ASN1.node(tag, Array(v.utf8))])])
            }
            return ASN1.seq(
                (country.map { [rdn("2.5.4.6", ASN1.printableString, $0)] } ?? [])
                    + [rdn("2.5.4.10", ASN1.utf8String, organization), rdn("2.5.4.3", ASN1.utf8String, cn)])
        }
        let rootKey = try Signatures.generateKey(algorithm.keySpec)
        let rootName = subject(rootCommonName)
        let rootSKI = try keyIdentifier(rootKey.publicKeyDER)
        let root = try issue(
            subject: rootName, issuer: rootName, publicKey: rootKey.publicKeyDER, signerKey: rootKey.privateKeyDER,
            scheme: algorithm.scheme, notBefore: notBefore, days: rootValidityDays,
            extensions: [
                extensionDER("2.5.29.19", critical: true, ASN1.seq([ASN1.node(ASN1.boolean, [0xFF]), ASN1.int(0)])),
                extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x01, 0x06])),
                extensionDER("2.5.29.14", critical: false, ASN1.octets(rootSKI)),
            ])
        let signerKey = try Signatures.generateKey(algorithm.keySpec)
        var extensions = [
            extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x07, 0x80])),
            extensionDER("2.5.29.14", critical: false, ASN1.octets(try keyIdentifier(signerKey.publicKeyDER))),
            extensionDER(
                "2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, signerAuthorityKeyIdentifier ?? rootSKI)])),
        ]
        if let eku = signerExtendedKeyUsage {
            extensions.append(extensionDER("2.5.29.37", critical: true, ASN1.seq([ASN1.oid(eku)])))
        }
        let signer = try issue(
            subject: subject(signerCommonName), issuer: rootName, publicKey: signerKey.publicKeyDER,
            signerKey: rootKey.privateKeyDER, scheme: algorithm.scheme, notBefore: notBefore, days: signerValidityDays,
            extensions: extensions)
        return (
            TestCertificate(certificate: root, privateKeyDER: rootKey.privateKeyDER, algorithm: algorithm),
            TestCertificate(certificate: signer, privateKeyDER: signerKey.privateKeyDER, algorithm: algorithm)
        )
    }

    // MARK: - Certificate construction

    package static func name(country: String, organization: String, commonName: String) -> [UInt8] {
        func rdn(_ oid: String, _ tag: UInt32, _ v: String) -> [UInt8] {
            ASN1.setOf([ASN1.seq([ASN1.oid(oid), ASN1.node(tag, Array(v.utf8))])])
        }
        return ASN1.seq([
            rdn("2.5.4.6", ASN1.printableString, country), rdn("2.5.4.10", ASN1.utf8String, organization),
            rdn("2.5.4.3", ASN1.utf8String, commonName),
        ])
    }

    package static func extensionDER(_ oid: String, critical: Bool, _ value: [UInt8]) -> [UInt8] {
        ASN1.seq([ASN1.oid(oid)] + (critical ? [ASN1.node(ASN1.boolean, [0xFF])] : []) + [ASN1.octets(value)])
    }

    /// SHA-1 of the subjectPublicKey bits (RFC 5280 §4.2.1.2 method 1).
    package static func keyIdentifier(_ spki: [UInt8]) throws(TesseraError) -> [UInt8] {
        let parts = try TLV.parse(spki).children()
        guard parts.count == 2, parts[1].tag == ASN1.bitString else { throw TesseraError(.cryptoError, "bad SPKI") }
        return try Signatures.digest(.sha1, Array(parts[1].value.dropFirst()))
    }

    package static func issue(
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
