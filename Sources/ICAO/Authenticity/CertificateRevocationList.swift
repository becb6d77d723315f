import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import X509Support

/// An X.509 CRL (RFC 5280 §5) as published by a CSCA for its document signers (Doc 9303 Part 12 §7).
public struct CertificateRevocationList: Sendable, Equatable {
    public let der: [UInt8]
    public let tbsCertList: [UInt8]
    public let signatureAlgorithm: [UInt8]
    public let signature: [UInt8]
    /// DER issuer Name.
    public let issuer: [UInt8]
    public let thisUpdate: Date
    public let nextUpdate: Date?
    /// Serial numbers (INTEGER content octets) of the revoked certificates.
    public let revokedSerialNumbers: Set<[UInt8]>
    public let authorityKeyIdentifier: [UInt8]?

    /// Parses a DER CRL. Throws MALFORMED_DATA.
    public init(der: [UInt8]) throws(TesseraError) {
        let crl = try TLV.parse(der)
        try ASN1.expect(crl, ASN1.sequence, "CertificateList")
        let top = try crl.children()
        guard top.count == 3 else { throw TesseraError(.malformedData, "CertificateList must have 3 parts") }
        try ASN1.expect(top[0], ASN1.sequence, "TBSCertList")
        try ASN1.expect(top[1], ASN1.sequence, "signatureAlgorithm")
        try ASN1.expect(top[2], ASN1.bitString, "signature")
        guard top[2].value.first == 0 else {
            throw TesseraError(.malformedData, "signature BIT STRING with unused bits")
        }
        self.der = crl.encoded
        tbsCertList = top[0].encoded
        signatureAlgorithm = top[1].encoded
        signature = Array(top[2].value.dropFirst())

        var fields = try top[0].children()
        if fields.first?.tag == ASN1.integer { fields.removeFirst() }
        guard fields.count >= 3 else { throw TesseraError(.malformedData, "TBSCertList too short") }
        try ASN1.expect(fields[0], ASN1.sequence, "signature")
        try ASN1.expect(fields[1], ASN1.sequence, "issuer")
        issuer = fields[1].encoded
        thisUpdate = try ASN1.time(fields[2])
        var rest = fields.dropFirst(3)
        if let t = rest.first, t.tag == ASN1.utcTime || t.tag == ASN1.generalizedTime {
            nextUpdate = try ASN1.time(t)
            rest = rest.dropFirst()
        } else {
            nextUpdate = nil
        }
        var serials = Set<[UInt8]>()
        if let list = rest.first, list.tag == ASN1.sequence {
            for entry in try list.children() {
                guard let serial = try entry.children().first else {
                    throw TesseraError(.malformedData, "empty CRL entry")
                }
                try ASN1.expect(serial, ASN1.integer, "userCertificate")
                serials.insert(serial.value)
            }
            rest = rest.dropFirst()
        }
        var aki: [UInt8]?
        if let wrapper = rest.first, wrapper.tag == 0xA0, let exts = try wrapper.children().first {
            for ext in try exts.children() {
                let parts = try ext.children()
                guard parts.count >= 2, let value = parts.last, value.tag == ASN1.octetString else {
                    throw TesseraError(.malformedData, "bad CRL extension")
                }
                if try ASN1.oidValue(parts[0]) == "2.5.29.35" {
                    aki = try TLV.parse(value.value).children().first(tag: 0x80)?.value
                }
            }
        }
        revokedSerialNumbers = serials
        authorityKeyIdentifier = aki
    }

    /// "C=UT, O=…, CN=…"
    public var issuerDescription: String { ParsedCertificate.describe(name: issuer) }

    /// Whether `certificate`'s key verifies this CRL's signature.
    public func isSigned(by certificate: ParsedCertificate) throws(TesseraError) -> Bool {
        let scheme = try AlgorithmOIDs.scheme(try TLV.parse(signatureAlgorithm))
        return try Signatures.verify(
            signature, over: tbsCertList, publicKey: certificate.subjectPublicKeyInfo, scheme: scheme)
    }

    /// Past its nextUpdate at `date`.
    public func isStale(at date: Date) -> Bool { nextUpdate.map { date > $0 } ?? false }

    /// Whether this CRL's issuer is `certificate`'s issuer (by name).
    public func covers(_ certificate: ParsedCertificate) -> Bool {
        ParsedCertificate.sameName(issuer, certificate.issuer)
    }
}
