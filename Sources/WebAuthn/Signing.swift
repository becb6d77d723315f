import Crypto
import CryptoPrimitives
import TesseraCore

/// What an authenticator signs for WebAuthn assertions and packed attestation (WebAuthn §6.3.3, §8.2).
public enum WebAuthnSigning {
    /// authenticatorData ‖ SHA-256(clientDataJSON).
    public static func dataToSign(authenticatorData: [UInt8], clientDataJSON: [UInt8]) -> [UInt8] {
        authenticatorData + MessageDigest.sha256(clientDataJSON)
    }

    /// authenticatorData ‖ clientDataHash, when only the hash is known (CTAP2 requests).
    public static func dataToSign(authenticatorData: [UInt8], clientDataHash: [UInt8]) -> [UInt8] {
        authenticatorData + clientDataHash
    }

    /// Verifies an ES256 DER signature over `data` (hashed with SHA-256) with a P-256 COSE key.
    public static func verifyES256(signatureDER: [UInt8], data: [UInt8], publicKey: COSEKey) -> Bool {
        guard publicKey.algorithm == COSEKey.algorithmES256,
            let key = try? publicKey.p256PublicKey(),
            let signature = try? P256.Signing.ECDSASignature(derRepresentation: signatureDER)
        else { return false }
        return key.isValidSignature(signature, for: data)
    }
}
