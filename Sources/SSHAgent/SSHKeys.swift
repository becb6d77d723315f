import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A public key in SSH form (RFC 5656 / RFC 4253 key blobs).
public enum SSHPublicKey: Sendable, Hashable {
    /// `ecdsa-sha2-nistp256` with its 65-byte uncompressed point.
    case ecdsaP256(point: [UInt8])
    /// `ssh-rsa` with public exponent and modulus (unsigned big-endian).
    case rsa(exponent: [UInt8], modulus: [UInt8])

    public var algorithm: String {
        switch self {
        case .ecdsaP256: "ecdsa-sha2-nistp256"
        case .rsa: "ssh-rsa"
        }
    }

    /// The wire blob (what REQUEST_IDENTITIES returns and authorized_keys holds in base64).
    public var blob: [UInt8] {
        var w = SSHWriter()
        switch self {
        case .ecdsaP256(let point):
            w.string("ecdsa-sha2-nistp256")
            w.string("nistp256")
            w.string(point)
        case .rsa(let e, let n):
            w.string("ssh-rsa")
            w.mpint(unsigned: e)
            w.mpint(unsigned: n)
        }
        return w.bytes
    }

    /// One `authorized_keys` line: algorithm, base64 blob and the comment (when not empty).
    public func authorizedKeysLine(comment: String) -> String {
        let base = algorithm + " " + Data(blob).base64EncodedString()
        let clean = comment.filter { !$0.isNewline }
        return clean.isEmpty ? base : base + " " + clean
    }

    /// Parses a key blob; throws `MALFORMED_DATA` or `UNSUPPORTED_PROTOCOL` for other key types.
    public init(blob: [UInt8]) throws(TesseraError) {
        var r = SSHReader(blob)
        let type = try r.text()
        switch type {
        case "ecdsa-sha2-nistp256":
            guard try r.text() == "nistp256" else {
                throw TesseraError(.malformedData, "curve name does not match nistp256")
            }
            let point = try r.string()
            guard point.count == 65, point[0] == 4 else {
                throw TesseraError(.malformedData, "not an uncompressed P-256 point")
            }
            self = .ecdsaP256(point: point)
        case "ssh-rsa":
            self = .rsa(exponent: try r.unsignedMPInt(), modulus: try r.unsignedMPInt())
        default:
            throw TesseraError(.unsupportedProtocol, "SSH key type \(type) is not supported")
        }
        guard r.isAtEnd else { throw TesseraError(.malformedData, "trailing bytes after the SSH key blob") }
    }

    /// Parses the key of an `authorized_keys` / `.pub` line (`TYPE BASE64 [comment]`).
    public init(authorizedKeysLine line: String) throws(TesseraError) {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 2, let blob = Data(base64Encoded: String(fields[1])) else {
            throw TesseraError(.malformedData, "not an authorized_keys line")
        }
        try self.init(blob: Array(blob))
        guard algorithm == fields[0] else { throw TesseraError(.malformedData, "key type does not match the blob") }
    }
}

/// SSH signature blobs (RFC 5656 §3.1.2, RFC 8332).
public enum SSHSignature {
    /// `ecdsa-sha2-nistp256` signature from raw `r || s` (64 bytes).
    public static func ecdsaP256(raw: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard raw.count == 64 else { throw TesseraError(.cryptoError, "ECDSA P-256 signature must be 64 bytes r||s") }
        var inner = SSHWriter(capacity: 74)
        inner.mpint(unsigned: Array(raw[0..<32]))
        inner.mpint(unsigned: Array(raw[32..<64]))
        var w = SSHWriter(capacity: 27 + 4 + inner.bytes.count)
        w.string("ecdsa-sha2-nistp256")
        w.string(inner.bytes)
        return w.bytes
    }

    /// RSA PKCS#1 v1.5 signature under `algorithm` (`rsa-sha2-256`, `rsa-sha2-512` or `ssh-rsa`).
    public static func rsa(algorithm: String, signature: [UInt8]) -> [UInt8] {
        var w = SSHWriter(capacity: 8 + algorithm.utf8.count + signature.count)
        w.string(algorithm)
        w.string(signature)
        return w.bytes
    }

    /// Parses a signature blob into its algorithm name and, for ECDSA, raw `r || s`.
    public static func parse(_ blob: [UInt8]) throws(TesseraError) -> (algorithm: String, signature: [UInt8]) {
        var r = SSHReader(blob)
        let algorithm = try r.text()
        let body = try r.string()
        guard r.isAtEnd else { throw TesseraError(.malformedData, "trailing bytes after the SSH signature") }
        guard algorithm == "ecdsa-sha2-nistp256" else { return (algorithm, body) }
        var inner = SSHReader(body)
        let rr = try inner.unsignedMPInt(), ss = try inner.unsignedMPInt()
        guard inner.isAtEnd, rr.count <= 32, ss.count <= 32 else {
            throw TesseraError(.malformedData, "bad ECDSA signature blob")
        }
        return (
            algorithm,
            [UInt8](repeating: 0, count: 32 - rr.count) + rr + [UInt8](repeating: 0, count: 32 - ss.count) + ss
        )
    }
}
