internal import CLibCrypto
import TesseraCore

/// Hash functions used by signatures and by LDS data-group hashes.
public enum SignatureHash: String, Sendable, CaseIterable, Hashable {
    case sha1 = "SHA1", sha224 = "SHA224", sha256 = "SHA256", sha384 = "SHA384", sha512 = "SHA512"

    /// Digest length in bytes.
    public var outputSize: Int {
        switch self {
        case .sha1: 20
        case .sha224: 28
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }

    fileprivate var md: OpaquePointer? {
        switch self {
        case .sha1: EVP_sha1()
        case .sha224: EVP_sha224()
        case .sha256: EVP_sha256()
        case .sha384: EVP_sha384()
        case .sha512: EVP_sha512()
        }
    }
}

/// A signature scheme with its parameters.
public enum SignatureScheme: Sendable, Hashable {
    /// RSASSA-PKCS1-v1_5.
    case rsaPKCS1v15(SignatureHash)
    /// RSASSA-PSS with an MGF1 hash and a salt length in bytes.
    case rsaPSS(SignatureHash, mgf1: SignatureHash, saltLength: Int)
    /// ECDSA with a DER `Ecdsa-Sig-Value` signature (X.509, CMS).
    case ecdsa(SignatureHash)
    /// ECDSA with a plain `r || s` signature (BSI TR-03111, ICAO active authentication).
    case ecdsaPlain(SignatureHash)

    /// The message hash of the scheme.
    public var hash: SignatureHash {
        switch self {
        case .rsaPKCS1v15(let h), .rsaPSS(let h, _, _), .ecdsa(let h), .ecdsaPlain(let h): h
        }
    }
}

/// Algorithm family of a public or private key.
public enum SignatureKeyKind: String, Sendable {
    case rsa, rsaPSS, ec
}

/// What kind of key a DER SubjectPublicKeyInfo holds.
public struct PublicKeyDescription: Sendable, Equatable {
    public var kind: SignatureKeyKind
    /// Modulus size (RSA) or group order size (EC) in bits.
    public var bits: Int
    /// OpenSSL group name of an EC key (e.g. "prime256v1", "brainpoolP256r1"), also for explicit parameters
    /// that match a known curve; nil when they match none.
    public var curveName: String?
}

/// Key to generate with `Signatures.generateKey`.
public enum SignatureKeySpec: Sendable, Hashable {
    case rsa(bits: Int)
    /// An EC key on an OpenSSL-named curve ("prime256v1", "secp384r1", "brainpoolP256r1", …).
    /// With `explicitParameters` the public key is encoded with explicit domain parameters, as some passports do.
    case ec(curve: String, explicitParameters: Bool = false)
}

/// A generated key pair: PKCS#8 private key and SubjectPublicKeyInfo, both DER.
public struct SignatureKeyPair: Sendable {
    public var privateKeyDER: [UInt8]
    public var publicKeyDER: [UInt8]
}

/// Signature creation and verification over OpenSSL libcrypto (RSA PKCS#1 v1.5 and PSS, ECDSA on NIST,
/// brainpool and explicit-parameter curves). Keys are DER: SubjectPublicKeyInfo for public keys,
/// PKCS#8 or the traditional RSA/EC format for private keys.
public enum Signatures {
    /// Hashes `data`: through `MessageDigest` (swift-crypto), SHA-224 through libcrypto.
    public static func digest(_ hash: SignatureHash, _ data: [UInt8]) throws(TesseraError) -> [UInt8] {
        switch hash {
        case .sha1: return MessageDigest.sha1(data)
        case .sha256: return MessageDigest.sha256(data)
        case .sha384: return MessageDigest.sha384(data)
        case .sha512: return MessageDigest.sha512(data)
        case .sha224: break
        }
        var out = [UInt8](repeating: 0, count: 64)
        var len: UInt32 = 0
        let ok = data.withUnsafeBufferPointer { d in
            out.withUnsafeMutableBufferPointer { o in
                EVP_Digest(d.baseAddress, d.count, o.baseAddress, &len, hash.md, nil)
            }
        }
        guard ok == 1 else { throw opensslError("digest failed") }
        return Array(out[..<Int(len)])
    }

    /// Verifies `signature` over `message`. Returns false for a wrong signature; throws CRYPTO_ERROR when the key
    /// cannot be used (undecodable, wrong type for the scheme).
    public static func verify(
        _ signature: [UInt8], over message: [UInt8], publicKey spki: [UInt8],
        scheme: SignatureScheme
    ) throws(TesseraError) -> Bool {
        let key = try PublicKeyHandle(spki)
        defer { EVP_PKEY_free(key.pkey) }
        let kind = key.kind
        var sig = signature
        switch scheme {
        case .rsaPKCS1v15, .rsaPSS:
            guard kind == .rsa || kind == .rsaPSS else {
                throw TesseraError(.cryptoError, "RSA scheme with a non-RSA key")
            }
        case .ecdsa:
            guard kind == .ec else { throw TesseraError(.cryptoError, "ECDSA scheme with a non-EC key") }
        case .ecdsaPlain:
            guard kind == .ec else { throw TesseraError(.cryptoError, "ECDSA scheme with a non-EC key") }
            guard let der = try? ECDSASignature.derFromRaw(signature) else { return false }
            sig = der
        }
        guard let ctx = EVP_MD_CTX_new() else { throw opensslError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        var pctx: OpaquePointer?
        guard EVP_DigestVerifyInit(ctx, &pctx, scheme.hash.md, nil, key.pkey) == 1 else {
            throw opensslError("verify init")
        }
        try configure(pctx, scheme)
        let rc = sig.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in
                EVP_DigestVerify(ctx, s.baseAddress, s.count, m.baseAddress, m.count)
            }
        }
        ERR_clear_error()
        return rc == 1
    }

    /// Signs `message` with a DER private key.
    public static func sign(
        _ message: [UInt8], privateKey der: [UInt8],
        scheme: SignatureScheme
    ) throws(TesseraError) -> [UInt8] {
        let pkey = try privateKeyHandle(der)
        defer { EVP_PKEY_free(pkey) }
        guard let ctx = EVP_MD_CTX_new() else { throw opensslError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        var pctx: OpaquePointer?
        guard EVP_DigestSignInit(ctx, &pctx, scheme.hash.md, nil, pkey) == 1 else { throw opensslError("sign init") }
        try configure(pctx, scheme)
        var len = 0
        let sized = message.withUnsafeBufferPointer { m in EVP_DigestSign(ctx, nil, &len, m.baseAddress, m.count) }
        guard sized == 1, len > 0, len < 4096 else { throw opensslError("sign size") }
        var out = [UInt8](repeating: 0, count: len)
        let rc = message.withUnsafeBufferPointer { m in
            out.withUnsafeMutableBufferPointer { o in EVP_DigestSign(ctx, o.baseAddress, &len, m.baseAddress, m.count) }
        }
        guard rc == 1 else { throw opensslError("sign") }
        out = Array(out[..<len])
        if case .ecdsaPlain = scheme {
            let size = (Int(EVP_PKEY_get_bits(pkey)) + 7) / 8
            guard let plain = try? ECDSASignature.rawFromDER(out, group: .init(componentLength: size)) else {
                throw TesseraError(.cryptoError, "bad ECDSA signature from OpenSSL")
            }
            return plain
        }
        return out
    }

    /// The RSA public operation `s^e mod n` without padding (for ISO/IEC 9796-2 message recovery),
    /// left-padded to the modulus length.
    public static func rsaRecover(_ signature: [UInt8], publicKey spki: [UInt8]) throws(TesseraError) -> [UInt8] {
        let key = try PublicKeyHandle(spki)
        defer { EVP_PKEY_free(key.pkey) }
        guard key.kind == .rsa || key.kind == .rsaPSS else { throw TesseraError(.cryptoError, "not an RSA key") }
        let size = (Int(EVP_PKEY_get_bits(key.pkey)) + 7) / 8
        guard signature.count <= size else { throw TesseraError(.cryptoError, "RSA input longer than the modulus") }
        let input = [UInt8](repeating: 0, count: size - signature.count) + signature
        guard let pctx = EVP_PKEY_CTX_new(key.pkey, nil) else { throw opensslError("EVP_PKEY_CTX_new") }
        defer { EVP_PKEY_CTX_free(pctx) }
        guard EVP_PKEY_verify_recover_init(pctx) == 1,
            EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_NO_PADDING) == 1
        else { throw opensslError("recover init") }
        var out = [UInt8](repeating: 0, count: size)
        var outLen = size
        let rc = input.withUnsafeBufferPointer { i in
            out.withUnsafeMutableBufferPointer { o in
                EVP_PKEY_verify_recover(pctx, o.baseAddress, &outLen, i.baseAddress, i.count)
            }
        }
        guard rc == 1 else { throw opensslError("RSA public operation failed") }
        return [UInt8](repeating: 0, count: size - outLen) + out[..<outLen]
    }

    /// The RSA private operation without padding on a block exactly as long as the modulus
    /// (signing side of ISO/IEC 9796-2, as an emulated chip does).
    public static func rsaRawSign(_ block: [UInt8], privateKey der: [UInt8]) throws(TesseraError) -> [UInt8] {
        let pkey = try privateKeyHandle(der)
        defer { EVP_PKEY_free(pkey) }
        let size = (Int(EVP_PKEY_get_bits(pkey)) + 7) / 8
        guard block.count == size else { throw TesseraError(.cryptoError, "raw RSA block must be \(size) bytes") }
        guard let pctx = EVP_PKEY_CTX_new(pkey, nil) else { throw opensslError("EVP_PKEY_CTX_new") }
        defer { EVP_PKEY_CTX_free(pctx) }
        guard EVP_PKEY_sign_init(pctx) == 1,
            EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_NO_PADDING) == 1
        else { throw opensslError("raw sign init") }
        var out = [UInt8](repeating: 0, count: size)
        var outLen = size
        let rc = block.withUnsafeBufferPointer { i in
            out.withUnsafeMutableBufferPointer { o in
                EVP_PKEY_sign(pctx, o.baseAddress, &outLen, i.baseAddress, i.count)
            }
        }
        guard rc == 1 else { throw opensslError("RSA private operation failed") }
        return [UInt8](repeating: 0, count: size - outLen) + out[..<outLen]
    }

    /// EMSA-PKCS1-v1_5 (RFC 8017 §9.2): `00 01 FF… 00 DigestInfo(hash, digest)`, `length` bytes long — the block
    /// a card's raw RSA operation signs. Throws CRYPTO_ERROR for a digest of the wrong size or a block too short.
    public static func pkcs1v15Block(digest: [UInt8], hash: SignatureHash, length: Int) throws(TesseraError)
        -> [UInt8]
    {
        // DER of DigestInfo up to the digest (RFC 8017 §9.2 note 1): SHA-1's OID, or SHA-2's 2.16.840.1.101.3.4.2.n.
        let n = UInt8(hash.outputSize)
        let prefix: [UInt8]
        switch hash {
        case .sha1: prefix = [0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2B, 0x0E, 0x03, 0x02, 0x1A, 0x05, 0x00, 0x04, n]
        case .sha256, .sha384, .sha512, .sha224:
            let arc: UInt8 = hash == .sha256 ? 1 : hash == .sha384 ? 2 : hash == .sha512 ? 3 : 4
            prefix =
                [0x30, 0x11 + n, 0x30, 0x0D, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, arc]
                + [0x05, 0x00, 0x04, n]
        }
        guard digest.count == hash.outputSize else {
            throw TesseraError(.cryptoError, "a \(hash.rawValue) digest is \(hash.outputSize) bytes")
        }
        let t = prefix + digest
        guard length >= t.count + 11 else { throw TesseraError(.cryptoError, "RSA modulus too short for the digest") }
        return [0x00, 0x01] + [UInt8](repeating: 0xFF, count: length - t.count - 3) + [0x00] + t
    }

    /// Describes a DER SubjectPublicKeyInfo. Throws CRYPTO_ERROR if OpenSSL cannot decode it.
    public static func describe(publicKey spki: [UInt8]) throws(TesseraError) -> PublicKeyDescription {
        let key = try PublicKeyHandle(spki)
        defer { EVP_PKEY_free(key.pkey) }
        return PublicKeyDescription(
            kind: key.kind, bits: Int(EVP_PKEY_get_bits(key.pkey)),
            curveName: key.kind == .ec ? groupName(key.pkey) : nil)
    }

    /// The SubjectPublicKeyInfo (DER) of a DER private key.
    public static func publicKey(ofPrivateKey der: [UInt8]) throws(TesseraError) -> [UInt8] {
        let pkey = try privateKeyHandle(der)
        defer { EVP_PKEY_free(pkey) }
        return try exportPublic(pkey)
    }

    /// Generates a key pair.
    public static func generateKey(_ spec: SignatureKeySpec) throws(TesseraError) -> SignatureKeyPair {
        let pctx: OpaquePointer?
        switch spec {
        case .rsa: pctx = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil)
        case .ec: pctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil)
        }
        guard let pctx else { throw opensslError("keygen context") }
        defer { EVP_PKEY_CTX_free(pctx) }
        guard EVP_PKEY_keygen_init(pctx) == 1 else { throw opensslError("keygen init") }
        switch spec {
        case .rsa(let bits):
            guard (1024...8192).contains(bits), EVP_PKEY_CTX_set_rsa_keygen_bits(pctx, Int32(bits)) == 1 else {
                throw opensslError("RSA key size \(bits)")
            }
        case .ec(let curve, _):
            guard EVP_PKEY_CTX_set_group_name(pctx, curve) == 1 else { throw opensslError("unknown curve \(curve)") }
        }
        var pkey: OpaquePointer?
        guard EVP_PKEY_generate(pctx, &pkey) == 1, let pkey else { throw opensslError("key generation") }
        defer { EVP_PKEY_free(pkey) }
        if case .ec(_, true) = spec {
            guard EVP_PKEY_set_utf8_string_param(pkey, OSSL_PKEY_PARAM_EC_ENCODING, "explicit") == 1 else {
                throw opensslError("explicit EC parameters")
            }
        }
        guard let p8 = EVP_PKEY2PKCS8(pkey) else { throw opensslError("PKCS#8 export") }
        defer { PKCS8_PRIV_KEY_INFO_free(p8) }
        var buf: UnsafeMutablePointer<UInt8>?
        let n = i2d_PKCS8_PRIV_KEY_INFO(p8, &buf)
        guard n > 0, let buf else { throw opensslError("PKCS#8 encode") }
        defer { CRYPTO_free(buf, #fileID, #line) }
        let priv = Array(UnsafeBufferPointer(start: buf, count: Int(n)))
        return SignatureKeyPair(privateKeyDER: priv, publicKeyDER: try exportPublic(pkey))
    }

    // MARK: - OpenSSL plumbing

    private struct PublicKeyHandle {
        let pkey: OpaquePointer
        let kind: SignatureKeyKind

        init(_ spki: [UInt8]) throws(TesseraError) {
            guard !spki.isEmpty, spki.count < 1 << 20 else { throw TesseraError(.cryptoError, "bad public key length") }
            let decoded: OpaquePointer? = spki.withUnsafeBufferPointer { b in
                var p: UnsafePointer<UInt8>? = b.baseAddress
                return d2i_PUBKEY(nil, &p, b.count)
            }
            guard let decoded else { throw opensslError("undecodable public key") }
            guard let kind = Signatures.kind(of: decoded) else {
                EVP_PKEY_free(decoded)
                throw TesseraError(.cryptoError, "unsupported public key type")
            }
            pkey = decoded
            self.kind = kind
        }
    }

    private static func kind(of pkey: OpaquePointer) -> SignatureKeyKind? {
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA: .rsa
        case EVP_PKEY_RSA_PSS: .rsaPSS
        case EVP_PKEY_EC: .ec
        default: nil
        }
    }

    private static func privateKeyHandle(_ der: [UInt8]) throws(TesseraError) -> OpaquePointer {
        guard !der.isEmpty, der.count < 1 << 20 else { throw TesseraError(.cryptoError, "bad private key length") }
        let decoded: OpaquePointer? = der.withUnsafeBufferPointer { b in
            var p: UnsafePointer<UInt8>? = b.baseAddress
            return d2i_AutoPrivateKey(nil, &p, b.count)
        }
        guard let decoded else { throw opensslError("undecodable private key") }
        guard kind(of: decoded) != nil else {
            EVP_PKEY_free(decoded)
            throw TesseraError(.cryptoError, "unsupported private key type")
        }
        return decoded
    }

    private static func configure(_ pctx: OpaquePointer?, _ scheme: SignatureScheme) throws(TesseraError) {
        guard case .rsaPSS(_, let mgf1, let salt) = scheme else { return }
        guard let pctx,
            EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1,
            EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, mgf1.md) == 1,
            EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, Int32(clamping: salt)) == 1
        else { throw opensslError("PSS parameters") }
    }

    private static func exportPublic(_ pkey: OpaquePointer) throws(TesseraError) -> [UInt8] {
        var buf: UnsafeMutablePointer<UInt8>?
        let n = i2d_PUBKEY(pkey, &buf)
        guard n > 0, let buf else { throw opensslError("public key encode") }
        defer { CRYPTO_free(buf, #fileID, #line) }
        return Array(UnsafeBufferPointer(start: buf, count: Int(n)))
    }

    private static func groupName(_ pkey: OpaquePointer) -> String? {
        var buf = [CChar](repeating: 0, count: 80)
        var len = 0
        let ok = buf.withUnsafeMutableBufferPointer { b in
            EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, b.baseAddress, b.count, &len)
        }
        ERR_clear_error()
        guard ok == 1, len > 0, len < buf.count else { return nil }
        return String(decoding: buf[..<len].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func opensslError(_ context: String) -> TesseraError {
        var detail = ""
        let code = ERR_get_error()
        if code != 0 {
            var buf = [CChar](repeating: 0, count: 256)
            buf.withUnsafeMutableBufferPointer { ERR_error_string_n(code, $0.baseAddress, $0.count) }
            detail =
                ": " + String(decoding: buf.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        ERR_clear_error()
        return TesseraError(.cryptoError, context + detail)
    }
}
