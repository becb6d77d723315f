import CryptoPrimitives
import TesseraCore

/// The password used for BAC or PACE.
public enum AccessPassword: Sendable, Hashable {
    /// MRZ information: document number + check digit + date of birth + check digit + date of expiry + check digit.
    case mrz(mrzInformation: String)
    /// The card access number printed on the document.
    case can(String)

    /// PACE password reference for MSE:Set AT (Part 11 §4.4.4.1: MRZ = 1, CAN = 2).
    public var paceReference: UInt8 {
        switch self {
        case .mrz: 1
        case .can: 2
        }
    }
}

/// The block cipher (and key length) of a secure-messaging session.
public enum SessionCipher: String, Sendable, Hashable {
    case tripleDES = "3DES", aes128 = "AES-128", aes192 = "AES-192", aes256 = "AES-256"

    /// Key length in bytes.
    public var keyLength: Int {
        switch self {
        case .tripleDES, .aes128: 16
        case .aes192: 24
        case .aes256: 32
        }
    }

    /// Block size in bytes (= SSC length).
    public var blockSize: Int { self == .tripleDES ? 8 : 16 }

    /// The cipher arc that ends the id-PACE-* and id-CA-* OIDs (TR-03110 Part 3 §A.1.1): 1 3DES, 2–4 AES-128/192/256.
    public init?(protocolArc: Int) {
        switch protocolArc {
        case 1: self = .tripleDES
        case 2: self = .aes128
        case 3: self = .aes192
        case 4: self = .aes256
        default: return nil
        }
    }

    /// The arc `init(protocolArc:)` reads.
    public var protocolArc: Int {
        switch self {
        case .tripleDES: 1
        case .aes128: 2
        case .aes192: 3
        case .aes256: 4
        }
    }
}

/// Key derivation of Doc 9303 Part 11 §9.7.
public enum AccessKeyDerivation {
    /// KDF counter for the encryption key.
    public static let encryptionCounter: UInt32 = 1
    /// KDF counter for the MAC key.
    public static let macCounter: UInt32 = 2
    /// KDF counter for the PACE password key K_π.
    public static let passwordCounter: UInt32 = 3

    /// KDF(K, c) (§9.7.1): SHA-1 for 3DES (parity adjusted) and AES-128, SHA-256 for AES-192/256.
    public static func kdf(_ sharedSecret: [UInt8], counter: UInt32, cipher: SessionCipher) -> [UInt8] {
        let input =
            sharedSecret + [
                UInt8(counter >> 24), UInt8((counter >> 16) & 0xFF),
                UInt8((counter >> 8) & 0xFF), UInt8(counter & 0xFF),
            ]
        switch cipher {
        case .tripleDES: return TripleDESCipher.adjustParity(Array(MessageDigest.sha1(input).prefix(16)))
        case .aes128: return Array(MessageDigest.sha1(input).prefix(16))
        case .aes192: return Array(MessageDigest.sha256(input).prefix(24))
        case .aes256: return MessageDigest.sha256(input)
        }
    }

    /// K_seed for BAC (§9.7.2): the first 16 bytes of SHA-1(MRZ information).
    public static func bacKeySeed(mrzInformation: String) -> [UInt8] {
        Array(MessageDigest.sha1(Array(mrzInformation.utf8)).prefix(16))
    }

    /// The document basic access keys K_enc, K_mac derived from the MRZ information (§9.7.2).
    public static func bacKeys(mrzInformation: String) -> (encryption: [UInt8], mac: [UInt8]) {
        let seed = bacKeySeed(mrzInformation: mrzInformation)
        return (
            kdf(seed, counter: encryptionCounter, cipher: .tripleDES),
            kdf(seed, counter: macCounter, cipher: .tripleDES)
        )
    }

    /// The PACE password key K = f(π) (§9.7.3): SHA-1(MRZ information) or the CAN's bytes.
    public static func pacePasswordKey(_ password: AccessPassword) -> [UInt8] {
        switch password {
        case .mrz(let info): MessageDigest.sha1(Array(info.utf8))
        case .can(let can): Array(can.utf8)
        }
    }

    /// K_π = KDF(f(π), 3) for the given cipher.
    public static func paceNonceKey(_ password: AccessPassword, cipher: SessionCipher) -> [UInt8] {
        kdf(pacePasswordKey(password), counter: passwordCounter, cipher: cipher)
    }

    /// Session keys (KS_enc, KS_mac) from a shared secret.
    public static func sessionKeys(_ sharedSecret: [UInt8], cipher: SessionCipher) -> (
        encryption: [UInt8], mac: [UInt8]
    ) {
        (
            kdf(sharedSecret, counter: encryptionCounter, cipher: cipher),
            kdf(sharedSecret, counter: macCounter, cipher: cipher)
        )
    }
}
