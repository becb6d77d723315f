import APDU
import SwiftASN1
import TesseraCore

/// One SecurityInfo (BSI TR-03110 Part 3 §A.1.1): `SEQUENCE { protocol OID, requiredData ANY, optionalData ANY OPTIONAL }`.
public struct SecurityInfo: Sendable, Hashable {
    /// Dotted protocol OID.
    public let protocolOID: String
    /// DER encoding of requiredData.
    public let requiredData: [UInt8]
    /// DER encoding of optionalData, when present.
    public let optionalData: [UInt8]?
    /// DER encoding of the whole SecurityInfo.
    public let encoded: [UInt8]
}

/// PACEInfo: protocol OID, version (2 for PACE v2) and the standardized domain parameter id.
public struct PACEInfo: Sendable, Hashable {
    public let protocolOID: String
    public let version: Int
    public let parameterId: Int?

    public init(protocolOID: String, version: Int = 2, parameterId: Int?) {
        self.protocolOID = protocolOID; self.version = version; self.parameterId = parameterId
    }

    /// The algorithm named by the OID, nil when unknown.
    public var algorithm: PACEAlgorithm? { PACEAlgorithm(oid: protocolOID) }
}

/// ChipAuthenticationInfo (id-CA-*): OID, version, optional key id.
public struct ChipAuthenticationInfo: Sendable, Hashable {
    public let protocolOID: String
    public let version: Int
    public let keyId: Int?
}

/// ChipAuthenticationPublicKeyInfo (id-PK-DH / id-PK-ECDH): the chip's static key as SubjectPublicKeyInfo DER.
public struct ChipAuthenticationPublicKeyInfo: Sendable, Hashable {
    public let protocolOID: String
    public let subjectPublicKeyInfo: [UInt8]
    public let keyId: Int?
}

/// ActiveAuthenticationInfo (Doc 9303 Part 11 §6.1, id-AA 2.23.136.1.1.5): version and signature algorithm OID.
public struct ActiveAuthenticationInfo: Sendable, Hashable {
    public let protocolOID: String
    public let version: Int
    public let signatureAlgorithm: String
}

/// A parsed `SecurityInfos ::= SET OF SecurityInfo` as found in EF.CardAccess, EF.CardSecurity and DG14.
/// Unknown infos are kept in `all` and otherwise ignored.
public struct SecurityInfos: Sendable, Hashable {
    public static let idPACE = "0.4.0.127.0.7.2.2.4"
    public static let idCA = "0.4.0.127.0.7.2.2.3"
    public static let idPK = "0.4.0.127.0.7.2.2.1"
    public static let idTA = "0.4.0.127.0.7.2.2.2"
    public static let idAA = "2.23.136.1.1.5"

    public let all: [SecurityInfo]
    public let paceInfos: [PACEInfo]
    public let chipAuthenticationInfos: [ChipAuthenticationInfo]
    public let chipAuthenticationPublicKeyInfos: [ChipAuthenticationPublicKeyInfo]
    public let activeAuthenticationInfos: [ActiveAuthenticationInfo]

    /// Parses the DER (or BER) SET; trailing bytes after the SET (padding in some EF.CardAccess files) are
    /// ignored. Throws MALFORMED_DATA when the structure is not a SET of SEQUENCEs starting with an OID.
    public init(encoded bytes: [UInt8]) throws(TesseraError) {
        var input = bytes
        if let total = (try? TLV.totalLength(ofPrefix: bytes)) ?? nil, total <= bytes.count {
            input = Array(bytes.prefix(total))
        }
        let root: ASN1Node
        do { root = try DER.parse(input) } catch {
            do { root = try BER.parse(input) } catch {
                throw TesseraError(.malformedData, "SecurityInfos is not valid ASN.1")
            }
        }
        guard root.identifier == .set, case .constructed(let children) = root.content else {
            throw TesseraError(.malformedData, "SecurityInfos is not a SET")
        }
        var all: [SecurityInfo] = []
        var pace: [PACEInfo] = [], ca: [ChipAuthenticationInfo] = [], pk: [ChipAuthenticationPublicKeyInfo] = []
        var aa: [ActiveAuthenticationInfo] = []
        for child in children {
            guard child.identifier == .sequence, case .constructed(let fields) = child.content else {
                throw TesseraError(.malformedData, "SecurityInfo is not a SEQUENCE")
            }
            let items = Array(fields)
            guard items.count >= 2, let oid = try? ASN1ObjectIdentifier(derEncoded: items[0]) else {
                throw TesseraError(.malformedData, "SecurityInfo without protocol OID")
            }
            let o = oid.description
            all.append(
                SecurityInfo(
                    protocolOID: o, requiredData: Array(items[1].encodedBytes),
                    optionalData: items.count > 2 ? Array(items[2].encodedBytes) : nil,
                    encoded: Array(child.encodedBytes)))
            let optionalInt = items.count > 2 ? try? Int(derEncoded: items[2]) : nil
            if o.hasPrefix(Self.idPACE + "."), let version = try? Int(derEncoded: items[1]) {
                // Both PACEInfo and PACEDomainParameterInfo share the prefix; the latter has a SEQUENCE second.
                pace.append(PACEInfo(protocolOID: o, version: version, parameterId: optionalInt))
            } else if o.hasPrefix(Self.idCA + "."), let version = try? Int(derEncoded: items[1]) {
                ca.append(ChipAuthenticationInfo(protocolOID: o, version: version, keyId: optionalInt))
            } else if o.hasPrefix(Self.idPK + "."), items[1].identifier == .sequence {
                pk.append(
                    ChipAuthenticationPublicKeyInfo(
                        protocolOID: o, subjectPublicKeyInfo: Array(items[1].encodedBytes),
                        keyId: optionalInt))
            } else if o == Self.idAA, let version = try? Int(derEncoded: items[1]), items.count > 2,
                let alg = try? ASN1ObjectIdentifier(derEncoded: items[2])
            {
                aa.append(
                    ActiveAuthenticationInfo(protocolOID: o, version: version, signatureAlgorithm: alg.description))
            }
        }
        self.all = all; paceInfos = pace; chipAuthenticationInfos = ca; chipAuthenticationPublicKeyInfos = pk
        activeAuthenticationInfos = aa
    }
}
