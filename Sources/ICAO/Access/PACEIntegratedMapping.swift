import CryptoPrimitives
import TesseraCore

/// PACE Integrated Mapping (Doc 9303 Part 11 §4.4.3.3.2): the mapped generator is f(Rp(s, t)), from the chip's
/// nonce s and the terminal's nonce t (sent in clear in step 2), with the block-cipher pseudo-random function
/// Rp and the group's point encoding (ECDH: Appendix B; DH: x^((p−1)/q)).
public enum PACEIntegratedMapping {
    /// Bytes of the chip's nonce s: l bits, the smallest multiple of the block size not below the key size
    /// (3DES counts as a 128-bit key).
    public static func chipNonceLength(_ cipher: SessionCipher) -> Int {
        cipher == .aes192 || cipher == .aes256 ? 32 : 16
    }

    /// Bytes of the terminal's nonce t: the key size k (16 for 3DES).
    public static func terminalNonceLength(_ cipher: SessionCipher) -> Int {
        switch cipher {
        case .tripleDES, .aes128: 16
        case .aes192: 24
        case .aes256: 32
        }
    }

    static let c0_128: [UInt8] = Hex.decode("a668892a7c41e3ca739f40b057d85904")!
    static let c1_128: [UInt8] = Hex.decode("a4e136ac725f738b01c1f60217c188ad")!
    static let c0_256: [UInt8] = Hex.decode("d463d65234124ef7897054986dca0a174e28df758cbaa03f240616414d5a1676")!
    static let c1_256: [UInt8] = Hex.decode("54bd7255f0aaf831bec3423fcf39d69b6cbf066677d0faae5aadd99df8e53517")!

    /// R(s, t) = x1 ‖ … ‖ xn before the reduction modulo p (Figure 2): k0 = E(t, s), then for each block
    /// x(i+1) = E(ki, c1) and k(i+1) = E(ki, c0), keys truncated to the key size, n·l ≥ log2 p + 64.
    public static func pseudoRandom(
        chipNonce s: [UInt8], terminalNonce t: [UInt8], cipher: SessionCipher,
        primeBits: Int
    ) throws(TesseraError) -> [UInt8] {
        let l = chipNonceLength(cipher), k = terminalNonceLength(cipher)
        guard s.count == l else {
            throw TesseraError(.malformedData, "integrated mapping nonce s must be \(l) bytes, not \(s.count)")
        }
        guard t.count == k else {
            throw TesseraError(.malformedData, "integrated mapping nonce t must be \(k) bytes, not \(t.count)")
        }
        let (c0, c1) = l == 16 ? (c0_128, c1_128) : (c0_256, c1_256)
        let n = (primeBits + 64 + l * 8 - 1) / (l * 8)
        func encrypt(_ key: [UInt8], _ data: [UInt8]) throws(TesseraError) -> [UInt8] {
            cipher == .tripleDES
                ? try TripleDESCipher.encryptCBC(key: key, data: data) : try AESCipher.encryptCBC(key: key, data: data)
        }
        var key = try encrypt(t, s)
        var output: [UInt8] = []
        output.reserveCapacity(n * l)
        for _ in 0..<n {
            let truncated = Array(key.prefix(k))
            output += try encrypt(truncated, c1)
            key = try encrypt(truncated, c0)
        }
        return output
    }
}

extension PACEDomain {
    /// Whether Integrated Mapping can run on these parameters (every DH group; curves with p ≡ 3 mod 4).
    public var supportsIntegratedMapping: Bool {
        switch self {
        case .ec(let curve): curve.supportsIntegratedMapping
        case .dh: true
        }
    }

    /// The Integrated Mapping generator f(Rp(s, t)): an uncompressed point (EC) or a p-length value (DH).
    public func integratedMapGenerator(
        chipNonce s: [UInt8], terminalNonce t: [UInt8],
        cipher: SessionCipher
    ) throws(TesseraError) -> [UInt8] {
        switch self {
        case .ec(let curve):
            let r = try PACEIntegratedMapping.pseudoRandom(
                chipNonce: s, terminalNonce: t, cipher: cipher, primeBits: curve.fieldBits)
            return try curve.encodeToPoint(fieldElement: r)
        case .dh(let group):
            let r = try PACEIntegratedMapping.pseudoRandom(
                chipNonce: s, terminalNonce: t, cipher: cipher, primeBits: group.primeBits)
            return try group.encodeToGenerator(fieldElement: r)
        }
    }
}
