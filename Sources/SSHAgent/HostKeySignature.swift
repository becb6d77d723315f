import Crypto
import FoundationEssentials
import TesseraCore
import _CryptoExtras

/// Verification of an SSH host key's signature (RFC 8709 Ed25519, RFC 5656 ECDSA on NIST P-256/384/521, RFC 8332
/// RSA with SHA-256/512), as `session-bind@openssh.com` carries it over the session identifier.
public enum HostKeySignature {
    /// Whether `signature` (an SSH signature blob) is `hostKey`'s (a key blob) over `data`. Unknown key types,
    /// SHA-1 RSA (`ssh-rsa`) and undecodable blobs are false.
    public static func isValid(_ signature: [UInt8], hostKey: [UInt8], over data: [UInt8]) -> Bool {
        (try? verify(signature, hostKey: hostKey, over: data)) ?? false
    }

    private static func verify(_ signature: [UInt8], hostKey: [UInt8], over data: [UInt8]) throws -> Bool {
        var key = SSHReader(hostKey)
        var sig = SSHReader(signature)
        let keyType = try key.text()
        let sigType = try sig.text()
        let body = try sig.string()
        guard sig.isAtEnd else { return false }
        switch keyType {
        case "ssh-ed25519":
            let point = try key.string()
            guard key.isAtEnd, sigType == keyType else { return false }
            return try Curve25519.Signing.PublicKey(rawRepresentation: point).isValidSignature(body, for: data)
        case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
            _ = try key.text()
            let point = try key.string()
            guard key.isAtEnd, sigType == keyType else { return false }
            var inner = SSHReader(body)
            let r = try inner.unsignedMPInt(), s = try inner.unsignedMPInt()
            guard inner.isAtEnd else { return false }
            switch keyType {
            case "ecdsa-sha2-nistp256":
                guard let raw = rawSignature(r, s, length: 32) else { return false }
                return try P256.Signing.PublicKey(x963Representation: point)
                    .isValidSignature(P256.Signing.ECDSASignature(rawRepresentation: raw), for: data)
            case "ecdsa-sha2-nistp384":
                guard let raw = rawSignature(r, s, length: 48) else { return false }
                return try P384.Signing.PublicKey(x963Representation: point)
                    .isValidSignature(P384.Signing.ECDSASignature(rawRepresentation: raw), for: data)
            default:
                guard let raw = rawSignature(r, s, length: 66) else { return false }
                return try P521.Signing.PublicKey(x963Representation: point)
                    .isValidSignature(P521.Signing.ECDSASignature(rawRepresentation: raw), for: data)
            }
        case "ssh-rsa":
            let e = try key.unsignedMPInt(), n = try key.unsignedMPInt()
            guard key.isAtEnd else { return false }
            let publicKey = try _RSA.Signing.PublicKey(n: n, e: e)
            let rsaSignature = _RSA.Signing.RSASignature(rawRepresentation: body)
            switch sigType {
            case "rsa-sha2-256":
                return publicKey.isValidSignature(
                    rsaSignature, for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
            case "rsa-sha2-512":
                return publicKey.isValidSignature(
                    rsaSignature, for: SHA512.hash(data: data), padding: .insecurePKCS1v1_5)
            default: return false
            }
        default:
            return false
        }
    }

    private static func rawSignature(_ r: [UInt8], _ s: [UInt8], length: Int) -> [UInt8]? {
        guard r.count <= length, s.count <= length else { return nil }
        return [UInt8](repeating: 0, count: length - r.count) + r + [UInt8](repeating: 0, count: length - s.count) + s
    }
}
