import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

extension CMSSignedData {
    /// Returns the DER ECDSA-with-SHA-256 signature of the bytes it is given (a software key, a key on a token).
    public typealias Signer = @Sendable ([UInt8]) async throws(TesseraError) -> [UInt8]

    /// A DER ContentInfo holding a SignedData (RFC 5652 §5) over `content` with eContentType `contentType`, one
    /// ECDSA-with-SHA-256 SignerInfo by `signerCertificate` (issuer and serial number; the certificate included) and
    /// the signed attributes content-type, message-digest and `extraAttributes` (DER Attribute SEQUENCEs).
    /// `detached`: the eContent is left out (a PIV CHUID's signature).
    public static func build(
        content: [UInt8], contentType: String, detached: Bool = false, extraAttributes: [[UInt8]] = [],
        signerCertificate: ParsedCertificate, sign: Signer
    ) async throws(TesseraError) -> [UInt8] {
        let sha256 = AlgorithmOIDs.digestIdentifier(.sha256)
        let attributes =
            [
                ASN1.seq([ASN1.oid(AlgorithmOIDs.contentTypeAttribute), ASN1.setOf([ASN1.oid(contentType)])]),
                ASN1.seq([
                    ASN1.oid(AlgorithmOIDs.messageDigestAttribute),
                    ASN1.setOf([ASN1.octets(MessageDigest.sha256(content))]),
                ]),
            ] + extraAttributes
        let signedAttributes = ASN1.setOf(attributes)
        let signature = try await sign(signedAttributes)
        let serial = ASN1.node(ASN1.integer, signerCertificate.serialNumber)
        let signerInfo = ASN1.seq([
            ASN1.int(1), ASN1.seq([signerCertificate.issuer, serial]), sha256,
            ASN1.explicit(0, try TLV.parse(signedAttributes).value),
            ASN1.seq([ASN1.oid("1.2.840.10045.4.3.2")]), ASN1.octets(signature),
        ])
        let encapsulated =
            detached
            ? ASN1.seq([ASN1.oid(contentType)])
            : ASN1.seq([ASN1.oid(contentType), ASN1.explicit(0, ASN1.octets(content))])
        let signedData = ASN1.seq([
            ASN1.int(3), ASN1.setOf([sha256]), encapsulated, ASN1.explicit(0, signerCertificate.der),
            ASN1.setOf([signerInfo]),
        ])
        return ASN1.seq([ASN1.oid(AlgorithmOIDs.signedData), ASN1.explicit(0, signedData)])
    }
}
