import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// A CMS SignedData (RFC 5652 §5) as used by EF.SOD and CSCA master lists.
public struct CMSSignedData: Sendable {
    /// How a SignerInfo names its certificate.
    public enum SignerIdentifier: Sendable, Equatable {
        /// DER issuer Name and serial number INTEGER content.
        case issuerAndSerialNumber(issuer: [UInt8], serialNumber: [UInt8])
        case subjectKeyIdentifier([UInt8])
    }

    public struct SignerInfo: Sendable {
        public var version: Int
        public var signerIdentifier: SignerIdentifier
        public var digestAlgorithm: SignatureHash
        /// The signed attributes re-tagged as a DER SET OF (what the signature covers), nil when absent.
        public var signedAttributes: [UInt8]?
        /// Attribute OID → first value (DER).
        public var attributes: [String: TLV]
        /// The DER signatureAlgorithm AlgorithmIdentifier.
        public var signatureAlgorithm: [UInt8]
        public var signature: [UInt8]
    }

    public var version: Int
    /// eContentType.
    public var contentType: String
    /// The eContent octets (for EF.SOD: the DER LDSSecurityObject).
    public var content: [UInt8]
    public var certificates: [ParsedCertificate]
    public var signerInfos: [SignerInfo]

    /// Parses a DER/BER ContentInfo holding SignedData. Throws MALFORMED_DATA. With `detachedAllowed`, the eContent
    /// may be absent (a detached signature, as a PIV CHUID's): `content` is then empty and the caller sets it to the
    /// signed bytes before `verify`.
    public init(contentInfo bytes: [UInt8], detachedAllowed: Bool = false) throws(TesseraError) {
        let ci = try TLV.parse(bytes, allowTrailing: true)
        try ASN1.expect(ci, ASN1.sequence, "ContentInfo")
        let ciParts = try ci.children()
        guard ciParts.count == 2, try ASN1.oidValue(ciParts[0]) == AlgorithmOIDs.signedData,
            ciParts[1].tag == 0xA0, let sd = try ciParts[1].children().first
        else {
            throw TesseraError(.malformedData, "ContentInfo is not SignedData")
        }
        try ASN1.expect(sd, ASN1.sequence, "SignedData")
        let parts = try sd.children()
        guard parts.count >= 4 else { throw TesseraError(.malformedData, "SignedData too short") }
        version = try ASN1.smallInt(parts[0])
        try ASN1.expect(parts[2], ASN1.sequence, "EncapsulatedContentInfo")
        let encap = try parts[2].children()
        guard let first = encap.first else { throw TesseraError(.malformedData, "EncapsulatedContentInfo") }
        contentType = try ASN1.oidValue(first)
        content = try Self.encapsulatedContent(encap, detachedAllowed: detachedAllowed)
        var certs = [ParsedCertificate]()
        var index = 3
        while index < parts.count - 1 {
            let p = parts[index]
            if p.tag == 0xA0 {
                // An unparseable extra certificate is skipped; a missing signer certificate is reported later.
                for c in try p.children() where c.tag == ASN1.sequence {
                    if let cert = try? ParsedCertificate(der: c.encoded) { certs.append(cert) }
                }
            } else if p.tag != 0xA1 {
                throw TesseraError(.malformedData, "unexpected SignedData field \(TLV.tagHex(p.tag))")
            }
            index += 1
        }
        certificates = certs
        let infos = parts[parts.count - 1]
        try ASN1.expect(infos, ASN1.set, "signerInfos")
        var signers = [SignerInfo]()
        for si in try infos.children() { signers.append(try Self.signerInfo(si)) }
        signerInfos = signers
    }

    private static func encapsulatedContent(_ encap: [TLV], detachedAllowed: Bool) throws(TesseraError) -> [UInt8] {
        if encap.count == 1 && detachedAllowed { return [] }
        guard encap.count == 2, encap[1].tag == 0xA0, let octets = try encap[1].children().first else {
            throw TesseraError(.malformedData, "SignedData without encapsulated content")
        }
        switch octets.tag {
        case ASN1.octetString: return octets.value
        case 0x24:  // BER constructed OCTET STRING
            var c = [UInt8]()
            for chunk in try octets.children() {
                try ASN1.expect(chunk, ASN1.octetString, "eContent chunk")
                c += chunk.value
            }
            return c
        default: throw TesseraError(.malformedData, "eContent is not an OCTET STRING")
        }
    }

    private static func signerInfo(_ si: TLV) throws(TesseraError) -> SignerInfo {
        try ASN1.expect(si, ASN1.sequence, "SignerInfo")
        let p = try si.children()
        guard p.count >= 5 else { throw TesseraError(.malformedData, "SignerInfo too short") }
        let version = try ASN1.smallInt(p[0])
        let sid: SignerIdentifier
        switch p[1].tag {
        case ASN1.sequence:
            let ias = try p[1].children()
            guard ias.count == 2 else { throw TesseraError(.malformedData, "IssuerAndSerialNumber") }
            try ASN1.expect(ias[1], ASN1.integer, "serialNumber")
            sid = .issuerAndSerialNumber(issuer: ias[0].encoded, serialNumber: ias[1].value)
        case 0x80: sid = .subjectKeyIdentifier(p[1].value)
        default: throw TesseraError(.malformedData, "unknown SignerIdentifier")
        }
        let digest = try AlgorithmOIDs.hash(fromIdentifier: p[2])
        var i = 3
        var signed: [UInt8]?
        var attrs = [String: TLV]()
        if p[i].tag == 0xA0 {
            signed = TLV.encode(tag: ASN1.set, value: p[i].value)
            for a in try p[i].children() {
                let ap = try a.children()
                guard ap.count == 2, ap[1].tag == ASN1.set else { throw TesseraError(.malformedData, "bad attribute") }
                let values = try ap[1].children()
                guard values.count == 1 else { throw TesseraError(.malformedData, "attribute must have one value") }
                let oid = try ASN1.oidValue(ap[0])
                guard attrs[oid] == nil else { throw TesseraError(.malformedData, "duplicate attribute \(oid)") }
                attrs[oid] = values[0]
            }
            i += 1
        }
        guard p.count >= i + 2 else { throw TesseraError(.malformedData, "SignerInfo truncated") }
        try ASN1.expect(p[i], ASN1.sequence, "signatureAlgorithm")
        try ASN1.expect(p[i + 1], ASN1.octetString, "signature")
        return SignerInfo(
            version: version, signerIdentifier: sid, digestAlgorithm: digest, signedAttributes: signed,
            attributes: attrs, signatureAlgorithm: p[i].encoded, signature: p[i + 1].value)
    }

    /// The certificate a signer names, if included.
    public func certificate(for signer: SignerInfo) -> ParsedCertificate? {
        certificates.first { c in
            switch signer.signerIdentifier {
            case .issuerAndSerialNumber(let issuer, let serial):
                return c.serialNumber == serial && ParsedCertificate.sameName(c.issuer, issuer)
            case .subjectKeyIdentifier(let ski):
                return c.subjectKeyIdentifier == ski
            }
        }
    }

    /// Outcome of checking one SignerInfo against the content.
    public enum SignerCheck: Sendable, Equatable {
        case valid
        /// The messageDigest or contentType attribute does not match, or the signature is wrong.
        case invalid(String)
        case unsupported(String)
    }

    /// Checks the signed attributes (content-type, message-digest over the content) and the signature with `signerKey`.
    public func verify(_ signer: SignerInfo, signerKey spki: [UInt8]) -> SignerCheck {
        do {
            let scheme = try AlgorithmOIDs.scheme(
                try TLV.parse(signer.signatureAlgorithm), digest: signer.digestAlgorithm)
            let signedBytes: [UInt8]
            if let signed = signer.signedAttributes {
                guard let ct = signer.attributes[AlgorithmOIDs.contentTypeAttribute],
                    (try? ASN1.oidValue(ct)) == contentType
                else {
                    return .invalid("content-type attribute missing or different from eContentType")
                }
                guard let md = signer.attributes[AlgorithmOIDs.messageDigestAttribute], md.tag == ASN1.octetString
                else {
                    return .invalid("message-digest attribute missing")
                }
                guard md.value == (try Signatures.digest(signer.digestAlgorithm, content)) else {
                    return .invalid("message-digest attribute does not match the content")
                }
                signedBytes = signed
            } else {
                signedBytes = content
            }
            let ok = try Signatures.verify(signer.signature, over: signedBytes, publicKey: spki, scheme: scheme)
            return ok ? .valid : .invalid("signature does not verify with the signer's key")
        } catch {
            return error.code == .malformedData ? .invalid(error.message) : .unsupported(error.message)
        }
    }
}

/// EF.SOD: the LDSSecurityObject (Doc 9303 Part 10 §4.6.2) inside CMS SignedData, wrapped in tag 77.
public struct SecurityObject: Sendable {
    public var signedData: CMSSignedData
    /// LDSSecurityObject version (0, or 1 with LDS version info).
    public var version: Int
    public var hashAlgorithm: SignatureHash
    /// Data group number → hash.
    public var dataGroupHashes: [Int: [UInt8]]
    /// LDS and Unicode versions (LDSSecurityObject v1).
    public var ldsVersion: String?
    public var unicodeVersion: String?

    /// Parses EF.SOD (with or without the 77 wrapper). Throws MALFORMED_DATA or CRYPTO_ERROR (unknown hash).
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try TLV.parse(bytes, allowTrailing: true)
        let ci = outer.tag == 0x77 ? outer.value : outer.encoded
        signedData = try CMSSignedData(contentInfo: ci)
        guard signedData.contentType == AlgorithmOIDs.ldsSecurityObject else {
            throw TesseraError(.malformedData, "EF.SOD content is \(signedData.contentType), not an LDSSecurityObject")
        }
        let lso = try TLV.parse(signedData.content)
        try ASN1.expect(lso, ASN1.sequence, "LDSSecurityObject")
        let p = try lso.children()
        guard p.count >= 3 else { throw TesseraError(.malformedData, "LDSSecurityObject too short") }
        version = try ASN1.smallInt(p[0])
        hashAlgorithm = try AlgorithmOIDs.hash(fromIdentifier: p[1])
        try ASN1.expect(p[2], ASN1.sequence, "dataGroupHashValues")
        var hashes = [Int: [UInt8]]()
        for entry in try p[2].children() {
            let e = try entry.children()
            guard e.count == 2 else { throw TesseraError(.malformedData, "DataGroupHash") }
            let n = try ASN1.smallInt(e[0])
            try ASN1.expect(e[1], ASN1.octetString, "dataGroupHashValue")
            guard (1...16).contains(n), hashes[n] == nil else {
                throw TesseraError(.malformedData, "bad data group number \(n)")
            }
            guard e[1].value.count == hashAlgorithm.outputSize else {
                throw TesseraError(.malformedData, "DG\(n) hash has \(e[1].value.count) bytes")
            }
            hashes[n] = e[1].value
        }
        dataGroupHashes = hashes
        if p.count >= 4, p[3].tag == ASN1.sequence {
            let v = try p[3].children()
            if v.count >= 2 { ldsVersion = LDSParsing.text(v[0].value); unicodeVersion = LDSParsing.text(v[1].value) }
        }
    }

    /// The document signer certificate named by the first SignerInfo, if the SOD includes it.
    public var documentSignerCertificate: ParsedCertificate? {
        signedData.signerInfos.first.flatMap { signedData.certificate(for: $0) }
    }
}
