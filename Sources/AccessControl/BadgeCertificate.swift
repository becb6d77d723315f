import APDU
import FoundationEssentials
import ICAO
import SwiftASN1
import TesseraCore
import X509

/// Object identifiers of the PIV PKI (FIPS 201-3, SP 800-73-4, the Common Policy).
public enum PIVOID {
    /// id-PIV-CHUIDSecurityObject: eContentType of the CHUID's signature.
    public static let chuidSecurityObject = "2.16.840.1.101.3.6.1"
    /// pivFASC-N: the otherName of a FASC-N in a subjectAltName, and a CMS signed attribute.
    public static let fascn = "2.16.840.1.101.3.6.6"
    /// id-PIV-content-signing: EKU of the CHUID signer.
    public static let contentSigning = "2.16.840.1.101.3.6.7"
    /// id-PIV-cardAuth: EKU of the Card Authentication certificate.
    public static let cardAuth = "2.16.840.1.101.3.6.8"
    /// pivSigner-DN: CMS signed attribute naming the CHUID signer.
    public static let signerDN = "2.16.840.1.101.3.6.5"
}

/// What identifies the card in a PIV certificate: the FASC-N (otherName 2.16.840.1.101.3.6.6) and the card UUID
/// (URI `urn:uuid:…`) of its subjectAltName.
public struct BadgeIdentifiers: Sendable, Equatable, Codable {
    /// The 25-byte FASC-N, when present.
    public var fascn: [UInt8]?
    /// The 16-byte card UUID, when present.
    public var uuid: [UInt8]?

    public init(fascn: [UInt8]? = nil, uuid: [UInt8]? = nil) { self.fascn = fascn; self.uuid = uuid }

    /// The bytes Tessera keys the badge by, as `PIVCardIdentity.identifyingBytes` does: 34 ‖ UUID, else 30 ‖ FASC-N.
    public var idBytes: [UInt8]? {
        if let uuid { return [0x34] + uuid }
        if let fascn { return [0x30] + fascn }
        return nil
    }

    /// The badge id: base64url of `idBytes`, the credential id the lifecycle methods take.
    public var badgeId: String? { idBytes.map(Base64URL.encode) }

    /// Reads the identifiers from a certificate's subjectAltName.
    public init(certificate: Certificate) {
        guard let san = try? certificate.extensions.subjectAlternativeNames else { return }
        for name in san {
            switch name {
            case .otherName(let other) where other.typeID.description == PIVOID.fascn:
                // value: [0] EXPLICIT OCTET STRING (the ANY of OtherName carries the OCTET STRING).
                var serializer = DER.Serializer()
                if let value = other.value, (try? serializer.serialize(value)) != nil,
                    let tlv = try? TLV.parse(serializer.serializedBytes), tlv.tag == 0x04
                {
                    fascn = tlv.value
                }
            case .uniformResourceIdentifier(let uri) where uri.lowercased().hasPrefix("urn:uuid:"):
                uuid = Self.uuidBytes(String(uri.dropFirst("urn:uuid:".count)))
            default: continue
            }
        }
    }

    /// The 16 bytes of a textual UUID, nil when it is not one.
    public static func uuidBytes(_ text: String) -> [UInt8]? {
        let hex = text.filter { $0 != "-" }
        guard hex.count == 32, let bytes = Hex.decode(hex) else { return nil }
        return bytes
    }

    /// The textual (lower-case, dashed) form of a 16-byte UUID.
    public static func uuidText(_ bytes: [UInt8]) -> String {
        let h = Hex.encode(bytes)
        let parts = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { r in
            String(h[h.index(h.startIndex, offsetBy: r.lowerBound)..<h.index(h.startIndex, offsetBy: r.upperBound)])
        }
        return parts.joined(separator: "-")
    }

    /// The subjectAltName entries that carry these identifiers (for issuance).
    public func generalNames() throws -> [GeneralName] {
        var names: [GeneralName] = []
        if let fascn {
            let value = try ASN1Any(derEncoded: TLV.encode(tag: 0x04, value: fascn))
            let oid = try ASN1ObjectIdentifier(dotRepresentation: PIVOID.fascn)
            names.append(.otherName(GeneralName.OtherName(typeID: oid, value: value)))
        }
        if let uuid { names.append(.uniformResourceIdentifier("urn:uuid:" + Self.uuidText(uuid))) }
        return names
    }
}
