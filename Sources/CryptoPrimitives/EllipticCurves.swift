internal import CLibCrypto
import TesseraCore

/// An elliptic-curve key pair: private scalar (big-endian, order length) and uncompressed public point.
public struct ECKeyPair: Sendable, Equatable {
    public var privateKey: [UInt8]
    public var publicKey: [UInt8]
    public init(privateKey: [UInt8], publicKey: [UInt8]) { self.privateKey = privateKey; self.publicKey = publicKey }
}

/// A named prime curve (by OpenSSL NID) with the point arithmetic PACE generic mapping and ECDH need.
/// Points are uncompressed SEC 1 encodings (`04 || X || Y`); scalars are big-endian unsigned bytes.
/// Every operation may take an explicit `generator` (e.g. PACE's mapped generator G̃) instead of G.
public struct ECCurve: Sendable, Hashable, CustomStringConvertible {
    /// The curve's conventional name (e.g. "brainpoolP256r1", "secp256r1").
    public let name: String
    /// The OpenSSL NID.
    public let nid: Int32

    public init(name: String, nid: Int32) { self.name = name; self.nid = nid }

    public static let secp192r1 = ECCurve(name: "secp192r1", nid: NID_X9_62_prime192v1)
    public static let secp224r1 = ECCurve(name: "secp224r1", nid: NID_secp224r1)
    public static let secp256r1 = ECCurve(name: "secp256r1", nid: NID_X9_62_prime256v1)
    public static let secp384r1 = ECCurve(name: "secp384r1", nid: NID_secp384r1)
    public static let secp521r1 = ECCurve(name: "secp521r1", nid: NID_secp521r1)
    public static let brainpoolP192r1 = ECCurve(name: "brainpoolP192r1", nid: NID_brainpoolP192r1)
    public static let brainpoolP224r1 = ECCurve(name: "brainpoolP224r1", nid: NID_brainpoolP224r1)
    public static let brainpoolP256r1 = ECCurve(name: "brainpoolP256r1", nid: NID_brainpoolP256r1)
    public static let brainpoolP320r1 = ECCurve(name: "brainpoolP320r1", nid: NID_brainpoolP320r1)
    public static let brainpoolP384r1 = ECCurve(name: "brainpoolP384r1", nid: NID_brainpoolP384r1)
    public static let brainpoolP512r1 = ECCurve(name: "brainpoolP512r1", nid: NID_brainpoolP512r1)

    /// The curves above, for lookups by name.
    public static let known: [ECCurve] = [
        .secp192r1, .secp224r1, .secp256r1, .secp384r1, .secp521r1, .brainpoolP192r1, .brainpoolP224r1,
        .brainpoolP256r1, .brainpoolP320r1, .brainpoolP384r1, .brainpoolP512r1,
    ]

    /// Looks a curve up by name (also accepts OpenSSL's "prime256v1"-style aliases).
    public static func named(_ name: String) -> ECCurve? {
        let aliases = [
            "prime192v1": "secp192r1", "prime256v1": "secp256r1", "P-256": "secp256r1",
            "P-384": "secp384r1", "P-521": "secp521r1", "P-224": "secp224r1", "P-192": "secp192r1",
        ]
        let n = aliases[name] ?? name
        return known.first { $0.name.lowercased() == n.lowercased() }
    }

    public var description: String { name }

    /// Length in bytes of a field element (and of the x-coordinate shared secret).
    public var fieldSize: Int {
        get throws(TesseraError) { try ECGroup(nid).fieldSize }
    }

    /// The group order n, big-endian.
    public var order: [UInt8] {
        get throws(TesseraError) { try ECGroup(nid).orderBytes() }
    }

    /// The standard generator G, uncompressed.
    public var generator: [UInt8] {
        get throws(TesseraError) {
            let g = try ECGroup(nid)
            guard let gen = EC_GROUP_get0_generator(g.pointer) else { throw openSSLError("EC_GROUP_get0_generator") }
            return try g.encode(gen)
        }
    }

    /// A fresh random key pair: d ∈ [1, n−1], Q = d·generator (G when nil).
    public func generateKeyPair(generator: [UInt8]? = nil) throws(TesseraError) -> ECKeyPair {
        let g = try ECGroup(nid)
        let d = try BigNum()
        let order = try g.order()
        repeat {
            try check(BN_rand_range(d.pointer, order.pointer), "BN_rand_range")
        } while d.isZero
        let priv = try d.bytes(length: order.byteCount)
        return ECKeyPair(privateKey: priv, publicKey: try publicKey(privateKey: priv, generator: generator))
    }

    /// Q = d·generator (G when nil).
    public func publicKey(privateKey: [UInt8], generator: [UInt8]? = nil) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let d = try BigNum(privateKey)
        if let generator {
            let base = try g.decode(generator)
            defer { EC_POINT_free(base) }
            return try g.multiply(base, d)
        }
        return try g.multiply(nil, d)
    }

    /// k·P for a validated point P.
    public func multiply(point: [UInt8], scalar: [UInt8]) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let p = try g.decode(point)
        defer { EC_POINT_free(p) }
        return try g.multiply(p, BigNum(scalar))
    }

    /// P + Q for validated points.
    public func add(_ p: [UInt8], _ q: [UInt8]) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let a = try g.decode(p)
        defer { EC_POINT_free(a) }
        let b = try g.decode(q)
        defer { EC_POINT_free(b) }
        guard let r = EC_POINT_new(g.pointer) else { throw openSSLError("EC_POINT_new") }
        defer { EC_POINT_free(r) }
        try check(EC_POINT_add(g.pointer, r, a, b, g.ctx.pointer), "EC_POINT_add")
        return try g.encode(r)
    }

    /// PACE generic mapping: G̃ = s·G + H, where H = d·(peer mapping public key).
    public func mapGenerator(nonce s: [UInt8], sharedPoint h: [UInt8]) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let hp = try g.decode(h)
        defer { EC_POINT_free(hp) }
        guard let r = EC_POINT_new(g.pointer) else { throw openSSLError("EC_POINT_new") }
        defer { EC_POINT_free(r) }
        let sBN = try BigNum(s)
        let one = try BigNum([1])
        // r = s·G + 1·H
        try check(EC_POINT_mul(g.pointer, r, sBN.pointer, hp, one.pointer, g.ctx.pointer), "EC_POINT_mul")
        return try g.encode(r)
    }

    /// a · b⁻¹ mod n (n the group order), order-length bytes; CRYPTO_ERROR when b is not invertible.
    public func scalarDivide(_ a: [UInt8], by b: [UInt8]) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let n = try g.order()
        let x = try BigNum(a), y = try BigNum(b), inverse = try BigNum(), r = try BigNum()
        guard !y.isZero, BN_mod_inverse(inverse.pointer, y.pointer, n.pointer, g.ctx.pointer) != nil else {
            ERR_clear_error()
            throw TesseraError(.cryptoError, "scalar is not invertible modulo the group order")
        }
        try check(BN_mod_mul(r.pointer, x.pointer, inverse.pointer, n.pointer, g.ctx.pointer), "BN_mod_mul")
        return try r.bytes(length: n.byteCount)
    }

    /// ECDH: the x-coordinate of d·Q (field-size bytes) for a validated peer point Q.
    public func sharedSecret(privateKey: [UInt8], peerPublicKey: [UInt8]) throws(TesseraError) -> [UInt8] {
        try xCoordinate(of: multiply(point: peerPublicKey, scalar: privateKey))
    }

    /// The x-coordinate (field-size bytes) of an uncompressed point.
    public func xCoordinate(of point: [UInt8]) throws(TesseraError) -> [UInt8] {
        let size = try fieldSize
        guard point.count == 1 + 2 * size, point[0] == 0x04 else {
            throw TesseraError(.cryptoError, "not an uncompressed \(name) point")
        }
        return Array(point[1...size])
    }

    /// Throws CRYPTO_ERROR unless `point` decodes to a point on the curve other than infinity.
    public func validate(point: [UInt8]) throws(TesseraError) {
        let g = try ECGroup(nid)
        EC_POINT_free(try g.decode(point))
    }

    /// Encodes affine coordinates (big-endian) as an uncompressed point.
    public func point(x: [UInt8], y: [UInt8]) throws(TesseraError) -> [UInt8] {
        let size = try fieldSize
        guard x.count <= size, y.count <= size else { throw TesseraError(.cryptoError, "coordinate too long") }
        let pad = { (v: [UInt8]) in [UInt8](repeating: 0, count: size - v.count) + v }
        let p = [0x04] + pad(x) + pad(y)
        try validate(point: p)
        return p
    }
}

/// Internal owner of an EC_GROUP and a BN_CTX.
final class ECGroup {
    let pointer: OpaquePointer
    let ctx: BigNumContext

    init(_ nid: Int32) throws(TesseraError) {
        guard let g = EC_GROUP_new_by_curve_name(nid) else { throw openSSLError("EC_GROUP_new_by_curve_name(\(nid))") }
        pointer = g
        do { ctx = try BigNumContext() } catch { EC_GROUP_free(g); throw error }
    }

    deinit { EC_GROUP_free(pointer) }

    var fieldSize: Int { Int((EC_GROUP_get_degree(pointer) + 7) / 8) }

    func order() throws(TesseraError) -> BigNum {
        guard let o = EC_GROUP_get0_order(pointer), let copy = BN_dup(o) else {
            throw openSSLError("EC_GROUP_get0_order")
        }
        return BigNum(owning: copy)
    }

    func orderBytes() throws(TesseraError) -> [UInt8] { try order().bytes() }

    /// Decodes and validates (on curve, not infinity). Caller frees the result.
    func decode(_ bytes: [UInt8]) throws(TesseraError) -> OpaquePointer {
        guard let p = EC_POINT_new(pointer) else { throw openSSLError("EC_POINT_new") }
        let ok = bytes.withUnsafeBufferPointer { EC_POINT_oct2point(pointer, p, $0.baseAddress, $0.count, ctx.pointer) }
        guard ok == 1, EC_POINT_is_at_infinity(pointer, p) == 0, EC_POINT_is_on_curve(pointer, p, ctx.pointer) == 1
        else {
            EC_POINT_free(p)
            ERR_clear_error()
            throw TesseraError(.cryptoError, "invalid elliptic-curve point")
        }
        return p
    }

    func encode(_ point: OpaquePointer) throws(TesseraError) -> [UInt8] {
        guard EC_POINT_is_at_infinity(pointer, point) == 0 else {
            throw TesseraError(.cryptoError, "result is the point at infinity")
        }
        let len = EC_POINT_point2oct(pointer, point, POINT_CONVERSION_UNCOMPRESSED, nil, 0, ctx.pointer)
        guard len > 0 else { throw openSSLError("EC_POINT_point2oct") }
        var out = [UInt8](repeating: 0, count: len)
        let written = out.withUnsafeMutableBufferPointer {
            EC_POINT_point2oct(pointer, point, POINT_CONVERSION_UNCOMPRESSED, $0.baseAddress, len, ctx.pointer)
        }
        guard written == len else { throw openSSLError("EC_POINT_point2oct") }
        return out
    }

    /// k·base (base nil = G).
    func multiply(_ base: OpaquePointer?, _ k: BigNum) throws(TesseraError) -> [UInt8] {
        guard let r = EC_POINT_new(pointer) else { throw openSSLError("EC_POINT_new") }
        defer { EC_POINT_free(r) }
        if let base {
            try check(EC_POINT_mul(pointer, r, nil, base, k.pointer, ctx.pointer), "EC_POINT_mul")
        } else {
            try check(EC_POINT_mul(pointer, r, k.pointer, nil, nil, ctx.pointer), "EC_POINT_mul")
        }
        return try encode(r)
    }
}
