import TesseraCore

/// ISO/IEC 9797-1 padding method 2: append 0x80, then zeros up to a multiple of the block size.
public enum ISO9797Padding {
    /// Pads `data` (always adds at least one byte).
    public static func pad(_ data: [UInt8], blockSize: Int) -> [UInt8] {
        var out = data
        out.append(0x80)
        while out.count % blockSize != 0 { out.append(0) }
        return out
    }

    /// Removes method-2 padding; nil when the padding is malformed.
    public static func unpad(_ data: [UInt8]) -> [UInt8]? {
        var i = data.count - 1
        while i >= 0 && data[i] == 0 { i -= 1 }
        guard i >= 0, data[i] == 0x80 else { return nil }
        return Array(data[0..<i])
    }
}

/// ISO/IEC 9797-1 MAC algorithm 3 ("retail MAC") with DES, zero IV and a 16-byte key Ka‖Kb.
public enum RetailMAC {
    /// The 8-byte MAC of `data`. With `pad` (default) padding method 2 is applied first; otherwise
    /// `data` must already be a multiple of 8 bytes.
    public static func mac(key: [UInt8], data: [UInt8], pad: Bool = true) throws(TesseraError) -> [UInt8] {
        guard key.count == 16 else { throw TesseraError(.cryptoError, "retail MAC key must be 16 bytes") }
        let input = pad ? ISO9797Padding.pad(data, blockSize: 8) : data
        guard !input.isEmpty, input.count % 8 == 0 else {
            throw TesseraError(.cryptoError, "retail MAC input is not a non-empty multiple of 8 bytes")
        }
        let ka = Array(key[0..<8]), kb = Array(key[8..<16])
        // Single-DES CBC with Ka (expressed as 3DES with K1=K2=K3), then output transformation 3.
        let cbc = try TripleDESCipher.encryptCBC(key: ka, data: input)
        let last = Array(cbc[(cbc.count - 8)...])
        let d = try TripleDESCipher.decryptECB(key: kb, data: last)
        return try TripleDESCipher.encryptECB(key: ka, data: d)
    }
}

/// CMAC (NIST SP 800-38B, RFC 4493) over AES or 3DES. Returns the full block; truncate as needed.
public enum CMAC {
    /// AES-CMAC (16 bytes) with a 16/24/32-byte key.
    public static func aes(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try compute(blockSize: 16, rb: 0x87, data: data) { (block: [UInt8]) throws(TesseraError) -> [UInt8] in
            try AESCipher.encryptECB(key: key, data: block)
        }
    }

    /// 3DES-CMAC (8 bytes) with a 16- or 24-byte key.
    public static func tripleDES(key: [UInt8], data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try compute(blockSize: 8, rb: 0x1B, data: data) { (block: [UInt8]) throws(TesseraError) -> [UInt8] in
            try TripleDESCipher.encryptECB(key: key, data: block)
        }
    }

    private static func shiftLeft(_ b: [UInt8], rb: UInt8) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: b.count)
        var carry: UInt8 = 0
        for i in stride(from: b.count - 1, through: 0, by: -1) {
            out[i] = (b[i] << 1) | carry
            carry = b[i] >> 7
        }
        if carry == 1 { out[out.count - 1] ^= rb }
        return out
    }

    private static func compute(
        blockSize n: Int, rb: UInt8, data: [UInt8],
        encrypt: ([UInt8]) throws(TesseraError) -> [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        let l = try encrypt([UInt8](repeating: 0, count: n))
        let k1 = shiftLeft(l, rb: rb)
        let k2 = shiftLeft(k1, rb: rb)
        let blocks = max(1, (data.count + n - 1) / n)
        let complete = !data.isEmpty && data.count % n == 0
        var last: [UInt8]
        if complete {
            last = Array(data[((blocks - 1) * n)...])
            for i in 0..<n { last[i] ^= k1[i] }
        } else {
            last = ISO9797Padding.pad(Array(data[((blocks - 1) * n)...]), blockSize: n)
            for i in 0..<n { last[i] ^= k2[i] }
        }
        var x = [UInt8](repeating: 0, count: n)
        for b in 0..<(blocks - 1) {
            for i in 0..<n { x[i] ^= data[b * n + i] }
            x = try encrypt(x)
        }
        for i in 0..<n { x[i] ^= last[i] }
        return try encrypt(x)
    }
}
