import CryptoPrimitives
import Foundation
import TesseraCore

extension TestPKI {
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
}
