import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import X509Support

/// A document signer: its certificate and private key (DER), and the signature scheme to use.
public struct DocumentSignerKey: Sendable {
    public var certificate: ParsedCertificate
    /// PKCS#8 (or traditional RSA/EC) DER private key.
    public var privateKeyDER: [UInt8]
    public var scheme: SignatureScheme

    public init(certificate: ParsedCertificate, privateKeyDER: [UInt8], scheme: SignatureScheme) {
        self.certificate = certificate; self.privateKeyDER = privateKeyDER; self.scheme = scheme
    }
}

/// Builds a signed EF.SOD: LDSSecurityObject v0 in CMS SignedData (RFC 5652) with content-type,
/// message-digest and signing-time signed attributes, the DS certificate included, wrapped in tag 77.
public enum SODBuilder {
    /// `dataGroups`: number → complete file bytes (as the chip serves them); `hash` is the data group hash.
    public static func build(
        dataGroups: [Int: [UInt8]], signer: DocumentSignerKey, hash: SignatureHash = .sha256,
        signingTime: Date = Date()
    ) throws(TesseraError) -> [UInt8] {
        guard !dataGroups.isEmpty, dataGroups.keys.allSatisfy({ (1...16).contains($0) }) else {
            throw .invalidInput("data group numbers must be 1…16")
        }
        var hashes = [[UInt8]]()
        for n in dataGroups.keys.sorted() {
            hashes.append(ASN1.seq([ASN1.int(n), ASN1.octets(try Signatures.digest(hash, dataGroups[n]!))]))
        }
        let lso = ASN1.seq([ASN1.int(0), AlgorithmOIDs.digestIdentifier(hash), ASN1.seq(hashes)])
        // The CMS digest algorithm follows the signature's hash (ecdsa-with-SHA384 → SHA-384), as verifiers such
        // as OpenSSL compute the signed-attributes digest with it.
        return TLV(
            tag: 0x77,
            value: try signedData(
                content: lso, contentType: AlgorithmOIDs.ldsSecurityObject,
                signer: signer, digest: signer.scheme.hash,
                signingTime: signingTime)
        ).encoded
    }

    /// A DER ContentInfo with SignedData over `content` (also used for master lists).
    static func signedData(
        content: [UInt8], contentType: String, signer: DocumentSignerKey, digest: SignatureHash,
        signingTime: Date, extraCertificates: [ParsedCertificate] = []
    ) throws(TesseraError) -> [UInt8] {
        let attrs = [
            ASN1.seq([ASN1.oid(AlgorithmOIDs.contentTypeAttribute), ASN1.setOf([ASN1.oid(contentType)])]),
            ASN1.seq([ASN1.oid(AlgorithmOIDs.signingTimeAttribute), ASN1.setOf([ASN1.x509Time(signingTime)])]),
            ASN1.seq([
                ASN1.oid(AlgorithmOIDs.messageDigestAttribute),
                ASN1.setOf([ASN1.octets(try Signatures.digest(digest, content))]),
            ]),
        ]
        let signedSet = ASN1.setOf(attrs)
        let signature = try Signatures.sign(signedSet, privateKey: signer.privateKeyDER, scheme: signer.scheme)
        let cert = signer.certificate
        let sid = ASN1.seq([cert.issuer, ASN1.node(ASN1.integer, cert.serialNumber)])
        let signerInfo = ASN1.seq([
            ASN1.int(1), sid, AlgorithmOIDs.digestIdentifier(digest),
            implicitSet(signedSet),
            AlgorithmOIDs.algorithmIdentifier(signer.scheme), ASN1.octets(signature),
        ])
        let sd = ASN1.seq([
            ASN1.int(3), ASN1.setOf([AlgorithmOIDs.digestIdentifier(digest)]),
            ASN1.seq([ASN1.oid(contentType), ASN1.explicit(0, ASN1.octets(content))]),
            ASN1.node(0xA0, ([cert] + extraCertificates).flatMap(\.der)),
            ASN1.setOf([signerInfo]),
        ])
        return ASN1.seq([ASN1.oid(AlgorithmOIDs.signedData), ASN1.explicit(0, sd)])
    }

    /// Re-tags a DER SET OF as [0] IMPLICIT.
    private static func implicitSet(_ set: [UInt8]) -> [UInt8] {
        var out = set
        out[0] = 0xA0
        return out
    }
}

/// Builds a signed EF.CardSecurity: the chip's SecurityInfos (DER SET) in CMS SignedData with eContentType
/// id-SecurityObject, signed like EF.SOD (no 77 wrapper: the file is the ContentInfo).
public enum CardSecurityBuilder {
    public static func build(
        securityInfos: [UInt8], signer: DocumentSignerKey,
        signingTime: Date = Date()
    ) throws(TesseraError) -> [UInt8] {
        try SODBuilder.signedData(
            content: securityInfos, contentType: CardSecurity.contentType, signer: signer,
            digest: signer.scheme.hash, signingTime: signingTime)
    }
}
