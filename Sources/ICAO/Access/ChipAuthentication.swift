import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// A Chip Authentication v1 protocol OID (TR-03110 Part 3 §A.1.1.2, Doc 9303 Part 11 §9.2.6):
/// id-CA-{DH,ECDH}-{3DES-CBC-CBC, AES-CBC-CMAC-128/192/256}.
public struct ChipAuthenticationAlgorithm: Sendable, Hashable, CustomStringConvertible {
    public let oid: String
    public let keyAgreement: PACEKeyAgreement
    public let cipher: SessionCipher

    /// Decodes id-CA-DH-* (0.4.0.127.0.7.2.2.3.1.n) and id-CA-ECDH-* (…3.2.n); nil for anything else.
    public init?(oid: String) {
        let prefix = SecurityInfos.idCA + "."
        guard oid.hasPrefix(prefix) else { return nil }
        let parts = oid.dropFirst(prefix.count).split(separator: ".").compactMap { Int($0) }
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case 1: keyAgreement = .dh
        case 2: keyAgreement = .ecdh
        default: return nil
        }
        guard let cipher = SessionCipher(protocolArc: parts[1]) else { return nil }
        self.cipher = cipher
        self.oid = oid
    }

    /// The OID for a key agreement and cipher (e.g. `.ecdh`, `.aes128` → 0.4.0.127.0.7.2.2.3.2.2).
    public init(keyAgreement: PACEKeyAgreement, cipher: SessionCipher) {
        let c = cipher.protocolArc
        self.oid = "\(SecurityInfos.idCA).\(keyAgreement == .dh ? 1 : 2).\(c)"
        self.keyAgreement = keyAgreement
        self.cipher = cipher
    }

    /// The OID's DER content bytes (tag 80 of MSE:Set AT).
    public var oidBytes: [UInt8] { ASN1.encodeOIDContent(oid) }

    public var description: String { "CA-\(keyAgreement.rawValue)-\(cipher.rawValue)" }
}

/// What a Chip Authentication v1 run used and sent: enough for evidence and for the verdict.
public struct ChipAuthenticationRun: Sendable, Equatable {
    public let algorithm: ChipAuthenticationAlgorithm
    public let keyId: Int?
    /// The chip's static key as in DG14 (SubjectPublicKeyInfo DER).
    public let chipPublicKeyInfo: [UInt8]
    /// The terminal's ephemeral public key sent to the chip.
    public let terminalEphemeralPublicKey: [UInt8]

    public init(
        algorithm: ChipAuthenticationAlgorithm, keyId: Int?, chipPublicKeyInfo: [UInt8],
        terminalEphemeralPublicKey: [UInt8]
    ) {
        self.algorithm = algorithm; self.keyId = keyId
        self.chipPublicKeyInfo = chipPublicKeyInfo; self.terminalEphemeralPublicKey = terminalEphemeralPublicKey
    }
}

/// Chip Authentication v1 (Doc 9303 Part 11 §6.2, BSI TR-03110 Part 1 §3.4 / Part 3 §B.1): ephemeral-static
/// (EC)DH between a terminal key and the chip's static key in DG14; secure messaging restarts with
/// KS_Enc/KS_MAC derived from the shared secret and SSC = 0. The chip proves it holds the private key by
/// answering correctly under the new keys (the reader checks that on the next command).
public enum ChipAuthentication {
    /// id-PK-DH (TR-03110 Part 3 §A.1.1.2).
    public static let idPKDH = SecurityInfos.idPK + ".1"

    /// A usable (ChipAuthenticationInfo, public key) pair from DG14's SecurityInfos.
    public struct Candidate: Sendable, Equatable {
        public let algorithm: ChipAuthenticationAlgorithm
        public let keyId: Int?
        public let publicKeyInfo: ChipAuthenticationPublicKeyInfo
        public let domain: PACEDomain
        public let publicKey: [UInt8]
    }

    /// Whether the SecurityInfos announce Chip Authentication (a ChipAuthenticationInfo, or a chip
    /// authentication public key alone, which Doc 9303 Part 11 §9.2.6 makes a 3DES CA — unless PACE-CAM
    /// PACEInfos say the key is for PACE-CAM).
    public static func isAnnounced(in infos: SecurityInfos) -> Bool {
        infos.chipAuthenticationInfos.contains {
            ChipAuthenticationAlgorithm(oid: $0.protocolOID) != nil && $0.version == 1
        }
            || keysImply3DES(infos)
    }

    static func keysImply3DES(_ infos: SecurityInfos) -> Bool {
        infos.chipAuthenticationInfos.isEmpty && !infos.chipAuthenticationPublicKeyInfos.isEmpty
            && !infos.paceInfos.contains { $0.algorithm?.mapping == .chipAuthentication }
    }

    /// The candidates this implementation can run, preferred first (ECDH before DH, then the stronger cipher).
    /// A ChipAuthenticationInfo without keyId pairs with the only key of its agreement; keys without any
    /// ChipAuthenticationInfo get 3DES (Doc 9303 Part 11 §9.2.6). `problems` says why an announced pair was unusable.
    public static func candidates(in infos: SecurityInfos) -> (candidates: [Candidate], problems: [String]) {
        var pairs: [(ChipAuthenticationAlgorithm, Int?, ChipAuthenticationPublicKeyInfo)] = []
        var problems: [String] = []
        if keysImply3DES(infos) {
            for key in infos.chipAuthenticationPublicKeyInfos {
                let agreement: PACEKeyAgreement = key.protocolOID == idPKDH ? .dh : .ecdh
                pairs.append((ChipAuthenticationAlgorithm(keyAgreement: agreement, cipher: .tripleDES), key.keyId, key))
            }
        }
        for info in infos.chipAuthenticationInfos {
            guard let algorithm = ChipAuthenticationAlgorithm(oid: info.protocolOID), info.version == 1 else {
                problems.append(
                    "ChipAuthenticationInfo \(info.protocolOID) version \(info.version) is not Chip Authentication v1")
                continue
            }
            let pkOID = algorithm.keyAgreement == .dh ? idPKDH : ChipAuthenticationMapping.idPKECDH
            let keys = infos.chipAuthenticationPublicKeyInfos.filter { $0.protocolOID == pkOID }
            let key = info.keyId.map { id in keys.first { $0.keyId == id } } ?? (keys.count == 1 ? keys.first : nil)
            guard let key else {
                problems.append(
                    "no \(algorithm.keyAgreement.rawValue) chip authentication public key for keyId \(info.keyId.map(String.init) ?? "-")"
                )
                continue
            }
            pairs.append((algorithm, info.keyId ?? key.keyId, key))
        }
        var out: [Candidate] = []
        for (algorithm, keyId, key) in pairs {
            do {
                let (domain, publicKey) = try Self.publicKey(of: key)
                guard domain.keyAgreement == algorithm.keyAgreement else {
                    problems.append("key \(keyId.map(String.init) ?? "-") does not fit \(algorithm)")
                    continue
                }
                out.append(
                    Candidate(
                        algorithm: algorithm, keyId: keyId, publicKeyInfo: key, domain: domain, publicKey: publicKey))
            } catch {
                problems.append("key \(keyId.map(String.init) ?? "-"): \(error.message)")
            }
        }
        func rank(_ c: Candidate) -> Int {
            (c.algorithm.keyAgreement == .ecdh ? 10 : 0)
                + ([SessionCipher.tripleDES: 1, .aes128: 2, .aes192: 3, .aes256: 4][c.algorithm.cipher] ?? 0)
        }
        return (out.sorted { rank($0) > rank($1) }, problems)
    }

    /// The domain parameters and public key of a ChipAuthenticationPublicKeyInfo: EC on standardized parameters
    /// or a named curve, DH on standardized parameters (the key a DER INTEGER, RFC 3279). Explicit parameters
    /// are UNSUPPORTED_PROTOCOL; a malformed key is MALFORMED_DATA.
    public static func publicKey(of info: ChipAuthenticationPublicKeyInfo) throws(TesseraError) -> (
        domain: PACEDomain, key: [UInt8]
    ) {
        if info.protocolOID == ChipAuthenticationMapping.idPKECDH {
            let key = try ChipAuthenticationMapping.publicKey(of: info)
            guard let curve = key.curve else {
                throw TesseraError(
                    .unsupportedProtocol, "chip authentication key with explicit EC parameters is not supported")
            }
            let domain = PACEDomain.ec(curve)
            try domain.validate(publicKey: key.point)
            return (domain, key.point)
        }
        guard info.protocolOID == idPKDH else {
            throw TesseraError(
                .unsupportedProtocol, "chip authentication key \(info.protocolOID) is neither DH nor ECDH")
        }
        let parts = try TLV.parse(info.subjectPublicKeyInfo).children()
        guard parts.count == 2, parts[0].tag == ASN1.sequence, parts[1].tag == ASN1.bitString,
            parts[1].value.first == 0, parts[1].value.count > 1
        else {
            throw TesseraError(.malformedData, "chip authentication public key is not a SubjectPublicKeyInfo")
        }
        let algorithm = try parts[0].children()
        guard algorithm.count == 2,
            try ASN1.oidValue(algorithm[0]) == ChipAuthenticationMapping.standardizedDomainParameters,
            case .dh(let group)? = PACEDomain.standardized(try ASN1.smallInt(algorithm[1]))
        else {
            throw TesseraError(
                .unsupportedProtocol,
                "DH chip authentication key without standardized domain parameters is not supported")
        }
        let integer = try TLV.parse(Array(parts[1].value.dropFirst()))
        guard integer.tag == ASN1.integer else {
            throw TesseraError(.malformedData, "DH chip authentication key is not an INTEGER")
        }
        var y = Array(integer.value.drop { $0 == 0 })
        guard y.count <= group.primeSize else {
            throw TesseraError(.malformedData, "DH chip authentication key is too long")
        }
        y = [UInt8](repeating: 0, count: group.primeSize - y.count) + y
        let domain = PACEDomain.dh(group)
        try domain.validate(publicKey: y)
        return (domain, y)
    }

    /// SubjectPublicKeyInfo DER for a chip key on standardized parameters `parameterId` (EC point, or DH value as INTEGER).
    public static func subjectPublicKeyInfo(parameterId: Int, publicKey: [UInt8]) -> [UInt8] {
        let algorithm = ASN1.seq([
            ASN1.oid(ChipAuthenticationMapping.standardizedDomainParameters), ASN1.int(parameterId),
        ])
        let isDH: Bool
        if case .dh? = PACEDomain.standardized(parameterId) { isDH = true } else { isDH = false }
        let key = isDH ? ASN1.unsignedInt(publicKey) : publicKey
        return ASN1.seq([algorithm, ASN1.node(ASN1.bitString, [0] + key)])
    }

    /// Session keys and the SM session (SSC = 0) from the shared secret K (KDF of Doc 9303 Part 11 §9.7.1).
    public static func session(sharedSecret: [UInt8], cipher: SessionCipher) throws(TesseraError)
        -> SecureMessagingSession
    {
        let keys = AccessKeyDerivation.sessionKeys(sharedSecret, cipher: cipher)
        return try SecureMessagingSession(cipher: cipher, encryptionKey: keys.encryption, macKey: keys.mac)
    }

    /// The command that hands the terminal's ephemeral key to the chip: 3DES — MSE:Set KAT (0022 41A6, 91 key
    /// [, 84 keyId]); AES — MSE:Set AT (0022 41A4, 80 OID [, 84 keyId]) followed by GENERAL AUTHENTICATE
    /// (7C { 80 key }). Returns the commands in order.
    public static func commands(algorithm: ChipAuthenticationAlgorithm, keyId: Int?, ephemeralPublicKey: [UInt8])
        -> [CommandAPDU]
    {
        let keyReference = keyId.map { TLV.encode(tag: 0x84, value: minimalBytes($0)) } ?? []
        if algorithm.cipher == .tripleDES {
            return [
                CommandAPDU(
                    ins: 0x22, p1: 0x41, p2: 0xA6, data: TLV.encode(tag: 0x91, value: ephemeralPublicKey) + keyReference
                )
            ]
        }
        return [
            CommandAPDU(
                ins: 0x22, p1: 0x41, p2: 0xA4, data: TLV.encode(tag: 0x80, value: algorithm.oidBytes) + keyReference),
            CommandAPDU(
                ins: 0x86, p1: 0, p2: 0,
                data: TLV.encode(tag: 0x7C, value: TLV.encode(tag: 0x80, value: ephemeralPublicKey)),
                ne: 256),
        ]
    }

    /// Reader side: sends the terminal's ephemeral key over `channel` (the access session) and returns the new
    /// SM session (SSC = 0) with what was sent. A chip that refuses a command throws (CARD_ERROR with the SW,
    /// or UNSUPPORTED_PROTOCOL for 6A80/6A86/6A88/6D00). `ephemeralPrivateKey` is for tests (random when nil).
    public static func perform(
        over channel: any APDUTransport, candidate: Candidate,
        ephemeralPrivateKey: [UInt8]? = nil
    ) async throws(TesseraError) -> (session: SecureMessagingSession, run: ChipAuthenticationRun) {
        let ephemeral = try candidate.domain.keyPair(privateKey: ephemeralPrivateKey)
        let shared = try candidate.domain.sharedSecret(
            privateKey: ephemeral.privateKey, peerPublicKey: candidate.publicKey)
        for command in commands(
            algorithm: candidate.algorithm, keyId: candidate.keyId, ephemeralPublicKey: ephemeral.publicKey)
        {
            let response = try await channel.send(command)
            guard response.sw.isSuccess else {
                let step = command.ins == 0x22 ? "MSE:Set \(command.p2 == 0xA6 ? "KAT" : "AT")" : "GENERAL AUTHENTICATE"
                let details: [String: JSONValue] = ["sw": .string(response.sw.description)]
                switch response.sw.value {
                case 0x6A80, 0x6A86, 0x6A88, 0x6D00:
                    throw TesseraError(
                        .unsupportedProtocol, "Chip Authentication \(step) not supported by the chip (\(response.sw))",
                        details: details)
                default:
                    throw TesseraError(
                        .cardError, "Chip Authentication \(step) refused by the chip (\(response.sw))", details: details
                    )
                }
            }
        }
        let run = ChipAuthenticationRun(
            algorithm: candidate.algorithm, keyId: candidate.keyId,
            chipPublicKeyInfo: candidate.publicKeyInfo.subjectPublicKeyInfo,
            terminalEphemeralPublicKey: ephemeral.publicKey)
        return (try session(sharedSecret: shared, cipher: candidate.algorithm.cipher), run)
    }

    static func minimalBytes(_ v: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var x = v
        repeat { bytes.insert(UInt8(x & 0xFF), at: 0); x >>= 8 } while x > 0
        return bytes
    }
}

/// Chip side of Chip Authentication v1 for emulated documents. Feed it MSE:Set KAT, or MSE:Set AT then
/// GENERAL AUTHENTICATE; once it returns a session, the chip answers that command under the old keys and
/// switches to the new session.
public struct ChipAuthenticationChip: Sendable {
    /// A static key the chip holds: its domain, private key and keyId.
    public struct Key: Sendable {
        public let domain: PACEDomain
        public let privateKey: [UInt8]
        public let keyId: Int?
        public init(domain: PACEDomain, privateKey: [UInt8], keyId: Int?) {
            self.domain = domain; self.privateKey = privateKey; self.keyId = keyId
        }
    }

    private let keys: [Key]
    private let algorithms: [ChipAuthenticationAlgorithm]
    private var selected: (algorithm: ChipAuthenticationAlgorithm, key: Key)?

    /// `algorithms`: the protocols the chip offers (DG14); `keys`: its static keys.
    public init(algorithms: [ChipAuthenticationAlgorithm], keys: [Key]) {
        self.algorithms = algorithms
        self.keys = keys
    }

    private func key(agreement: PACEKeyAgreement, reference: [UInt8]?) throws(TesseraError) -> Key {
        let fitting = keys.filter { $0.domain.keyAgreement == agreement }
        if let reference {
            let id = reference.reduce(0) { $0 << 8 | Int($1) }
            guard let key = fitting.first(where: { $0.keyId == id }) else {
                throw TesseraError(.invalidInput, "no key \(id)")
            }
            return key
        }
        guard fitting.count == 1 else { throw TesseraError(.invalidInput, "key reference needed") }
        return fitting[0]
    }

    /// MSE:Set KAT data (91 key [, 84 keyId]): the new session (3DES CA).
    public func setKAT(_ data: [UInt8]) throws(TesseraError) -> SecureMessagingSession {
        let objects = try TLV.parseAll(data, options: [])
        guard let ephemeral = objects.first(tag: 0x91)?.value else {
            throw TesseraError(.malformedData, "MSE:Set KAT without key")
        }
        let key = try keyForKAT(reference: objects.first(tag: 0x84)?.value)
        guard
            let algorithm = algorithms.first(where: {
                $0.cipher == .tripleDES && $0.keyAgreement == key.domain.keyAgreement
            })
        else {
            throw TesseraError(.unsupportedProtocol, "3DES Chip Authentication not offered")
        }
        return try Self.agree(key: key, ephemeral: ephemeral, cipher: algorithm.cipher)
    }

    private func keyForKAT(reference: [UInt8]?) throws(TesseraError) -> Key {
        if let reference {
            let id = reference.reduce(0) { $0 << 8 | Int($1) }
            guard let key = keys.first(where: { $0.keyId == id }) else {
                throw TesseraError(.invalidInput, "no key \(id)")
            }
            return key
        }
        guard keys.count == 1 else { throw TesseraError(.invalidInput, "key reference needed") }
        return keys[0]
    }

    /// MSE:Set AT data (80 OID [, 84 keyId]) for AES CA.
    public mutating func setAT(_ data: [UInt8]) throws(TesseraError) {
        selected = nil
        let objects = try TLV.parseAll(data, options: [])
        guard let oid = objects.first(tag: 0x80)?.value,
            let algorithm = ChipAuthenticationAlgorithm(oid: decodeOIDContent(oid)),
            algorithms.contains(algorithm)
        else {
            throw TesseraError(.unsupportedProtocol, "Chip Authentication protocol not offered")
        }
        selected = (algorithm, try key(agreement: algorithm.keyAgreement, reference: objects.first(tag: 0x84)?.value))
    }

    /// Whether MSE:Set AT selected a protocol for GENERAL AUTHENTICATE.
    public var isPending: Bool { selected != nil }

    /// GENERAL AUTHENTICATE data (7C { 80 key }): the response data (7C 00) and the new session.
    public mutating func generalAuthenticate(_ data: [UInt8]) throws(TesseraError) -> (
        response: [UInt8], session: SecureMessagingSession
    ) {
        guard let selected else { throw TesseraError(.cardError, "GENERAL AUTHENTICATE without MSE:Set AT") }
        self.selected = nil
        let outer = try TLV.parseAll(data, options: [])
        guard outer.count == 1, outer[0].tag == 0x7C,
            let ephemeral = try TLV.parseAll(outer[0].value, options: []).first(tag: 0x80)?.value
        else {
            throw TesseraError(.malformedData, "GENERAL AUTHENTICATE without ephemeral key")
        }
        return (
            TLV.encode(tag: 0x7C, value: []),
            try Self.agree(key: selected.key, ephemeral: ephemeral, cipher: selected.algorithm.cipher)
        )
    }

    private static func agree(key: Key, ephemeral: [UInt8], cipher: SessionCipher) throws(TesseraError)
        -> SecureMessagingSession
    {
        try key.domain.validate(publicKey: ephemeral)
        let shared = try key.domain.sharedSecret(privateKey: key.privateKey, peerPublicKey: ephemeral)
        return try ChipAuthentication.session(sharedSecret: shared, cipher: cipher)
    }
}

extension LDSBuilder {
    /// A ChipAuthenticationInfo (version 1) for DG14: `SEQUENCE { id-CA-*, 1, keyId }`.
    public static func chipAuthenticationInfo(algorithm: ChipAuthenticationAlgorithm, keyId: Int?) -> [UInt8] {
        ASN1.seq([ASN1.oid(algorithm.oid), ASN1.int(1)] + (keyId.map { [ASN1.int($0)] } ?? []))
    }

    /// A ChipAuthenticationPublicKeyInfo (id-PK-DH or id-PK-ECDH by the parameters) for DG14.
    public static func chipAuthenticationPublicKeyInfo(standardizedParameterId id: Int, publicKey: [UInt8], keyId: Int?)
        -> [UInt8]
    {
        let isDH: Bool
        if case .dh? = PACEDomain.standardized(id) { isDH = true } else { isDH = false }
        return ASN1.seq(
            [
                ASN1.oid(isDH ? ChipAuthentication.idPKDH : ChipAuthenticationMapping.idPKECDH),
                ChipAuthentication.subjectPublicKeyInfo(parameterId: id, publicKey: publicKey),
            ]
                + (keyId.map { [ASN1.int($0)] } ?? []))
    }
}
