import APDU
import CryptoPrimitives
import TesseraCore

/// Object identifiers of the hash and signature algorithms met in EF.SOD, certificates and DG14.
package enum AlgorithmOIDs {
    package static let hashes: [String: SignatureHash] = [
        "1.3.14.3.2.26": .sha1,
        "2.16.840.1.101.3.4.2.4": .sha224,
        "2.16.840.1.101.3.4.2.1": .sha256,
        "2.16.840.1.101.3.4.2.2": .sha384,
        "2.16.840.1.101.3.4.2.3": .sha512,
    ]
    package static func oid(of hash: SignatureHash) -> String { hashes.first { $0.value == hash }!.key }

    package static let rsaEncryption = "1.2.840.113549.1.1.1"
    package static let rsaPSS = "1.2.840.113549.1.1.10"
    package static let mgf1 = "1.2.840.113549.1.1.8"
    package static let ecPublicKey = "1.2.840.10045.2.1"
    package static let rsaPKCS1: [String: SignatureHash] = [
        "1.2.840.113549.1.1.5": .sha1, "1.2.840.113549.1.1.14": .sha224, "1.2.840.113549.1.1.11": .sha256,
        "1.2.840.113549.1.1.12": .sha384, "1.2.840.113549.1.1.13": .sha512,
    ]
    /// X9.62 ecdsa-with-SHA* (DER signatures).
    package static let ecdsaX962: [String: SignatureHash] = [
        "1.2.840.10045.4.1": .sha1, "1.2.840.10045.4.3.1": .sha224, "1.2.840.10045.4.3.2": .sha256,
        "1.2.840.10045.4.3.3": .sha384, "1.2.840.10045.4.3.4": .sha512,
    ]
    /// BSI TR-03111 ecdsa-plain-SHA* (r || s signatures).
    package static let ecdsaPlain: [String: SignatureHash] = [
        "0.4.0.127.0.7.1.1.4.1.1": .sha1, "0.4.0.127.0.7.1.1.4.1.2": .sha224, "0.4.0.127.0.7.1.1.4.1.3": .sha256,
        "0.4.0.127.0.7.1.1.4.1.4": .sha384, "0.4.0.127.0.7.1.1.4.1.5": .sha512,
    ]
    package static let ecdsaHash: [String: SignatureHash] = ecdsaX962.merging(ecdsaPlain) { a, _ in a }

    // CMS and ICAO content types.
    package static let signedData = "1.2.840.113549.1.7.2"
    package static let contentTypeAttribute = "1.2.840.113549.1.9.3"
    package static let messageDigestAttribute = "1.2.840.113549.1.9.4"
    package static let signingTimeAttribute = "1.2.840.113549.1.9.5"
    package static let ldsSecurityObject = "2.23.136.1.1.1"
    package static let cscaMasterList = "2.23.136.1.1.2"

    /// The signature scheme named by an AlgorithmIdentifier. `digest` is the CMS digestAlgorithm, used when the
    /// identifier names only the key type (rsaEncryption / ecPublicKey, as some issuers write).
    package static func scheme(_ algorithm: TLV, digest: SignatureHash? = nil) throws(TesseraError) -> SignatureScheme {
        let parts = try algorithm.children()
        guard let first = parts.first else { throw TesseraError(.malformedData, "empty AlgorithmIdentifier") }
        let oid = try ASN1.oidValue(first)
        if let h = rsaPKCS1[oid] { return .rsaPKCS1v15(h) }
        if let h = ecdsaX962[oid] { return .ecdsa(h) }
        if let h = ecdsaPlain[oid] { return .ecdsaPlain(h) }
        if oid == rsaEncryption, let digest { return .rsaPKCS1v15(digest) }
        if oid == ecPublicKey, let digest { return .ecdsa(digest) }
        if oid == rsaPSS { return try pssScheme(parts.count > 1 ? parts[1] : nil) }
        throw TesseraError(.cryptoError, "unsupported signature algorithm \(oid)")
    }

    /// RSASSA-PSS-params (RFC 4055) with the RFC defaults (SHA-1, MGF1-SHA-1, salt 20).
    package static func pssScheme(_ params: TLV?) throws(TesseraError) -> SignatureScheme {
        var hash = SignatureHash.sha1, mgfHash = SignatureHash.sha1, salt = 20
        if let params, params.tag == ASN1.sequence {
            for p in try params.children() {
                switch p.tag {
                case 0xA0:
                    guard let alg = try p.children().first?.children().first else {
                        throw TesseraError(.malformedData, "PSS hash")
                    }
                    guard let h = hashes[try ASN1.oidValue(alg)] else {
                        throw TesseraError(.cryptoError, "unsupported PSS hash")
                    }
                    hash = h
                case 0xA1:
                    guard let mgf = try p.children().first?.children(), mgf.count == 2,
                        try ASN1.oidValue(mgf[0]) == mgf1,
                        let inner = try mgf[1].children().first
                    else { throw TesseraError(.malformedData, "PSS MGF") }
                    guard let h = hashes[try ASN1.oidValue(inner)] else {
                        throw TesseraError(.cryptoError, "unsupported MGF1 hash")
                    }
                    mgfHash = h
                case 0xA2:
                    guard let v = try p.children().first else { throw TesseraError(.malformedData, "PSS salt") }
                    salt = try ASN1.smallInt(v)
                case 0xA3:
                    guard let v = try p.children().first, try ASN1.smallInt(v) == 1 else {
                        throw TesseraError(.cryptoError, "unsupported PSS trailer field")
                    }
                default: break
                }
            }
        }
        return .rsaPSS(hash, mgf1: mgfHash, saltLength: salt)
    }

    /// The DER AlgorithmIdentifier for signing with `scheme`.
    package static func algorithmIdentifier(_ scheme: SignatureScheme) -> [UInt8] {
        switch scheme {
        case .rsaPKCS1v15(let h):
            return ASN1.seq([ASN1.oid(rsaPKCS1.first { $0.value == h }!.key), ASN1.node(ASN1.null, [])])
        case .ecdsa(let h):
            return ASN1.seq([ASN1.oid(ecdsaX962.first { $0.value == h }!.key)])
        case .ecdsaPlain(let h):
            return ASN1.seq([ASN1.oid(ecdsaPlain.first { $0.value == h }!.key)])
        case .rsaPSS(let h, let m, let salt):
            let hashAlg = ASN1.seq([ASN1.oid(oid(of: h)), ASN1.node(ASN1.null, [])])
            let mgfAlg = ASN1.seq([ASN1.oid(mgf1), ASN1.seq([ASN1.oid(oid(of: m)), ASN1.node(ASN1.null, [])])])
            return ASN1.seq([
                ASN1.oid(rsaPSS),
                ASN1.seq([ASN1.explicit(0, hashAlg), ASN1.explicit(1, mgfAlg), ASN1.explicit(2, ASN1.int(salt))]),
            ])
        }
    }

    /// A digest AlgorithmIdentifier (parameters absent).
    package static func digestIdentifier(_ hash: SignatureHash) -> [UInt8] { ASN1.seq([ASN1.oid(oid(of: hash))]) }

    package static func hash(fromIdentifier tlv: TLV) throws(TesseraError) -> SignatureHash {
        guard let first = try tlv.children().first else {
            throw TesseraError(.malformedData, "empty AlgorithmIdentifier")
        }
        let oid = try ASN1.oidValue(first)
        guard let h = hashes[oid] else { throw TesseraError(.cryptoError, "unsupported hash algorithm \(oid)") }
        return h
    }
}
