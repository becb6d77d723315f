internal import CLibCrypto
import Crypto
import TesseraCore

/// Message digests used by ICAO 9303 (via swift-crypto).
public enum MessageDigest {
    public static func sha1(_ data: [UInt8]) -> [UInt8] { Array(Insecure.SHA1.hash(data: data)) }
    public static func sha224(_ data: [UInt8]) throws(TesseraError) -> [UInt8] { try evpDigest("SHA224", data) }
    public static func sha256(_ data: [UInt8]) -> [UInt8] { SHA256.hash(data: data).withUnsafeBytes { Array($0) } }
    public static func sha384(_ data: [UInt8]) -> [UInt8] { Array(SHA384.hash(data: data)) }
    public static func sha512(_ data: [UInt8]) -> [UInt8] { Array(SHA512.hash(data: data)) }

    private static func evpDigest(_ name: String, _ data: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard let md = EVP_get_digestbyname(name) else { throw openSSLError("EVP_get_digestbyname(\(name))") }
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var len: UInt32 = 0
        let ok = data.withUnsafeBufferPointer { d in
            out.withUnsafeMutableBufferPointer { o in
                EVP_Digest(d.baseAddress, d.count, o.baseAddress, &len, md, nil)
            }
        }
        try check(ok, "EVP_Digest")
        return Array(out[0..<Int(len)])
    }
}
