internal import CLibCrypto
import TesseraCore

/// A DH key pair: private exponent and public value, big-endian (public padded to the prime length).
public struct DHKeyPair: Sendable, Equatable {
    public var privateKey: [UInt8]
    public var publicKey: [UInt8]
    public init(privateKey: [UInt8], publicKey: [UInt8]) { self.privateKey = privateKey; self.publicKey = publicKey }
}

/// A classic finite-field Diffie-Hellman group (prime p, generator g, subgroup order q) with the modular
/// arithmetic PACE DH generic mapping needs. Values are big-endian unsigned bytes; results are padded to
/// the length of p. Every operation may take an explicit `generator` (e.g. PACE's mapped generator g̃).
public struct DHGroup: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    public let p: [UInt8]
    public let g: [UInt8]
    public let q: [UInt8]

    public init(name: String, p: [UInt8], g: [UInt8], q: [UInt8]) {
        self.name = name; self.p = p; self.g = g; self.q = q
    }

    public var description: String { name }

    /// Length of p in bytes (and of public values and shared secrets).
    public var primeSize: Int { p.count - (p.firstIndex { $0 != 0 } ?? p.count) }

    /// base^exponent mod p.
    public func modExp(base: [UInt8], exponent: [UInt8]) throws(TesseraError) -> [UInt8] {
        let ctx = try BigNumContext()
        let r = try BigNum(), b = try BigNum(base), e = try BigNum(exponent), m = try BigNum(p)
        try check(BN_mod_exp(r.pointer, b.pointer, e.pointer, m.pointer, ctx.pointer), "BN_mod_exp")
        return try r.bytes(length: primeSize)
    }

    /// a·b mod p.
    public func modMul(_ a: [UInt8], _ b: [UInt8]) throws(TesseraError) -> [UInt8] {
        let ctx = try BigNumContext()
        let r = try BigNum(), x = try BigNum(a), y = try BigNum(b), m = try BigNum(p)
        try check(BN_mod_mul(r.pointer, x.pointer, y.pointer, m.pointer, ctx.pointer), "BN_mod_mul")
        return try r.bytes(length: primeSize)
    }

    /// A fresh key pair: x ∈ [1, q−1], y = generator^x mod p (g when nil).
    public func generateKeyPair(generator: [UInt8]? = nil) throws(TesseraError) -> DHKeyPair {
        let x = try BigNum(), order = try BigNum(q)
        repeat {
            try check(BN_rand_range(x.pointer, order.pointer), "BN_rand_range")
        } while x.isZero
        let priv = try x.bytes(length: order.byteCount)
        return DHKeyPair(privateKey: priv, publicKey: try publicKey(privateKey: priv, generator: generator))
    }

    /// generator^x mod p (g when nil).
    public func publicKey(privateKey: [UInt8], generator: [UInt8]? = nil) throws(TesseraError) -> [UInt8] {
        try modExp(base: generator ?? g, exponent: privateKey)
    }

    /// PACE generic mapping: g̃ = g^s · h mod p, where h = (peer mapping public key)^x.
    public func mapGenerator(nonce s: [UInt8], sharedSecret h: [UInt8]) throws(TesseraError) -> [UInt8] {
        try modMul(modExp(base: g, exponent: s), h)
    }

    /// peer^x mod p for a validated peer public value.
    public func sharedSecret(privateKey: [UInt8], peerPublicKey: [UInt8]) throws(TesseraError) -> [UInt8] {
        try validate(publicKey: peerPublicKey)
        return try modExp(base: peerPublicKey, exponent: privateKey)
    }

    /// Throws CRYPTO_ERROR unless 1 < y < p−1 and y^q ≡ 1 (mod p).
    public func validate(publicKey y: [UInt8]) throws(TesseraError) {
        let value = try BigNum(y), one = try BigNum([1]), pMinus1 = try BigNum(p)
        try check(BN_sub_word(pMinus1.pointer, 1), "BN_sub_word")
        guard value.compare(one) > 0, value.compare(pMinus1) < 0 else {
            throw TesseraError(.cryptoError, "DH public value out of range")
        }
        let r = try BigNum(modExp(base: y, exponent: q))
        guard r.isOne else { throw TesseraError(.cryptoError, "DH public value not in the prime-order subgroup") }
    }
}

extension DHGroup {
    /// 1024-bit MODP group with 160-bit prime-order subgroup (RFC 5114 §2.1; PACE id 0).
    public static let rfc5114_1024_160 = DHGroup(
        name: "rfc5114_1024_160",
        p: hex(
            "B10B8F96A080E01DDE92DE5EAE5D54EC52C99FBCFB06A3C69A6A9DCA52D23B616073E28675A23D189838EF1E2EE652C0"
                + "13ECB4AEA906112324975C3CD49B83BFACCBDD7D90C4BD7098488E9C219A73724EFFD6FAE5644738FAA31A4FF55BCCC0"
                + "A151AF5F0DC8B4BD45BF37DF365C1A65E68CFDA76D4DA708DF1FB2BC2E4A4371"),
        g: hex(
            "A4D1CBD5C3FD34126765A442EFB99905F8104DD258AC507FD6406CFF14266D31266FEA1E5C41564B777E690F5504F213"
                + "160217B4B01B886A5E91547F9E2749F4D7FBD7D3B9A92EE1909D0D2263F80A76A6A24C087A091F531DBF0A0169B6A28A"
                + "D662A4D18E73AFA32D779D5918D08BC8858F4DCEF97C2A24855E6EEB22B3B2E5"),
        q: hex("F518AA8781A8DF278ABA4E7D64B7CB9D49462353"))

    /// 2048-bit MODP group with 224-bit prime-order subgroup (RFC 5114 §2.2; PACE id 1).
    public static let rfc5114_2048_224 = DHGroup(
        name: "rfc5114_2048_224",
        p: hex(
            "AD107E1E9123A9D0D660FAA79559C51FA20D64E5683B9FD1B54B1597B61D0A75E6FA141DF95A56DBAF9A3C407BA1DF15"
                + "EB3D688A309C180E1DE6B85A1274A0A66D3F8152AD6AC2129037C9EDEFDA4DF8D91E8FEF55B7394B7AD5B7D0B6C12207"
                + "C9F98D11ED34DBF6C6BA0B2C8BBC27BE6A00E0A0B9C49708B3BF8A317091883681286130BC8985DB1602E714415D9330"
                + "278273C7DE31EFDC7310F7121FD5A07415987D9ADC0A486DCDF93ACC44328387315D75E198C641A480CD86A1B9E587E8"
                + "BE60E69CC928B2B9C52172E413042E9B23F10B0E16E79763C9B53DCF4BA80A29E3FB73C16B8E75B97EF363E2FFA31F71"
                + "CF9DE5384E71B81C0AC4DFFE0C10E64F"),
        g: hex(
            "AC4032EF4F2D9AE39DF30B5C8FFDAC506CDEBE7B89998CAF74866A08CFE4FFE3A6824A4E10B9A6F0DD921F01A70C4AFA"
                + "AB739D7700C29F52C57DB17C620A8652BE5E9001A8D66AD7C17669101999024AF4D027275AC1348BB8A762D0521BC98A"
                + "E247150422EA1ED409939D54DA7460CDB5F6C6B250717CBEF180EB34118E98D119529A45D6F834566E3025E316A330EF"
                + "BB77A86F0C1AB15B051AE3D428C8F8ACB70A8137150B8EEB10E183EDD19963DDD9E263E4770589EF6AA21E7F5F2FF381"
                + "B539CCE3409D13CD566AFBB48D6C019181E1BCFE94B30269EDFE72FE9B6AA4BD7B5A0F1C71CFFF4C19C418E1F6EC0179"
                + "81BC087F2A7065B384B890D3191F2BFA"),
        q: hex("801C0D34C58D93FE997177101F80535A4738CEBCBF389A99B36371EB"))

    /// 2048-bit MODP group with 256-bit prime-order subgroup (RFC 5114 §2.3; PACE id 2).
    public static let rfc5114_2048_256 = DHGroup(
        name: "rfc5114_2048_256",
        p: hex(
            "87A8E61DB4B6663CFFBBD19C651959998CEEF608660DD0F25D2CEED4435E3B00E00DF8F1D61957D4FAF7DF4561B2AA30"
                + "16C3D91134096FAA3BF4296D830E9A7C209E0C6497517ABD5A8A9D306BCF67ED91F9E6725B4758C022E0B1EF4275BF7B"
                + "6C5BFC11D45F9088B941F54EB1E59BB8BC39A0BF12307F5C4FDB70C581B23F76B63ACAE1CAA6B7902D52526735488A0E"
                + "F13C6D9A51BFA4AB3AD8347796524D8EF6A167B5A41825D967E144E5140564251CCACB83E6B486F6B3CA3F7971506026"
                + "C0B857F689962856DED4010ABD0BE621C3A3960A54E710C375F26375D7014103A4B54330C198AF126116D2276E11715F"
                + "693877FAD7EF09CADB094AE91E1A1597"),
        g: hex(
            "3FB32C9B73134D0B2E77506660EDBD484CA7B18F21EF205407F4793A1A0BA12510DBC15077BE463FFF4FED4AAC0BB555"
                + "BE3A6C1B0C6B47B1BC3773BF7E8C6F62901228F8C28CBB18A55AE31341000A650196F931C77A57F2DDF463E5E9EC144B"
                + "777DE62AAAB8A8628AC376D282D6ED3864E67982428EBC831D14348F6F2F9193B5045AF2767164E1DFC967C1FB3F2E55"
                + "A4BD1BFFE83B9C80D052B985D182EA0ADB2A3B7313D3FE14C8484B1E052588B9B7D2BBD2DF016199ECD06E1557CD0915"
                + "B3353BBB64E0EC377FD028370DF92B52C7891428CDC67EB6184B523D1DB246C32F63078490F00EF8D647D148D4795451"
                + "5E2327CFEF98C582664B4C0F6CC41659"),
        q: hex("8CF83642A709A097B447997640129DA299B1A47D1EB3750BA308B0FE64F5FBD3"))
}

private func hex(_ text: String) -> [UInt8] {
    // The constants above are literal hex; a failure here is a programming error caught by the tests.
    Hex.decode(text) ?? []
}
