import CBOR
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import X509Support

/// The issuer side, for the lab and tests: IssuerSigned (elements + issuerAuth over an MSO) for a device key.
public enum MDocIssuer {
    /// Extended key usage of an mdoc document signer certificate (ISO/IEC 18013-5 Annex B).
    public static let documentSignerEKU = "1.0.18013.5.1.2"
    /// Extended key usage of an mdoc reader authentication certificate.
    public static let readerAuthEKU = "1.0.18013.5.1.6"

    /// A test IACA (self-signed root) and a document signer it issued, P-256.
    public static func testIACA(country: String = "UT", notBefore: Date = Date(timeIntervalSinceNow: -86_400))
        throws(TesseraError) -> (iaca: TestCertificate, documentSigner: TestCertificate)
    {
        let pair = try TestCA.generateChain(
            rootCommonName: "Tessera Test IACA \(country)", signerCommonName: "Tessera Test mdoc DS \(country)",
            country: country, signerExtendedKeyUsage: documentSignerEKU, notBefore: notBefore)
        return (pair.root, pair.signer)
    }

    /// A test reader root (self-signed, with a subject key identifier) and a reader authentication certificate it
    /// issued (EKU 1.0.18013.5.1.6, the root's key identifier as authority key identifier), P-256: what a holder
    /// trusts (`tesserad --mdoc-reader-root`) and what a reader signs its requests with.
    public static func testReaderRoot(
        country: String = "UT", notBefore: Date = Date(timeIntervalSinceNow: -86_400)
    ) throws(TesseraError) -> (root: TestCertificate, reader: TestCertificate) {
        let pair = try TestCA.generateChain(
            rootCommonName: "Tessera Test mdoc reader root \(country)",
            signerCommonName: "Tessera Test mdoc reader \(country)", country: country,
            signerExtendedKeyUsage: readerAuthEKU, notBefore: notBefore, signerValidityDays: 90)
        return (pair.root, pair.signer)
    }

    /// Issues `elements` (namespace → [(identifier, value)]) for `deviceKey`: random 16-byte salts, digest IDs
    /// in random order, SHA-256 digests, an MSO valid from `validFrom` to `validUntil`, signed by `signer`
    /// (whose certificate, DER, goes into x5chain).
    public static func issue(
        docType: String, elements: [(namespace: String, items: [(String, CBORValue)])],
        deviceKey: MDocECKey, signerCertificate: [UInt8], algorithm: COSEAlgorithm = .es256,
        signer: COSESigner, signed: Date = Date(), validFrom: Date? = nil,
        validUntil: Date
    ) throws(TesseraError) -> IssuerSigned {
        let total = elements.reduce(0) { $0 + $1.items.count }
        var ids = Array(0..<UInt64(total))
        for i in ids.indices.reversed() where i > 0 {
            let r = SecureRandom.bytes(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            ids.swapAt(i, Int(r % UInt32(i + 1)))
        }
        var next = 0
        var spaces: [(namespace: String, items: [IssuerSignedItem])] = []
        var digests: [(key: CBORValue, value: CBORValue)] = []
        for ns in elements {
            var items: [IssuerSignedItem] = []
            var nsDigests: [(key: CBORValue, value: CBORValue)] = []
            for (identifier, value) in ns.items {
                let item = try IssuerSignedItem.make(
                    digestID: ids[next], random: SecureRandom.bytes(16),
                    identifier: identifier, value: value)
                next += 1
                items.append(item)
                nsDigests.append((.unsigned(item.digestID), .byteString(MessageDigest.sha256(item.taggedBytes))))
            }
            spaces.append((ns.namespace, items))
            digests.append((.textString(ns.namespace), .map(nsDigests)))
        }
        let mso: CBORValue = [
            "version": "1.0", "digestAlgorithm": "SHA-256", "valueDigests": .map(digests),
            "deviceKeyInfo": ["deviceKey": deviceKey.value], "docType": .textString(docType),
            "validityInfo": [
                "signed": MDocDate.tdate(signed), "validFrom": MDocDate.tdate(validFrom ?? signed),
                "validUntil": MDocDate.tdate(validUntil),
            ],
        ]
        let payload = MDocCBOR.tag24Bytes(MDocCBOR.encode(mso))
        let auth = try COSESign1.sign(
            payload: payload, algorithm: algorithm, x5chain: [signerCertificate], signer: signer)
        return IssuerSigned(nameSpaces: spaces, issuerAuth: auth)
    }
}
