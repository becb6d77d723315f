import CryptoPrimitives
import TesseraCore

/// The PIV Card Application Administration Key (key reference 9B): algorithm and key bytes.
public struct PIVManagementKey: Sendable, Equatable {
    public var algorithm: PIV.Algorithm
    public var key: [UInt8]

    /// Throws INVALID_INPUT when the algorithm is not symmetric or the key length does not fit it.
    public init(algorithm: PIV.Algorithm, key: [UInt8]) throws(TesseraError) {
        guard let length = algorithm.keyLength else {
            throw .invalidInput("the management key algorithm must be 3DES or AES-128/192/256")
        }
        guard key.count == length else {
            throw .invalidInput("a \(algorithm) management key is \(length) bytes, got \(key.count)")
        }
        self.algorithm = algorithm
        self.key = key
    }

    /// The factory default key 0102…08 ×3 as 3DES.
    public static var factoryDefault: PIVManagementKey {
        // Length and algorithm are known to match.
        try! PIVManagementKey(algorithm: .tripleDES, key: PIV.defaultManagementKey)
    }

    /// Whether this is the well-known default key (whatever the algorithm).
    public var isFactoryDefault: Bool { key == PIV.defaultManagementKey }

    /// Parses the key file format: hex, optionally prefixed by `3des:`, `aes128:`, `aes192:` or `aes256:`.
    /// Without a prefix, 24 bytes mean 3DES, 16 AES-128 and 32 AES-256. Whitespace is ignored.
    public init(parsing text: String) throws(TesseraError) {
        var body = text.filter { !$0.isWhitespace }.lowercased()
        var algorithm: PIV.Algorithm?
        for (prefix, alg) in [
            ("3des:", PIV.Algorithm.tripleDES), ("tdes:", .tripleDES), ("aes128:", .aes128),
            ("aes192:", .aes192), ("aes256:", .aes256),
        ] where body.hasPrefix(prefix) {
            algorithm = alg
            body.removeFirst(prefix.count)
        }
        guard let key = Hex.decode(body), !key.isEmpty else {
            throw .invalidInput(
                "the PIV management key file must hold the key in hex (optionally 3des:/aes128:/aes192:/aes256:)")
        }
        let chosen: PIV.Algorithm
        if let algorithm {
            chosen = algorithm
        } else {
            switch key.count {
            case 24: chosen = .tripleDES
            case 16: chosen = .aes128
            case 32: chosen = .aes256
            default: throw .invalidInput("a PIV management key is 16, 24 or 32 bytes, got \(key.count)")
            }
        }
        try self.init(algorithm: chosen, key: key)
    }

    /// Encrypts one block (ECB), as the witness/challenge exchange of GENERAL AUTHENTICATE does.
    public func encryptBlock(_ block: [UInt8]) throws(TesseraError) -> [UInt8] {
        switch algorithm {
        case .tripleDES: try TripleDESCipher.encryptECB(key: key, data: block)
        default: try AESCipher.encryptECB(key: key, data: block)
        }
    }

    /// Decrypts one block (ECB).
    public func decryptBlock(_ block: [UInt8]) throws(TesseraError) -> [UInt8] {
        switch algorithm {
        case .tripleDES: try TripleDESCipher.decryptECB(key: key, data: block)
        default: try AESCipher.decryptECB(key: key, data: block)
        }
    }

    /// Block size of the algorithm (8 for 3DES, 16 for AES).
    public var blockSize: Int { algorithm.blockSize ?? 8 }
}

extension PIVManagementKey: CustomStringConvertible {
    /// Never prints the key.
    public var description: String { "PIVManagementKey(\(algorithm), \(key.count) bytes)" }
}
