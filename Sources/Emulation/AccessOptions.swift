import FoundationEssentials
import ICAO
import TesseraCore

/// One PACE configuration an emulated chip offers: generic mapping (GM), integrated mapping (IM) or chip
/// authentication mapping (CAM)
/// on a standardized domain parameter set (BSI TR-03110 Part 3 Table 4) with a session cipher.
///
/// Text form (case-insensitive, used by `tessera --pace` and profile.json):
/// `<agreement>-<mapping>-<parameters>-<cipher>`
/// - agreement: `ecdh` or `dh`
/// - mapping: `gm`, `im` (integrated mapping; on curves only where p ≡ 3 mod 4, i.e. not p224), or `cam`
///   (ECDH with AES only; the chip gets a static chip authentication key in DG14)
/// - parameters for ecdh: `p192` (8), `brainpoolp192r1` (9), `p224` (10), `brainpoolp224r1` (11), `p256` (12),
///   `brainpoolp256r1` (13), `brainpoolp320r1` (14), `p384` (15), `brainpoolp384r1` (16), `brainpoolp512r1` (17),
///   `p521` (18); `secpNNNr1` spellings are accepted too
/// - parameters for dh: `1024` (0, RFC 5114 1024/160), `2048-224` (1), `2048-256` or `2048` (2)
/// - any parameter set may also be given by id as `idN` (e.g. `ecdh-gm-id13-aes128`)
/// - cipher: `3des`, `aes128`, `aes192`, `aes256`
///
/// Examples: `ecdh-gm-p256-aes128`, `ecdh-im-brainpoolp256r1-aes128`, `ecdh-cam-p256-aes128`, `ecdh-gm-brainpoolp512r1-aes256`, `dh-gm-1024-3des`. The single word
/// `default` (or `pace`) means `PACEOption.default`.
public struct PACEOption: Sendable, Hashable, Codable, CustomStringConvertible, LosslessStringConvertible {
    /// Standardized domain parameter id: 0–2 DH, 8–18 EC.
    public let parameterId: Int
    public let cipher: SessionCipher
    /// `.generic`, `.integrated` or `.chipAuthentication`.
    public let mapping: PACEMapping

    /// What a chip offers when PACE is requested without details: ECDH generic mapping on NIST P-256 with
    /// AES-128, the most widely deployed PACE configuration.
    public static let `default` = PACEOption(validParameterId: 12, cipher: .aes128)

    private init(validParameterId: Int, cipher: SessionCipher, mapping: PACEMapping = .generic) {
        parameterId = validParameterId
        self.cipher = cipher
        self.mapping = mapping
    }

    /// Throws INVALID_INPUT for an id that is not a standardized parameter set, and for CAM with DH or 3DES.
    public init(parameterId: Int, cipher: SessionCipher, mapping: PACEMapping = .generic) throws(TesseraError) {
        guard let domain = PACEDomain.standardized(parameterId) else {
            throw .invalidInput("PACE domain parameter id \(parameterId) is not standardized (0–2 DH, 8–18 EC)")
        }
        try Self.check(mapping: mapping, domain: domain, cipher: cipher, text: "id\(parameterId)")
        self.init(validParameterId: parameterId, cipher: cipher, mapping: mapping)
    }

    private static func check(mapping: PACEMapping, domain: PACEDomain, cipher: SessionCipher, text: String)
        throws(TesseraError)
    {
        switch mapping {
        case .generic: return
        case .chipAuthentication:
            guard domain.keyAgreement == .ecdh, cipher != .tripleDES else {
                throw .invalidInput("PACE option '\(text)': chip authentication mapping needs ecdh and an AES cipher")
            }
        case .integrated:
            guard domain.supportsIntegratedMapping else {
                throw .invalidInput("PACE option '\(text)': integrated mapping needs a curve with p ≡ 3 (mod 4) or dh")
            }
        }
    }

    /// Parses the text form (see the type documentation). Throws INVALID_INPUT naming the bad part.
    public init(parsing text: String) throws(TesseraError) {
        let lower = text.lowercased().trimmingWhitespace()
        if lower == "default" || lower == "pace" {
            self = .default
            return
        }
        let parts = lower.split(separator: "-").map(String.init)
        guard parts.count >= 4 else {
            throw .invalidInput("PACE option '\(text)' must look like ecdh-gm-p256-aes128 or ecdh-cam-p256-aes128")
        }
        let agreement: PACEKeyAgreement
        switch parts[0] {
        case "ecdh": agreement = .ecdh
        case "dh": agreement = .dh
        default: throw .invalidInput("PACE option '\(text)': key agreement must be ecdh or dh")
        }
        let mapping: PACEMapping
        switch parts[1] {
        case "gm": mapping = .generic
        case "cam": mapping = .chipAuthentication
        case "im": mapping = .integrated
        default: throw .invalidInput("PACE option '\(text)': mapping must be gm, im or cam")
        }
        let cipher: SessionCipher
        switch parts[parts.count - 1] {
        case "3des", "tdes": cipher = .tripleDES
        case "aes128", "aes-128": cipher = .aes128
        case "aes192": cipher = .aes192
        case "aes256": cipher = .aes256
        default: throw .invalidInput("PACE option '\(text)': cipher must be 3des, aes128, aes192 or aes256")
        }
        let parameters = parts[2..<(parts.count - 1)].joined(separator: "-")
        guard let id = Self.parameterIds[parameters] ?? Self.numericId(parameters) else {
            throw .invalidInput("PACE option '\(text)': unknown domain parameters '\(parameters)'")
        }
        guard let domain = PACEDomain.standardized(id), domain.keyAgreement == agreement else {
            throw .invalidInput("PACE option '\(text)': parameters '\(parameters)' do not fit \(parts[0])")
        }
        try Self.check(mapping: mapping, domain: domain, cipher: cipher, text: text)
        self.init(validParameterId: id, cipher: cipher, mapping: mapping)
    }

    /// `LosslessStringConvertible`: nil when the text does not parse.
    public init?(_ description: String) {
        guard let parsed = try? PACEOption(parsing: description) else { return nil }
        self = parsed
    }

    private static let parameterIds: [String: Int] = [
        "1024": 0, "1024-160": 0, "2048-224": 1, "2048-256": 2, "2048": 2,
        "p192": 8, "secp192r1": 8, "brainpoolp192r1": 9, "p224": 10, "secp224r1": 10, "brainpoolp224r1": 11,
        "p256": 12, "secp256r1": 12, "prime256v1": 12, "brainpoolp256r1": 13, "brainpoolp320r1": 14,
        "p384": 15, "secp384r1": 15, "brainpoolp384r1": 16, "brainpoolp512r1": 17, "p521": 18, "secp521r1": 18,
    ]

    private static func numericId(_ s: String) -> Int? {
        guard s.hasPrefix("id") else { return nil }
        return Int(s.dropFirst(2))
    }

    /// The domain parameters named by `parameterId`.
    public var domain: PACEDomain { PACEDomain.standardized(parameterId)! }

    /// The PACE protocol (this option's mapping, key agreement and cipher).
    public var algorithm: PACEAlgorithm {
        PACEAlgorithm(mapping: mapping, keyAgreement: domain.keyAgreement, cipher: cipher)
    }

    /// The PACEInfo a chip lists in EF.CardAccess for this option (version 2).
    public var paceInfo: PACEInfo { PACEInfo(protocolOID: algorithm.oid, version: 2, parameterId: parameterId) }

    /// The canonical text form, e.g. `ecdh-gm-p256-aes128`, `ecdh-cam-p256-aes128`.
    public var description: String {
        let names: [Int: String] = [
            0: "1024", 1: "2048-224", 2: "2048-256", 8: "p192", 9: "brainpoolp192r1", 10: "p224",
            11: "brainpoolp224r1", 12: "p256", 13: "brainpoolp256r1", 14: "brainpoolp320r1", 15: "p384",
            16: "brainpoolp384r1", 17: "brainpoolp512r1", 18: "p521",
        ]
        let c: String
        switch cipher {
        case .tripleDES: c = "3des"
        case .aes128: c = "aes128"
        case .aes192: c = "aes192"
        case .aes256: c = "aes256"
        }
        let agreement = domain.keyAgreement == .ecdh ? "ecdh" : "dh"
        let m = [PACEMapping.chipAuthentication: "cam", .integrated: "im"][mapping] ?? "gm"
        return "\(agreement)-\(m)-\(names[parameterId] ?? "id\(parameterId)")-\(c)"
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try PACEOption(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// Which access-control protocols an emulated chip offers.
public struct AccessOptions: Codable, Sendable, Hashable {
    /// Basic Access Control with the MRZ.
    public var bac: Bool = true
    /// PACE configurations listed in EF.CardAccess, in order (empty: no PACE, no EF.CardAccess).
    public var pace: [PACEOption] = []
    /// Chip Authentication v1 protocols announced in DG14 (the chip gets a static key per parameter set).
    public var chipAuthentication: [ChipAuthenticationOption] = []

    public init(bac: Bool = true, pace: [PACEOption] = [], chipAuthentication: [ChipAuthenticationOption] = []) {
        self.bac = bac
        self.pace = pace
        self.chipAuthentication = chipAuthentication
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        bac = try c.decodeIfPresent(Bool.self, forKey: .bac) ?? true
        pace = try c.decodeIfPresent([PACEOption].self, forKey: .pace) ?? []
        chipAuthentication = try c.decodeIfPresent([ChipAuthenticationOption].self, forKey: .chipAuthentication) ?? []
    }
}
