internal import CLibCrypto
import TesseraCore

// Internal helpers shared by every OpenSSL-backed file of this module (including Signatures.swift).

/// Builds a CRYPTO_ERROR from the most recent OpenSSL error queue entry and clears the queue.
/// Use right after a failing libcrypto call: `throw openSSLError("EVP_EncryptUpdate")`.
func openSSLError(_ operation: String) -> TesseraError {
    let code = ERR_get_error()
    var message = operation + " failed"
    if code != 0 {
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        let text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        message += ": " + text
    }
    ERR_clear_error()
    return TesseraError(.cryptoError, message)
}

/// An owned OpenSSL BIGNUM, freed (cleared) on deinit. Internal: wrap/unwrap with `[UInt8]` big-endian bytes.
final class BigNum {
    let pointer: OpaquePointer

    /// A new BIGNUM of value zero. Throws CRYPTO_ERROR on allocation failure.
    init() throws(TesseraError) {
        guard let p = BN_new() else { throw openSSLError("BN_new") }
        pointer = p
    }

    /// Big-endian unsigned bytes → BIGNUM.
    convenience init(_ bytes: [UInt8]) throws(TesseraError) {
        try self.init()
        let ok = bytes.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), pointer) }
        guard ok != nil else { throw openSSLError("BN_bin2bn") }
    }

    /// Takes ownership of a BIGNUM allocated by OpenSSL.
    init(owning pointer: OpaquePointer) { self.pointer = pointer }

    deinit { BN_clear_free(pointer) }

    var byteCount: Int { Int((BN_num_bits(pointer) + 7) / 8) }
    var isZero: Bool { BN_is_zero(pointer) == 1 }
    var isOne: Bool { BN_is_one(pointer) == 1 }

    /// Big-endian bytes, left-padded with zeros to `length` when given (throws when the value is longer).
    func bytes(length: Int? = nil) throws(TesseraError) -> [UInt8] {
        let n = byteCount
        let size = length ?? n
        guard n <= size else { throw TesseraError(.cryptoError, "big number longer than \(size) bytes") }
        var out = [UInt8](repeating: 0, count: size)
        if size > 0 {
            let written = out.withUnsafeMutableBufferPointer { BN_bn2binpad(pointer, $0.baseAddress, Int32(size)) }
            guard written == Int32(size) else { throw openSSLError("BN_bn2binpad") }
        }
        return out
    }

    /// -1, 0, 1 as BN_cmp.
    func compare(_ other: BigNum) -> Int32 { BN_cmp(pointer, other.pointer) }
}

/// An owned BN_CTX for temporary big-number work.
final class BigNumContext {
    let pointer: OpaquePointer
    init() throws(TesseraError) {
        guard let p = BN_CTX_new() else { throw openSSLError("BN_CTX_new") }
        pointer = p
    }
    deinit { BN_CTX_free(pointer) }
}

/// Checks an OpenSSL return code (1 = success), throwing CRYPTO_ERROR named after `operation` otherwise.
@inline(__always)
func check(_ result: Int32, _ operation: String) throws(TesseraError) {
    guard result == 1 else { throw openSSLError(operation) }
}
