import Crypto
import TesseraCore

/// What an authenticator signs for WebAuthn assertions and packed attestation (WebAuthn §6.3.3, §8.2).
public enum WebAuthnSigning {
    /// authenticatorData ‖ SHA-256(clientDataJSON).
    public static func dataToSign(authenticatorData: [UInt8], clientDataJSON: [UInt8]) -> [UInt8] {
        authenticatorData + Array(SHA256.hash(data: clientDataJSON))
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

/// Conversions between PKCS#11's raw ECDSA signatures (r ‖ s) and the DER form WebAuthn requires.
public enum ECDSASignature {
    /// DER `SEQUENCE { INTEGER r, INTEGER s }` from raw `r ‖ s` (two equal halves, e.g. 64 bytes for P-256).
    /// Throws `INVALID_INPUT` for an odd or empty input, or a zero component.
    public static func derFromRaw(_ rs: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard !rs.isEmpty, rs.count % 2 == 0, rs.count <= 2 * 66 else {
            throw .invalidInput("raw ECDSA signature must be two equal halves of at most 66 bytes")
        }
        let half = rs.count / 2
        var content: [UInt8] = []
        for component in [rs[..<half], rs[half...]] {
            let magnitude = component.drop(while: { $0 == 0 })
            guard let first = magnitude.first else { throw .invalidInput("ECDSA signature component is zero") }
            let integer = (first & 0x80 != 0 ? [0x00] : []) + Array(magnitude)
            content += [0x02, UInt8(integer.count)] + integer
        }
        return [0x30] + derLength(content.count) + content
    }

    /// Raw `r ‖ s`, each left-padded to `componentLength` bytes, from a strict DER ECDSA signature.
    /// Throws `MALFORMED_DATA` on anything but minimal DER with two positive integers that fit.
    public static func rawFromDER(_ der: [UInt8], componentLength: Int = 32) throws(TesseraError) -> [UInt8] {
        func malformed(_ what: String) -> TesseraError {
            TesseraError(.malformedData, "DER ECDSA signature: \(what)")
        }
        guard der.count >= 2, der[0] == 0x30 else { throw malformed("not a SEQUENCE") }
        var position = 2
        var length = Int(der[1])
        if length == 0x81 {
            guard der.count >= 3, der[2] >= 0x80 else { throw malformed("non-minimal length") }
            length = Int(der[2])
            position = 3
        } else if length > 0x7F {
            throw malformed("unsupported length form")
        }
        guard der.count - position == length else { throw malformed("length does not match the input") }
        var raw: [UInt8] = []
        for _ in 0..<2 {
            guard der.count - position >= 2, der[position] == 0x02 else { throw malformed("expected an INTEGER") }
            let intLength = Int(der[position + 1])
            position += 2
            guard intLength >= 1, intLength < 0x80, der.count - position >= intLength else {
                throw malformed("bad INTEGER length")
            }
            let integer = der[position..<position + intLength]
            position += intLength
            guard integer.first! & 0x80 == 0 else { throw malformed("negative INTEGER") }
            if integer.count > 1 && integer.first == 0 && integer[integer.startIndex + 1] & 0x80 == 0 {
                throw malformed("non-minimal INTEGER")
            }
            let magnitude = integer.drop(while: { $0 == 0 })
            guard !magnitude.isEmpty else { throw malformed("zero INTEGER") }
            guard magnitude.count <= componentLength else { throw malformed("INTEGER longer than \(componentLength) bytes") }
            raw += [UInt8](repeating: 0, count: componentLength - magnitude.count) + magnitude
        }
        guard position == der.count else { throw malformed("trailing bytes") }
        return raw
    }

    static func derLength(_ length: Int) -> [UInt8] {
        length < 0x80 ? [UInt8(length)] : [0x81, UInt8(length)]
    }
}
