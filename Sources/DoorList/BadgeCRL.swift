import APDU
import FoundationEssentials
import ICAO
import TesseraCore
import X509Support

/// The badge CA's CRL (RFC 5280 §5) as the office publishes it: one entry per certificate of a badge that is not
/// active, with its reason code, and a CRL number (the door list's number) that a door follows as it follows the
/// list's.
public enum BadgeCRL {
    /// CRLReason (RFC 5280 §5.3.1) of a badge's lifecycle state.
    public enum Reason: UInt8, Sendable {
        /// A replaced badge.
        case superseded = 4
        /// A deactivated badge.
        case cessationOfOperation = 5
        /// A suspended badge: the hold is lifted when it is resumed.
        case certificateHold = 6
    }

    /// One revoked certificate: its serial number (INTEGER content octets), since when, and why.
    public struct Entry: Sendable, Equatable {
        public var serialNumber: [UInt8]
        public var revokedAt: Date
        public var reason: Reason

        public init(serialNumber: [UInt8], revokedAt: Date, reason: Reason) {
            self.serialNumber = serialNumber; self.revokedAt = revokedAt; self.reason = reason
        }
    }

    static let ecdsaWithSHA256 = ASN1.seq([ASN1.oid("1.2.840.10045.4.3.2")])
    static let crlNumberOID = "2.5.29.20"

    /// The DER TBSCertList (v2, ecdsa-with-SHA256) of `issuer` (the CA certificate) listing `entries`, with the
    /// CRL number `number` and, when the CA certificate has a subject key identifier, the authority key identifier.
    public static func tbsCertList(
        issuer: ParsedCertificate, entries: [Entry], thisUpdate: Date, nextUpdate: Date, number: UInt64
    ) -> [UInt8] {
        var fields = [
            ASN1.int(1), ecdsaWithSHA256, issuer.subject, ASN1.x509Time(thisUpdate), ASN1.x509Time(nextUpdate),
        ]
        if !entries.isEmpty {
            fields.append(
                ASN1.seq(
                    entries.map { entry in
                        let reason = ASN1.seq([
                            ASN1.oid("2.5.29.21"), ASN1.octets(ASN1.node(0x0A, [entry.reason.rawValue])),
                        ])
                        return ASN1.seq([
                            ASN1.node(ASN1.integer, entry.serialNumber), ASN1.x509Time(entry.revokedAt),
                            ASN1.seq([reason]),
                        ])
                    }))
        }
        var extensions = [ASN1.seq([ASN1.oid(crlNumberOID), ASN1.octets(unsignedInteger(number))])]
        if let ski = issuer.subjectKeyIdentifier {
            extensions.append(ASN1.seq([ASN1.oid("2.5.29.35"), ASN1.octets(ASN1.seq([ASN1.node(0x80, ski)]))]))
        }
        fields.append(ASN1.explicit(0, ASN1.seq(extensions)))
        return ASN1.seq(fields)
    }

    /// The CRL around `tbs` and its DER ECDSA signature.
    public static func assemble(tbs: [UInt8], signature: [UInt8]) -> [UInt8] {
        ASN1.seq([tbs, ecdsaWithSHA256, ASN1.node(ASN1.bitString, [0] + signature)])
    }

    static func unsignedInteger(_ value: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        var x = value
        repeat { bytes.insert(UInt8(x & 0xFF), at: 0); x >>= 8 } while x > 0
        return ASN1.unsignedInt(bytes)
    }

    /// The CRL number extension of a DER CRL; nil when it has none.
    public static func number(of der: [UInt8]) -> UInt64? {
        guard let crl = try? TLV.parse(der), let tbs = try? crl.children().first,
            let extensions = try? tbs.children().last, extensions.tag == 0xA0,
            let list = try? extensions.children().first?.children()
        else { return nil }
        for ext in list {
            guard let parts = try? ext.children(), parts.count >= 2,
                (try? ASN1.oidValue(parts[0])) == crlNumberOID,
                let integer = try? TLV.parse(parts[parts.count - 1].value), integer.tag == ASN1.integer,
                integer.value.count <= 9
            else { continue }
            return integer.value.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
        return nil
    }

    /// The follower's rule for a CRL: a door applies the CRL in `der` only when it parses, is signed by one of
    /// `anchors` (the badge CAs), has a CRL number above `current` and is not past its nextUpdate at `now`.
    public static func accept(
        _ der: [UInt8], anchors: [ParsedCertificate], current: UInt64?, now: Date
    ) -> Result<(CertificateRevocationList, UInt64), DoorListRefusal> {
        guard let crl = try? CertificateRevocationList(der: der), let number = number(of: der) else {
            return .failure(.malformed)
        }
        guard anchors.contains(where: { $0.subject == crl.issuer && (try? crl.isSigned(by: $0)) == true }) else {
            return .failure(.signature)
        }
        if let current, number <= current { return .failure(.notNewer) }
        if crl.isStale(at: now) { return .failure(.expired) }
        return .success((crl, number))
    }
}
