import Crypto
import TesseraCore

/// Message digests. `sha256` is the one SHA-256 entry point (swift-crypto); `Signatures.digest` and the other
/// modules hash through these, SHA-224 (which swift-crypto lacks) through libcrypto in `Signatures.digest`.
public enum MessageDigest {
    public static func sha1(_ data: [UInt8]) -> [UInt8] { Array(Insecure.SHA1.hash(data: data)) }
    public static func sha224(_ data: [UInt8]) throws(TesseraError) -> [UInt8] { try Signatures.digest(.sha224, data) }
    public static func sha256(_ data: [UInt8]) -> [UInt8] { SHA256.hash(data: data).withUnsafeBytes { Array($0) } }
    public static func sha384(_ data: [UInt8]) -> [UInt8] { Array(SHA384.hash(data: data)) }
    public static func sha512(_ data: [UInt8]) -> [UInt8] { Array(SHA512.hash(data: data)) }
}
