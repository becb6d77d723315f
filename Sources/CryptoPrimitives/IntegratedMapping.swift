internal import CLibCrypto
import TesseraCore

// Group-side primitives of PACE Integrated Mapping (Doc 9303 Part 11 §4.4.3.3.2): the maps from a field
// element Rp(s,t) to a generator. The pseudo-random function Rp itself is block-cipher work (ICAO module).

extension ECCurve {
    /// Bit length of the field prime p (e.g. 521 for secp521r1).
    public var fieldBits: Int {
        get throws(TesseraError) {
            let g = try ECGroup(nid)
            return withExtendedLifetime(g) { Int(EC_GROUP_get_degree(g.pointer)) }
        }
    }

    /// Whether the Integrated Mapping point encoding applies: a prime field with p ≡ 3 (mod 4).
    public var supportsIntegratedMapping: Bool {
        guard let g = try? ECGroup(nid), let curve = try? g.curve() else { return false }
        return BN_mod_word(curve.p.pointer, 4) == 3
    }

    /// Point encoding f_G (Doc 9303 Part 11 Appendix B.2, after Brier et al. 2010, p ≡ 3 mod 4): maps
    /// t = int(`fieldElement`) mod p to a point of the curve, multiplied by the cofactor; uncompressed.
    /// CRYPTO_ERROR for t = 0, an unsuitable curve or a degenerate input.
    public func encodeToPoint(fieldElement: [UInt8]) throws(TesseraError) -> [UInt8] {
        let g = try ECGroup(nid)
        let curve = try g.curve()
        let p = curve.p, ctx = g.ctx.pointer
        guard BN_mod_word(p.pointer, 4) == 3 else {
            throw TesseraError(.cryptoError, "\(name): integrated mapping needs p ≡ 3 (mod 4)")
        }
        let f = FieldArithmetic(p: p, ctx: ctx)
        let input = try BigNum(fieldElement)
        let t = try f.reduce(input)
        guard !t.isZero else { throw TesseraError(.cryptoError, "integrated mapping input is zero modulo p") }
        // 1. α = −t²
        let alpha = try f.negate(f.multiply(t, t))
        // 2. X2 = −b · (1 + α + α²) · (a · (α + α²))⁻¹
        let alphaPlusSquare = try f.add(alpha, f.multiply(alpha, alpha))
        let denominator = try f.multiply(curve.a, alphaPlusSquare)
        guard !denominator.isZero else { throw TesseraError(.cryptoError, "integrated mapping input is degenerate") }
        let one = try BigNum([1])
        let numerator = try f.negate(f.multiply(curve.b, f.add(one, alphaPlusSquare)))
        let x2 = try f.multiply(numerator, f.inverse(denominator))
        // 3. X3 = α · X2
        let x3 = try f.multiply(alpha, x2)
        // 4. h2 = X2³ + a·X2 + b
        let h2 = try f.add(f.add(f.multiply(f.multiply(x2, x2), x2), f.multiply(curve.a, x2)), curve.b)
        // 6. U = t³ · h2
        let u = try f.multiply(f.multiply(f.multiply(t, t), t), h2)
        // 7. A = h2^(p − 1 − (p + 1)/4)
        let exponent = try BigNum(), quarter = try BigNum()
        guard BN_copy(quarter.pointer, p.pointer) != nil else { throw openSSLError("BN_copy") }
        try check(BN_add_word(quarter.pointer, 1), "BN_add_word")
        try check(BN_rshift(quarter.pointer, quarter.pointer, 2), "BN_rshift")
        guard BN_copy(exponent.pointer, p.pointer) != nil else { throw openSSLError("BN_copy") }
        try check(BN_sub_word(exponent.pointer, 1), "BN_sub_word")
        try check(BN_sub(exponent.pointer, exponent.pointer, quarter.pointer), "BN_sub")
        let aValue = try BigNum()
        try check(BN_mod_exp(aValue.pointer, h2.pointer, exponent.pointer, p.pointer, ctx), "BN_mod_exp")
        // 8./9. (X2, A·h2) when A²·h2 = 1, otherwise (X3, A·U)
        let isSquare = try f.multiply(f.multiply(aValue, aValue), h2).isOne
        withExtendedLifetime(one) {}
        let x = isSquare ? x2 : x3
        let y = try isSquare ? f.multiply(aValue, h2) : f.multiply(aValue, u)
        withExtendedLifetime((quarter, exponent)) {}

        guard let point = EC_POINT_new(g.pointer) else { throw openSSLError("EC_POINT_new") }
        defer { EC_POINT_free(point) }
        guard EC_POINT_set_affine_coordinates(g.pointer, point, x.pointer, y.pointer, ctx) == 1,
            EC_POINT_is_on_curve(g.pointer, point, ctx) == 1
        else {
            ERR_clear_error()
            throw TesseraError(.cryptoError, "integrated mapping produced no point on \(name)")
        }
        guard let cofactor = EC_GROUP_get0_cofactor(g.pointer), BN_is_one(cofactor) == 0 else {
            return try g.encode(point)
        }
        guard let copy = BN_dup(cofactor) else { throw openSSLError("BN_dup") }
        return try g.multiply(point, BigNum(owning: copy))
    }
}

extension DHGroup {
    /// Bit length of the prime p.
    public var primeBits: Int {
        guard let first = p.firstIndex(where: { $0 != 0 }) else { return 0 }
        return (p.count - first) * 8 - p[first].leadingZeroBitCount
    }

    /// Integrated Mapping for DH (Doc 9303 Part 11 §4.4.3.3.2): f_g(x) = x^((p−1)/q) mod p with
    /// x = int(`fieldElement`) mod p; CRYPTO_ERROR when the result is 0 or 1.
    public func encodeToGenerator(fieldElement: [UInt8]) throws(TesseraError) -> [UInt8] {
        let ctx = try BigNumContext()
        let modulus = try BigNum(p), order = try BigNum(q), input = try BigNum(fieldElement)
        let x = try BigNum(), cofactor = try BigNum(), pMinus1 = try BigNum(p), r = try BigNum()
        try check(BN_nnmod(x.pointer, input.pointer, modulus.pointer, ctx.pointer), "BN_nnmod")
        try check(BN_sub_word(pMinus1.pointer, 1), "BN_sub_word")
        try check(BN_div(cofactor.pointer, nil, pMinus1.pointer, order.pointer, ctx.pointer), "BN_div")
        try check(BN_mod_exp(r.pointer, x.pointer, cofactor.pointer, modulus.pointer, ctx.pointer), "BN_mod_exp")
        withExtendedLifetime((modulus, order, input, pMinus1, ctx)) {}
        guard !r.isZero, !r.isOne else {
            throw TesseraError(.cryptoError, "integrated mapping produced a trivial generator")
        }
        return try r.bytes(length: primeSize)
    }
}

extension ECGroup {
    /// The curve's p, a and b.
    func curve() throws(TesseraError) -> (p: BigNum, a: BigNum, b: BigNum) {
        let p = try BigNum(), a = try BigNum(), b = try BigNum()
        try check(EC_GROUP_get_curve(pointer, p.pointer, a.pointer, b.pointer, ctx.pointer), "EC_GROUP_get_curve")
        return (p, a, b)
    }
}

/// Arithmetic modulo a prime on owned BIGNUMs (results in [0, p)).
private struct FieldArithmetic {
    let p: BigNum
    let ctx: OpaquePointer

    func reduce(_ x: BigNum) throws(TesseraError) -> BigNum {
        let r = try BigNum()
        try check(BN_nnmod(r.pointer, x.pointer, p.pointer, ctx), "BN_nnmod")
        return r
    }

    func add(_ x: BigNum, _ y: BigNum) throws(TesseraError) -> BigNum {
        let r = try BigNum()
        try check(BN_mod_add(r.pointer, x.pointer, y.pointer, p.pointer, ctx), "BN_mod_add")
        return r
    }

    func multiply(_ x: BigNum, _ y: BigNum) throws(TesseraError) -> BigNum {
        let r = try BigNum()
        try check(BN_mod_mul(r.pointer, x.pointer, y.pointer, p.pointer, ctx), "BN_mod_mul")
        return r
    }

    func negate(_ x: BigNum) throws(TesseraError) -> BigNum {
        let r = try BigNum()
        if x.isZero { return r }
        try check(BN_sub(r.pointer, p.pointer, x.pointer), "BN_sub")
        return r
    }

    func inverse(_ x: BigNum) throws(TesseraError) -> BigNum {
        let r = try BigNum()
        guard BN_mod_inverse(r.pointer, x.pointer, p.pointer, ctx) != nil else {
            ERR_clear_error()
            throw TesseraError(.cryptoError, "not invertible modulo p")
        }
        return r
    }
}
