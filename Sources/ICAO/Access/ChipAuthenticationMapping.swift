import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// What PACE with chip authentication mapping (PACE-CAM) left to check once the chip's static key is known:
/// the chip's mapping public key PK_Map,IC and the decrypted chip authentication data CA_IC.
public struct PACEChipAuthenticationData: Sendable, Equatable {
    /// Domain parameters of the run (the static key must use the same ones).
    public let domain: PACEDomain
    /// The chip's mapping public key PK_Map,IC (uncompressed point).
    public let chipMappingPublicKey: [UInt8]
    /// CA_IC, nil when A_IC was missing or did not decrypt (see `problem`).
    public let chipAuthenticationData: [UInt8]?
    /// Why `chipAuthenticationData` is nil.
    public let problem: String?

    public init(
        domain: PACEDomain, chipMappingPublicKey: [UInt8], chipAuthenticationData: [UInt8]?, problem: String? = nil
    ) {
        self.domain = domain
        self.chipMappingPublicKey = chipMappingPublicKey
        self.chipAuthenticationData = chipAuthenticationData
        self.problem = problem
    }
}

/// Outcome of chip authentication: the PACE-CAM check against DG14, or Chip Authentication v1.
public struct ChipAuthenticationResult: Sendable, Equatable {
    public enum Status: String, Sendable { case valid, invalid, notChecked }
    public var status: Status
    public var reason: String?
    /// keyId of the ChipAuthenticationPublicKeyInfo that matched, when it has one.
    public var keyId: Int?
    /// Which protocol proved (or failed to prove) the chip authentication key.
    public enum Mechanism: String, Sendable { case paceCAM = "PACE-CAM", chipAuthentication = "CA" }
    public var mechanism: Mechanism

    public init(status: Status, reason: String? = nil, keyId: Int? = nil, mechanism: Mechanism = .paceCAM) {
        self.status = status; self.reason = reason; self.keyId = keyId; self.mechanism = mechanism
    }
}

/// PACE chip authentication mapping (Doc 9303 Part 11 §4.4.3.5, BSI TR-03110 Part 2 §3.4.2): the chip proves
/// possession of its static chip authentication key SK_IC by sending CA_IC = SK_Map,IC · SK_IC⁻¹ mod n,
/// encrypted as A_IC; the reader checks PK_Map,IC = CA_IC · PK_IC with PK_IC from DG14.
public enum ChipAuthenticationMapping {
    /// id-PK-ECDH (TR-03110 Part 3 §A.1.1.2).
    public static let idPKECDH = SecurityInfos.idPK + ".2"
    /// standardizedDomainParameters (TR-03110 Part 3 §A.2.1.1): AlgorithmIdentifier parameters are the id.
    public static let standardizedDomainParameters = "0.4.0.127.0.7.1.2"
    static let idECPublicKey = "1.2.840.10045.2.1"

    /// The CBC IV for A_IC: E(KS_Enc, −1), −1 being the all-ones block (TR-03110 Part 3 §A.3.5.1).
    static func iv(key: [UInt8]) throws(TesseraError) -> [UInt8] {
        try AESCipher.encryptECB(key: key, data: [UInt8](repeating: 0xFF, count: AESCipher.blockSize))
    }

    /// A_IC = AES-CBC(KS_Enc, IV = E(KS_Enc, −1), CA_IC padded with ISO/IEC 9797-1 method 2).
    public static func encrypt(_ caIC: [UInt8], encryptionKey: [UInt8]) throws(TesseraError) -> [UInt8] {
        try AESCipher.encryptCBC(
            key: encryptionKey, iv: iv(key: encryptionKey),
            data: ISO9797Padding.pad(caIC, blockSize: AESCipher.blockSize))
    }

    /// CA_IC from A_IC; MALFORMED_DATA when the length or the padding is wrong.
    public static func decrypt(_ aIC: [UInt8], encryptionKey: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard !aIC.isEmpty, aIC.count % AESCipher.blockSize == 0 else {
            throw TesseraError(.malformedData, "encrypted chip authentication data has a bad length (\(aIC.count))")
        }
        let padded = try AESCipher.decryptCBC(key: encryptionKey, iv: iv(key: encryptionKey), data: aIC)
        guard let caIC = ISO9797Padding.unpad(padded), !caIC.isEmpty else {
            throw TesseraError(.malformedData, "encrypted chip authentication data does not decrypt (bad padding)")
        }
        return caIC
    }

    /// Chip side: CA_IC = SK_Map,IC · SK_IC⁻¹ mod n.
    public static func chipAuthenticationData(
        curve: ECCurve, mappingPrivateKey: [UInt8],
        staticPrivateKey: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        try curve.scalarDivide(mappingPrivateKey, by: staticPrivateKey)
    }

    /// The EC public key of a ChipAuthenticationPublicKeyInfo with its curve when the SPKI names one
    /// (standardized domain parameter id, or a named curve); nil curve for explicit parameters.
    public static func publicKey(of info: ChipAuthenticationPublicKeyInfo) throws(TesseraError) -> (
        point: [UInt8], curve: ECCurve?
    ) {
        let spki = try TLV.parse(info.subjectPublicKeyInfo)
        let parts = try spki.children()
        guard parts.count == 2, parts[0].tag == ASN1.sequence, parts[1].tag == ASN1.bitString,
            parts[1].value.first == 0, parts[1].value.count > 1
        else {
            throw TesseraError(.malformedData, "chip authentication public key is not a SubjectPublicKeyInfo")
        }
        let point = Array(parts[1].value.dropFirst())
        let algorithm = try parts[0].children()
        guard let oid = algorithm.first else { throw TesseraError(.malformedData, "empty AlgorithmIdentifier") }
        switch try ASN1.oidValue(oid) {
        case standardizedDomainParameters:
            guard algorithm.count == 2, case .ec(let curve)? = PACEDomain.standardized(try ASN1.smallInt(algorithm[1]))
            else {
                throw TesseraError(
                    .malformedData, "chip authentication key names unknown standardized domain parameters")
            }
            return (point, curve)
        case idECPublicKey:
            let name = try? Signatures.describe(publicKey: info.subjectPublicKeyInfo).curveName
            return (point, name.flatMap(ECCurve.named))
        case let other:
            throw TesseraError(.malformedData, "chip authentication key algorithm \(other) is not EC")
        }
    }

    /// Reader side: checks PK_Map,IC = CA_IC · PK_IC against every id-PK-ECDH key in `securityInfos` (DG14).
    /// Valid when one matches; invalid when A_IC did not decrypt, no key fits or none matches; notChecked when
    /// DG14 has no EC chip authentication key.
    public static func verify(_ data: PACEChipAuthenticationData, securityInfos: SecurityInfos)
        -> ChipAuthenticationResult
    {
        guard case .ec(let curve) = data.domain else {
            return ChipAuthenticationResult(status: .invalid, reason: "PACE-CAM needs elliptic-curve domain parameters")
        }
        guard let caIC = data.chipAuthenticationData else {
            return ChipAuthenticationResult(
                status: .invalid, reason: data.problem ?? "the chip sent no chip authentication data")
        }
        let keys = securityInfos.chipAuthenticationPublicKeyInfos.filter { $0.protocolOID == idPKECDH }
        guard !keys.isEmpty else {
            return ChipAuthenticationResult(
                status: .notChecked, reason: "DG14 has no ECDH chip authentication public key")
        }
        var problems: [String] = []
        for info in keys {
            do {
                let key = try publicKey(of: info)
                if let named = key.curve, named != curve {
                    problems.append(
                        "key \(info.keyId.map(String.init) ?? "-") is on \(named.name), PACE ran on \(curve.name)")
                    continue
                }
                if try curve.multiply(point: key.point, scalar: caIC) == data.chipMappingPublicKey {
                    return ChipAuthenticationResult(status: .valid, keyId: info.keyId)
                }
                problems.append("CA_IC · PK_IC ≠ PK_Map,IC for key \(info.keyId.map(String.init) ?? "-")")
            } catch {
                problems.append("key \(info.keyId.map(String.init) ?? "-"): \(error.message)")
            }
        }
        return ChipAuthenticationResult(status: .invalid, reason: problems.joined(separator: "; "))
    }
}
