import CBOR
import Crypto
import CryptoPrimitives
import TesseraCore

/// PIN/UV auth protocols 1 and 2 (CTAP 2.1 §6.5.6, §6.5.7), the authenticator's side.
public enum PINUVAuthProtocol: Int, Sendable, CaseIterable {
    /// Shared secret SHA-256(Z.x); AES-256-CBC with a zero IV; HMAC-SHA-256 truncated to 16 bytes.
    case one = 1
    /// HKDF-SHA-256 into an HMAC key ‖ an AES key; AES-256-CBC with a random IV prepended; full HMAC-SHA-256.
    case two = 2

    /// The shared secret from the ECDH x-coordinate `z` (32 bytes for protocol 1, 64 for protocol 2).
    public func kdf(_ z: [UInt8]) -> [UInt8] {
        switch self {
        case .one:
            return MessageDigest.sha256(z)
        case .two:
            let salt = [UInt8](repeating: 0, count: 32)
            func derive(_ info: String) -> [UInt8] {
                HKDF<SHA256>.deriveKey(
                    inputKeyMaterial: SymmetricKey(data: z), salt: salt, info: Array(info.utf8), outputByteCount: 32
                ).withUnsafeBytes { Array($0) }
            }
            return derive("CTAP2 HMAC key") + derive("CTAP2 AES key")
        }
    }

    /// Encrypts whole blocks under `key` (a shared secret): protocol 2 prepends its random IV.
    public func encrypt(key: [UInt8], _ plaintext: [UInt8], iv: [UInt8]? = nil) throws(CTAP2Error) -> [UInt8] {
        do throws(TesseraError) {
            switch self {
            case .one:
                return try AESCipher.encryptCBC(key: key, data: plaintext)
            case .two:
                guard key.count == 64 else { throw TesseraError(.cryptoError, "protocol 2 shared secret is 64 bytes") }
                let iv = iv ?? SecureRandom.bytes(16)
                return try iv + AESCipher.encryptCBC(key: Array(key[32...]), iv: iv, data: plaintext)
            }
        } catch {
            throw CTAP2Error(.other, "encrypt: \(error.message)")
        }
    }

    /// Decrypts `ciphertext` under `key` (a shared secret); INVALID_PARAMETER when its length is not whole blocks.
    public func decrypt(key: [UInt8], _ ciphertext: [UInt8]) throws(CTAP2Error) -> [UInt8] {
        do throws(TesseraError) {
            switch self {
            case .one:
                guard !ciphertext.isEmpty, ciphertext.count % 16 == 0 else { break }
                return try AESCipher.decryptCBC(key: key, data: ciphertext)
            case .two:
                guard key.count == 64, ciphertext.count >= 32, ciphertext.count % 16 == 0 else { break }
                return try AESCipher.decryptCBC(
                    key: Array(key[32...]), iv: Array(ciphertext[..<16]), data: Array(ciphertext[16...]))
            }
        } catch {
            throw CTAP2Error(.other, "decrypt: \(error.message)")
        }
        throw CTAP2Error(.invalidParameter, "ciphertext of \(ciphertext.count) bytes is not whole AES blocks")
    }

    /// The MAC of `message` under `key` (a shared secret, or a pinUvAuthToken): 16 bytes for protocol 1,
    /// 32 for protocol 2 (which uses the HMAC half of a 64-byte shared secret).
    public func authenticate(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        switch self {
        case .one:
            return Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)).prefix(16))
        case .two:
            let k = key.count > 32 ? Array(key[..<32]) : key
            return Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: k)))
        }
    }

    /// Whether `signature` is `message`'s MAC under `key` (constant time).
    public func verify(key: [UInt8], _ message: [UInt8], signature: [UInt8]) -> Bool {
        ConstantTime.equal(authenticate(key: key, message), signature)
    }
}

/// The authenticator's key agreement key (P-256, COSE alg -25 ECDH-ES+HKDF-256): made at start-up and made again
/// after a wrong PIN (§6.5.5.7).
public struct PINKeyAgreement: Sendable {
    private let key: P256.KeyAgreement.PrivateKey

    public init() { key = P256.KeyAgreement.PrivateKey() }

    /// A key agreement key from a raw 32-byte scalar (tests with fixed vectors).
    public init(rawPrivateKey: [UInt8]) throws(CTAP2Error) {
        do { key = try P256.KeyAgreement.PrivateKey(rawRepresentation: rawPrivateKey) } catch {
            throw CTAP2Error(.invalidParameter, "not a P-256 private key")
        }
    }

    /// The public key as getKeyAgreement returns it (COSE_Key: kty EC2, alg -25, crv P-256, x, y).
    public var coseKey: CBORValue {
        // A P-256 x9.63 point is always 65 bytes: the codec has nothing to refuse.
        (try? COSEEC2Key(algorithm: -25, uncompressedPoint: Array(key.publicKey.x963Representation)))?.value ?? .null
    }

    /// ECDH with the platform's COSE_Key, then the protocol's KDF; INVALID_PARAMETER for a key that is not a
    /// P-256 point.
    public func sharedSecret(with peer: CBORValue, protocol p: PINUVAuthProtocol) throws(CTAP2Error) -> [UInt8] {
        guard let peerKey = try? COSEEC2Key(peer), peerKey.curve == 1 else {
            throw CTAP2Error(.invalidParameter, "keyAgreement is not a P-256 COSE_Key")
        }
        do {
            let publicKey = try P256.KeyAgreement.PublicKey(x963Representation: peerKey.uncompressedPoint)
            let z = try key.sharedSecretFromKeyAgreement(with: publicKey).withUnsafeBytes { Array($0) }
            return p.kdf(z)
        } catch {
            throw CTAP2Error(.invalidParameter, "keyAgreement is not a point on P-256")
        }
    }
}
