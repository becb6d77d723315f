internal import CLibCrypto
import TesseraCore

/// Runs one EVP cipher over `data` without padding. `data.count` must be a multiple of the block size.
private func evpCrypt(
    _ cipher: OpaquePointer?, key: [UInt8], iv: [UInt8]?, data: [UInt8], encrypt: Bool,
    blockSize: Int
) throws(TesseraError) -> [UInt8] {
    guard data.count % blockSize == 0 else {
        throw TesseraError(.cryptoError, "data length \(data.count) is not a multiple of \(blockSize)")
    }
    if data.isEmpty { return [] }
    guard let cipher else { throw openSSLError("cipher lookup") }
    guard let ctx = EVP_CIPHER_CTX_new() else { throw openSSLError("EVP_CIPHER_CTX_new") }
    defer { EVP_CIPHER_CTX_free(ctx) }
    let initOK = key.withUnsafeBufferPointer { k in
        if let iv {
            return iv.withUnsafeBufferPointer { v in
                EVP_CipherInit_ex(ctx, cipher, nil, k.baseAddress, v.baseAddress, encrypt ? 1 : 0)
            }
        }
        return EVP_CipherInit_ex(ctx, cipher, nil, k.baseAddress, nil, encrypt ? 1 : 0)
    }
    try check(initOK, "EVP_CipherInit_ex")
    try check(EVP_CIPHER_CTX_set_padding(ctx, 0), "EVP_CIPHER_CTX_set_padding")
    var out = [UInt8](repeating: 0, count: data.count + blockSize)
    var written: Int32 = 0
    var finalWritten: Int32 = 0
    let updateOK = out.withUnsafeMutableBufferPointer { o in
        data.withUnsafeBufferPointer { d in
            EVP_CipherUpdate(ctx, o.baseAddress, &written, d.baseAddress, Int32(d.count))
        }
    }
    try check(updateOK, "EVP_CipherUpdate")
    let finalOK = out.withUnsafeMutableBufferPointer { o in
        EVP_CipherFinal_ex(ctx, o.baseAddress! + Int(written), &finalWritten)
    }
    try check(finalOK, "EVP_CipherFinal_ex")
    return Array(out[0..<Int(written + finalWritten)])
}

/// Triple DES (EDE) without padding, over OpenSSL's default provider.
/// Keys: 8 bytes (single DES expressed as K1=K2=K3), 16 bytes (2-key: K1 K2 K1) or 24 bytes (3-key).
public enum TripleDESCipher {
    public static let blockSize = 8

    static func expandedKey(_ key: [UInt8]) throws(TesseraError) -> [UInt8] {
        switch key.count {
        case 8: return key + key + key
        case 16: return key + key[0..<8]
        case 24: return key
        default: throw TesseraError(.cryptoError, "3DES key must be 8, 16 or 24 bytes, got \(key.count)")
        }
    }

    /// CBC encryption; `iv` defaults to eight zero bytes.
    public static func encryptCBC(
        key: [UInt8], iv: [UInt8] = [UInt8](repeating: 0, count: 8),
        data: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            EVP_des_ede3_cbc(), key: expandedKey(key), iv: checkedIV(iv), data: data, encrypt: true,
            blockSize: blockSize)
    }

    /// CBC decryption; `iv` defaults to eight zero bytes.
    public static func decryptCBC(
        key: [UInt8], iv: [UInt8] = [UInt8](repeating: 0, count: 8),
        data: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            EVP_des_ede3_cbc(), key: expandedKey(key), iv: checkedIV(iv), data: data, encrypt: false,
            blockSize: blockSize)
    }

    /// ECB encryption of whole blocks.
    public static func encryptECB(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            EVP_des_ede3_ecb(), key: expandedKey(key), iv: nil, data: data, encrypt: true,
            blockSize: blockSize)
    }

    /// ECB decryption of whole blocks.
    public static func decryptECB(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            EVP_des_ede3_ecb(), key: expandedKey(key), iv: nil, data: data, encrypt: false,
            blockSize: blockSize)
    }

    /// Sets the DES parity bit (least significant bit) of every byte so each byte has odd parity.
    public static func adjustParity(_ key: [UInt8]) -> [UInt8] {
        key.map { b in
            let ones = (b >> 1).nonzeroBitCount
            return (b & 0xFE) | (ones % 2 == 0 ? 1 : 0)
        }
    }

    private static func checkedIV(_ iv: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard iv.count == blockSize else { throw TesseraError(.cryptoError, "3DES IV must be 8 bytes") }
        return iv
    }
}

/// AES-128/192/256 (chosen by key length) without padding.
public enum AESCipher {
    public static let blockSize = 16

    private static func cipher(_ key: [UInt8], cbc: Bool) throws(TesseraError) -> OpaquePointer? {
        switch key.count {
        case 16: return cbc ? EVP_aes_128_cbc() : EVP_aes_128_ecb()
        case 24: return cbc ? EVP_aes_192_cbc() : EVP_aes_192_ecb()
        case 32: return cbc ? EVP_aes_256_cbc() : EVP_aes_256_ecb()
        default: throw TesseraError(.cryptoError, "AES key must be 16, 24 or 32 bytes, got \(key.count)")
        }
    }

    /// CBC encryption; `iv` defaults to sixteen zero bytes.
    public static func encryptCBC(
        key: [UInt8], iv: [UInt8] = [UInt8](repeating: 0, count: 16),
        data: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            cipher(key, cbc: true), key: key, iv: checkedIV(iv), data: data, encrypt: true,
            blockSize: blockSize)
    }

    /// CBC decryption; `iv` defaults to sixteen zero bytes.
    public static func decryptCBC(
        key: [UInt8], iv: [UInt8] = [UInt8](repeating: 0, count: 16),
        data: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        try evpCrypt(
            cipher(key, cbc: true), key: key, iv: checkedIV(iv), data: data, encrypt: false,
            blockSize: blockSize)
    }

    /// ECB encryption of whole blocks.
    public static func encryptECB(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try evpCrypt(cipher(key, cbc: false), key: key, iv: nil, data: data, encrypt: true, blockSize: blockSize)
    }

    /// ECB decryption of whole blocks.
    public static func decryptECB(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try evpCrypt(cipher(key, cbc: false), key: key, iv: nil, data: data, encrypt: false, blockSize: blockSize)
    }

    private static func checkedIV(_ iv: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard iv.count == blockSize else { throw TesseraError(.cryptoError, "AES IV must be 16 bytes") }
        return iv
    }
}
