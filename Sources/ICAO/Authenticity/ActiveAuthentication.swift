import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// The outcome of active authentication.
public struct ActiveAuthenticationResult: Sendable, Equatable {
    public enum Status: String, Sendable { case valid, invalid, notSupported }
    public var status: Status
    public var reason: String?
    /// The hash the signature was checked with, when verified.
    public var hash: SignatureHash?
    /// The challenge sent and the chip's answer, when INTERNAL AUTHENTICATE succeeded (evidence).
    public var challenge: [UInt8]?
    public var signature: [UInt8]?

    public init(status: Status, reason: String? = nil, hash: SignatureHash? = nil) {
        self.status = status; self.reason = reason; self.hash = hash
    }

    public var json: JSONValue {
        ["status": .string(status.rawValue), "reason": reason.map(JSONValue.string) ?? .null]
    }
}

/// Active authentication (Doc 9303 Part 11 §6.1): the chip signs a random challenge with the DG15 key.
/// RSA uses ISO/IEC 9796-2 digital signature scheme 1 (message recovery), ECDSA plain r || s (BSI TR-03111).
public enum ActiveAuthentication {
    /// Sends INTERNAL AUTHENTICATE with an 8-byte random challenge and verifies the answer with DG15's key.
    /// Use a transport that applies secure messaging when the session has it. Throws only transport errors.
    public static func perform(
        over transport: some APDUTransport, dg15: DG15?, dg14: DG14? = nil,
        challenge: [UInt8]? = nil
    ) async throws(TesseraError) -> ActiveAuthenticationResult {
        guard let dg15 else { return ActiveAuthenticationResult(status: .notSupported, reason: "no DG15 public key") }
        let nonce = challenge ?? SecureRandom.bytes(8)
        let command = CommandAPDU(ins: 0x88, p1: 0, p2: 0, data: nonce, ne: 256)
        let response = try await transport.send(command)
        guard response.sw.isSuccess else {
            if response.sw == .insNotSupported || response.sw == .claNotSupported || response.sw == .wrongP1P2 {
                return ActiveAuthenticationResult(
                    status: .notSupported, reason: "INTERNAL AUTHENTICATE refused (\(response.sw))")
            }
            return ActiveAuthenticationResult(status: .invalid, reason: "INTERNAL AUTHENTICATE failed (\(response.sw))")
        }
        var result = verify(
            challenge: nonce, response: response.data, publicKeyInfo: dg15.publicKeyInfo,
            hashHint: dg14?.activeAuthenticationHash)
        result.challenge = nonce
        result.signature = response.data
        return result
    }

    /// Verifies a chip's answer to `challenge`. `hashHint` is the hash from DG14's ActiveAuthenticationInfo.
    public static func verify(
        challenge: [UInt8], response: [UInt8], publicKeyInfo: [UInt8],
        hashHint: SignatureHash? = nil
    ) -> ActiveAuthenticationResult {
        let key: PublicKeyDescription
        do { key = try Signatures.describe(publicKey: publicKeyInfo) } catch {
            return ActiveAuthenticationResult(status: .invalid, reason: "DG15 key unusable: \(error.message)")
        }
        switch key.kind {
        case .rsa, .rsaPSS:
            return verifyISO9796(
                challenge: challenge, response: response, publicKeyInfo: publicKeyInfo, hashHint: hashHint)
        case .ec:
            var order: [SignatureHash] = hashHint.map { [$0] } ?? []
            let bySize: SignatureHash =
                key.bits <= 160
                ? .sha1
                : key.bits <= 224
                    ? .sha224
                    : key.bits <= 256
                        ? .sha256
                        : key.bits <= 384 ? .sha384 : .sha512
            if hashHint == nil {
                order.append(bySize)
                order += SignatureHash.allCases.filter { $0 != bySize }
            }
            for h in order {
                if (try? Signatures.verify(response, over: challenge, publicKey: publicKeyInfo, scheme: .ecdsaPlain(h)))
                    == true
                {
                    return ActiveAuthenticationResult(status: .valid, hash: h)
                }
            }
            return ActiveAuthenticationResult(
                status: .invalid, reason: "ECDSA signature over the challenge does not verify")
        }
    }

    /// ISO/IEC 10118-3 hash identifiers used in the two-byte 9796-2 trailer (xx CC).
    static let trailerHashes: [UInt8: SignatureHash] = [
        0x33: .sha1, 0x34: .sha256, 0x35: .sha512, 0x36: .sha384, 0x38: .sha224,
    ]

    static func verifyISO9796(
        challenge: [UInt8], response: [UInt8], publicKeyInfo: [UInt8],
        hashHint: SignatureHash?
    ) -> ActiveAuthenticationResult {
        func fail(_ why: String) -> ActiveAuthenticationResult {
            ActiveAuthenticationResult(status: .invalid, reason: why)
        }
        guard var f = try? Signatures.rsaRecover(response, publicKey: publicKeyInfo) else {
            return fail("RSA operation on the response failed")
        }
        // ISO/IEC 9796-2 §B: the signer may have sent min(s, n - s); then the recovered value is n - F.
        if f.last.map({ $0 & 0x0F }) != 0x0C, let n = rsaModulus(publicKeyInfo), n.count == f.count {
            f = subtract(n, f)
        }
        let k = f.count
        guard k >= 32, let last = f.last else { return fail("response too short") }
        let hash: SignatureHash, trailer: Int
        switch last {
        case 0xBC: hash = hashHint ?? .sha1; trailer = 1
        case 0xCC:
            guard let h = trailerHashes[f[k - 2]] else { return fail("unknown hash identifier in the 9796-2 trailer") }
            hash = h; trailer = 2
        default: return fail("no ISO/IEC 9796-2 trailer in the recovered message")
        }
        guard f[0] & 0xC0 == 0x40 else { return fail("bad ISO/IEC 9796-2 header") }
        let partial = f[0] & 0x20 != 0
        // Skip padding nibbles (…B, BB…, BA) up to the border nibble A.
        var start = 1
        if f[0] & 0x0F != 0x0A {
            guard f[0] & 0x0F == 0x0B else { return fail("bad ISO/IEC 9796-2 padding") }
            while start < k, f[start] == 0xBB { start += 1 }
            guard start < k, f[start] == 0xBA else { return fail("bad ISO/IEC 9796-2 padding") }
            start += 1
        }
        let digestStart = k - trailer - hash.outputSize
        guard digestStart >= start else { return fail("recovered message too short for the hash") }
        let m1 = Array(f[start..<digestStart])
        let digest = Array(f[digestStart..<(k - trailer)])
        let message = partial ? m1 + challenge : m1
        if !partial && m1 != challenge { return fail("recovered message is not the challenge") }
        guard let computed = try? Signatures.digest(hash, message), computed == digest else {
            return fail("ISO/IEC 9796-2 hash does not match")
        }
        return ActiveAuthenticationResult(status: .valid, hash: hash)
    }

    /// Chip side (emulation, tests): answers `challenge` with the active authentication private key (DER).
    /// RSA: 9796-2 scheme 1 with partial recovery, trailer BC for SHA-1 or xx CC otherwise. EC: plain r || s.
    public static func sign(
        challenge: [UInt8], privateKey: [UInt8],
        hash: SignatureHash = .sha256
    ) throws(TesseraError) -> [UInt8] {
        let spki = try Signatures.publicKey(ofPrivateKey: privateKey)
        let key = try Signatures.describe(publicKey: spki)
        guard key.kind != .ec else {
            return try Signatures.sign(challenge, privateKey: privateKey, scheme: .ecdsaPlain(hash))
        }
        let k = (key.bits + 7) / 8
        let trailer: [UInt8] = hash == .sha1 ? [0xBC] : [trailerHashes.first { $0.value == hash }!.key, 0xCC]
        let m1Length = k - 1 - hash.outputSize - trailer.count
        guard m1Length > 0 else { throw TesseraError(.cryptoError, "RSA key too small for \(hash)") }
        let m1 = SecureRandom.bytes(m1Length)
        let block = [0x6A] + m1 + (try Signatures.digest(hash, m1 + challenge)) + trailer
        return try Signatures.rsaRawSign(block, privateKey: privateKey)
    }

    /// The RSA modulus (unsigned big-endian, no leading zeros) from an rsaEncryption SubjectPublicKeyInfo.
    static func rsaModulus(_ spki: [UInt8]) -> [UInt8]? {
        guard let seq = try? TLV.parse(spki), let parts = try? seq.children(), parts.count == 2,
            parts[1].tag == ASN1.bitString, parts[1].value.first == 0,
            let key = try? TLV.parse(Array(parts[1].value.dropFirst())), let fields = try? key.children(),
            fields.count == 2, fields[0].tag == ASN1.integer
        else { return nil }
        return Array(fields[0].value.drop(while: { $0 == 0 }))
    }

    /// a - b for equal-length big-endian numbers with a ≥ b.
    static func subtract(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: a.count)
        var borrow = 0
        for i in stride(from: a.count - 1, through: 0, by: -1) {
            var d = Int(a[i]) - Int(b[i]) - borrow
            borrow = d < 0 ? 1 : 0
            if d < 0 { d += 256 }
            out[i] = UInt8(d)
        }
        return out
    }
}
