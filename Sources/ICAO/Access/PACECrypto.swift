import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// PACE mapping (TR-03110 Part 3 §A.1.1.1).
public enum PACEMapping: String, Sendable, Hashable {
    case generic = "GM", integrated = "IM", chipAuthentication = "CAM"
}

/// PACE key agreement family.
public enum PACEKeyAgreement: String, Sendable, Hashable {
    case dh = "DH", ecdh = "ECDH"
}

/// A PACE protocol OID decoded into mapping, key agreement and cipher.
public struct PACEAlgorithm: Sendable, Hashable, CustomStringConvertible {
    public let oid: String
    public let mapping: PACEMapping
    public let keyAgreement: PACEKeyAgreement
    public let cipher: SessionCipher

    /// Decodes id-PACE-{DH,ECDH}-{GM,IM,CAM}-{3DES,AES-128,…}; nil for anything else.
    public init?(oid: String) {
        let prefix = SecurityInfos.idPACE + "."
        guard oid.hasPrefix(prefix) else { return nil }
        let parts = oid.dropFirst(prefix.count).split(separator: ".").compactMap { Int($0) }
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case 1: mapping = .generic; keyAgreement = .dh
        case 2: mapping = .generic; keyAgreement = .ecdh
        case 3: mapping = .integrated; keyAgreement = .dh
        case 4: mapping = .integrated; keyAgreement = .ecdh
        case 6: mapping = .chipAuthentication; keyAgreement = .ecdh
        default: return nil
        }
        guard let cipher = SessionCipher(protocolArc: parts[1]) else { return nil }
        self.cipher = cipher
        if mapping == .chipAuthentication && cipher == .tripleDES { return nil }
        self.oid = oid
    }

    /// The OID for a combination (e.g. `.generic`, `.ecdh`, `.aes128` → 0.4.0.127.0.7.2.2.4.2.2).
    public init(mapping: PACEMapping, keyAgreement: PACEKeyAgreement, cipher: SessionCipher) {
        let m: Int
        switch (mapping, keyAgreement) {
        case (.generic, .dh): m = 1
        case (.generic, .ecdh): m = 2
        case (.integrated, .dh): m = 3
        case (.integrated, .ecdh): m = 4
        case (.chipAuthentication, _): m = 6
        }
        let c = cipher.protocolArc
        self.oid = "\(SecurityInfos.idPACE).\(m).\(c)"
        self.mapping = mapping; self.keyAgreement = keyAgreement; self.cipher = cipher
    }

    /// The OID's DER content bytes (the value of tag 80 in MSE:Set AT and of tag 06 in tokens).
    public var oidBytes: [UInt8] { ASN1.encodeOIDContent(oid) }

    public var description: String { "PACE-\(keyAgreement.rawValue)-\(mapping.rawValue)-\(cipher.rawValue)" }
}

/// PACE domain parameters: an elliptic curve or a DH group, with the operations generic mapping needs.
/// Public keys are uncompressed points (EC) or p-length big-endian values (DH); `generator` nil means
/// the standard generator, otherwise the mapped generator.
public enum PACEDomain: Sendable, Hashable, CustomStringConvertible {
    case ec(ECCurve)
    case dh(DHGroup)

    /// Standardized domain parameters (TR-03110 Part 3 Table 4): 0–2 DH (RFC 5114), 8–18 EC.
    public static func standardized(_ id: Int) -> PACEDomain? {
        switch id {
        case 0: .dh(.rfc5114_1024_160)
        case 1: .dh(.rfc5114_2048_224)
        case 2: .dh(.rfc5114_2048_256)
        case 8: .ec(.secp192r1)
        case 9: .ec(.brainpoolP192r1)
        case 10: .ec(.secp224r1)
        case 11: .ec(.brainpoolP224r1)
        case 12: .ec(.secp256r1)
        case 13: .ec(.brainpoolP256r1)
        case 14: .ec(.brainpoolP320r1)
        case 15: .ec(.secp384r1)
        case 16: .ec(.brainpoolP384r1)
        case 17: .ec(.brainpoolP512r1)
        case 18: .ec(.secp521r1)
        default: nil
        }
    }

    public var description: String {
        switch self {
        case .ec(let c): c.name
        case .dh(let g): g.name
        }
    }

    public var keyAgreement: PACEKeyAgreement {
        if case .ec = self { return .ecdh }
        return .dh
    }

    /// Tag of the public key inside the public key data object 7F49 (86 for EC points, 84 for DH values).
    public var publicKeyTag: UInt32 {
        if case .ec = self { return 0x86 }
        return 0x84
    }

    /// A fresh key pair (private, public). `privateKey` fixes the private key (tests).
    public func keyPair(generator: [UInt8]? = nil, privateKey: [UInt8]? = nil) throws(TesseraError) -> (
        privateKey: [UInt8], publicKey: [UInt8]
    ) {
        switch self {
        case .ec(let curve):
            if let privateKey { return (privateKey, try curve.publicKey(privateKey: privateKey, generator: generator)) }
            let k = try curve.generateKeyPair(generator: generator)
            return (k.privateKey, k.publicKey)
        case .dh(let group):
            if let privateKey { return (privateKey, try group.publicKey(privateKey: privateKey, generator: generator)) }
            let k = try group.generateKeyPair(generator: generator)
            return (k.privateKey, k.publicKey)
        }
    }

    /// Throws CRYPTO_ERROR for an invalid peer public key.
    public func validate(publicKey: [UInt8]) throws(TesseraError) {
        switch self {
        case .ec(let curve): try curve.validate(point: publicKey)
        case .dh(let group): try group.validate(publicKey: publicKey)
        }
    }

    /// Generic mapping: from nonce s, own mapping private key and the peer's mapping public key, the mapped
    /// generator (EC: G̃ = s·G + H with H = d·PK; DH: g̃ = g^s · h with h = PK^x).
    public func mapGenerator(nonce: [UInt8], privateKey: [UInt8], peerPublicKey: [UInt8]) throws(TesseraError)
        -> [UInt8]
    {
        switch self {
        case .ec(let curve):
            let h = try curve.multiply(point: peerPublicKey, scalar: privateKey)
            return try curve.mapGenerator(nonce: nonce, sharedPoint: h)
        case .dh(let group):
            let h = try group.sharedSecret(privateKey: privateKey, peerPublicKey: peerPublicKey)
            return try group.mapGenerator(nonce: nonce, sharedSecret: h)
        }
    }

    /// Key agreement on the mapped domain: EC x-coordinate of d·PK, or DH PK^x (p-length bytes).
    public func sharedSecret(privateKey: [UInt8], peerPublicKey: [UInt8]) throws(TesseraError) -> [UInt8] {
        switch self {
        case .ec(let curve): try curve.sharedSecret(privateKey: privateKey, peerPublicKey: peerPublicKey)
        case .dh(let group): try group.sharedSecret(privateKey: privateKey, peerPublicKey: peerPublicKey)
        }
    }
}

/// Side-neutral PACE computations (Doc 9303 Part 11 §4.4, TR-03110 Part 2/3), for reader and emulated chip.
public enum PACECrypto {
    /// z = E(K_π, s): the chip's nonce encryption (CBC, zero IV).
    public static func encryptNonce(_ s: [UInt8], key: [UInt8], cipher: SessionCipher) throws(TesseraError) -> [UInt8] {
        cipher == .tripleDES
            ? try TripleDESCipher.encryptCBC(key: key, data: s) : try AESCipher.encryptCBC(key: key, data: s)
    }

    /// s = D(K_π, z): the reader's nonce decryption.
    public static func decryptNonce(_ z: [UInt8], key: [UInt8], cipher: SessionCipher) throws(TesseraError) -> [UInt8] {
        guard !z.isEmpty, z.count % cipher.blockSize == 0 else {
            throw TesseraError(.malformedData, "encrypted nonce has a bad length (\(z.count))")
        }
        return cipher == .tripleDES
            ? try TripleDESCipher.decryptCBC(key: key, data: z) : try AESCipher.decryptCBC(key: key, data: z)
    }

    /// The public key data object 7F49 { 06 OID, 86/84 public key } that tokens are computed over.
    public static func publicKeyDataObject(algorithm: PACEAlgorithm, domain: PACEDomain, publicKey: [UInt8]) -> [UInt8]
    {
        TLV.encode(
            tag: 0x7F49,
            value: TLV.encode(tag: 0x06, value: algorithm.oidBytes)
                + TLV.encode(tag: domain.publicKeyTag, value: publicKey))
    }

    /// Authentication token T = MAC(KS_mac, 7F49{OID, peer public key}) (8 bytes): AES-CMAC over the
    /// unpadded object truncated to 8 bytes, or the 3DES retail MAC with padding method 2.
    public static func authenticationToken(
        macKey: [UInt8], algorithm: PACEAlgorithm, domain: PACEDomain,
        peerPublicKey: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        let data = publicKeyDataObject(algorithm: algorithm, domain: domain, publicKey: peerPublicKey)
        if algorithm.cipher == .tripleDES { return try RetailMAC.mac(key: macKey, data: data) }
        return Array(try CMAC.aes(key: macKey, data: data).prefix(8))
    }

    /// MSE:Set AT data for PACE: 80 OID, 83 password reference, 84 domain parameter id.
    public static func setATData(algorithm: PACEAlgorithm, password: AccessPassword, parameterId: Int?) -> [UInt8] {
        var data =
            TLV.encode(tag: 0x80, value: algorithm.oidBytes) + TLV.encode(tag: 0x83, value: [password.paceReference])
        if let parameterId { data += TLV.encode(tag: 0x84, value: [UInt8(parameterId & 0xFF)]) }
        return data
    }

    /// Parses MSE:Set AT data (chip side): OID, password reference, optional parameter id.
    public static func parseSetATData(_ data: [UInt8]) throws(TesseraError) -> (
        oid: String, passwordReference: UInt8, parameterId: Int?
    ) {
        let objects = try TLV.parseAll(data, options: [])
        guard let oidBytes = objects.first(tag: 0x80)?.value,
            let ref = objects.first(tag: 0x83)?.value.first
        else {
            throw TesseraError(.malformedData, "MSE:Set AT without OID or password reference")
        }
        let paramId = objects.first(tag: 0x84)?.value.reduce(0) { $0 << 8 | Int($1) }
        return (decodeOIDContent(oidBytes), ref, paramId)
    }
}

/// Dotted string from DER OID content bytes.
func decodeOIDContent(_ bytes: [UInt8]) -> String {
    var arcs: [UInt64] = []
    var v: UInt64 = 0
    for b in bytes {
        v = v << 7 | UInt64(b & 0x7F)
        if b & 0x80 == 0 { arcs.append(v); v = 0 }
    }
    guard let first = arcs.first else { return "" }
    let head: [UInt64] = first < 80 ? [first / 40, first % 40] : [2, first - 80]
    return (head + arcs.dropFirst()).map(String.init).joined(separator: ".")
}
