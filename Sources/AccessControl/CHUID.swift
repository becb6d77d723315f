import APDU
import CryptoPrimitives
import FoundationEssentials
import ICAO
import SwiftASN1
import TesseraCore
import X509Support

/// The Card Holder Unique Identifier (SP 800-73-4 Part 1 §3.1.2): FASC-N (30), GUID (34), expiration date (35,
/// YYYYMMDD), the issuer's asymmetric signature (3E, a detached CMS SignedData) and the error detection code (FE).
public struct CHUID: Sendable, Equatable {
    public var fascn: [UInt8]?
    public var guid: [UInt8]?
    /// Expiration date, YYYYMMDD.
    public var expiration: String?
    /// The CMS SignedData of tag 3E; nil or empty when unsigned.
    public var signature: [UInt8]?
    /// What the signature covers: the CHUID's TLVs without 3E and FE, in card order.
    public var signedContent: [UInt8]

    /// Parses the content of the CHUID object (inside tag 53). Throws MALFORMED_DATA.
    public init(content: [UInt8]) throws(TesseraError) {
        let items = try TLV.parseAll(content, options: .card)
        fascn = items.first(tag: 0x30).map(\.value).flatMap { $0.isEmpty ? nil : $0 }
        guid = items.first(tag: 0x34).map(\.value).flatMap { $0.allSatisfy { $0 == 0 } ? nil : $0 }
        expiration = items.first(tag: 0x35).map { String(decoding: $0.value, as: UTF8.self) }
        signature = items.first(tag: 0x3E).map(\.value).flatMap { $0.isEmpty ? nil : $0 }
        signedContent = items.filter { $0.tag != 0x3E && $0.tag != 0xFE }.flatMap(\.encoded)
    }

    /// Whether the expiration date is before the UTC day of `now` (a CHUID without one never expires).
    public func isExpired(at now: Date) -> Bool {
        guard let expiration, expiration.count == 8, let day = Int(expiration) else { return false }
        let t = CivilTime(now)
        return day < t.year * 10000 + t.month * 100 + t.day
    }

    /// The CHUID content for the card: FASC-N, GUID, expiration, the signature (empty when nil), LRC (empty).
    public static func content(
        fascn: [UInt8], guid: [UInt8], expiration: String, signature: [UInt8]? = nil
    ) -> [UInt8] {
        unsignedContent(fascn: fascn, guid: guid, expiration: expiration)
            + TLV.encode(tag: 0x3E, value: signature ?? []) + TLV.encode(tag: 0xFE, value: [])
    }

    /// The signed part of the CHUID content.
    public static func unsignedContent(fascn: [UInt8], guid: [UInt8], expiration: String) -> [UInt8] {
        TLV.encode(tag: 0x30, value: fascn) + TLV.encode(tag: 0x34, value: guid)
            + TLV.encode(tag: 0x35, value: Array(expiration.utf8))
    }

    /// The issuer's signature over `signedContent` as a detached CMS SignedData (eContentType
    /// id-PIV-CHUIDSecurityObject; signed attributes content-type, message-digest and pivFASC-N), the signer's
    /// certificate included. `sign` returns the DER ECDSA-with-SHA-256 signature of the bytes it is given.
    public static func signature(
        over signedContent: [UInt8], fascn: [UInt8], signerCertificate: ParsedCertificate,
        sign: CMSSignedData.Signer
    ) async throws(TesseraError) -> [UInt8] {
        try await CMSSignedData.build(
            content: signedContent, contentType: PIVOID.chuidSecurityObject, detached: true,
            extraAttributes: [DERBuild.attribute(PIVOID.fascn, TLV.encode(tag: 0x04, value: fascn))],
            signerCertificate: signerCertificate, sign: sign)
    }
}

/// The few DER constructions the CHUID signature needs.
enum DERBuild {
    static func sequence(_ parts: [[UInt8]]) -> [UInt8] { TLV.encode(tag: 0x30, value: parts.flatMap { $0 }) }
    static func setOf(_ parts: [[UInt8]]) -> [UInt8] {
        TLV.encode(tag: 0x31, value: parts.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 })
    }
    static func integer(_ v: UInt8) -> [UInt8] { [0x02, 0x01, v] }
    static func oid(_ dotted: String) -> [UInt8] {
        var serializer = DER.Serializer()
        // The OIDs passed here are constants of this module.
        try? serializer.serialize(try ASN1ObjectIdentifier(dotRepresentation: dotted))
        return serializer.serializedBytes
    }
    static func attribute(_ type: String, _ value: [UInt8]) -> [UInt8] { sequence([oid(type), setOf([value])]) }
}
