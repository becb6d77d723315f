import CBOR
import Crypto
import TesseraCore

/// A COSE_Key holding an EC2 public key (RFC 9052 §7, RFC 9053 §7.1.1), as WebAuthn's credentialPublicKey.
public struct COSEKey: Sendable, Equatable {
    /// COSE key type EC2.
    public static let keyTypeEC2: Int64 = COSEEC2Key.keyTypeEC2
    /// COSE algorithm ES256 (ECDSA with SHA-256).
    public static let algorithmES256: Int64 = -7
    /// COSE curve P-256.
    public static let curveP256: Int64 = 1

    public let algorithm: Int64
    /// The key in the one COSE EC2 codec (`CBOR`'s `COSEEC2Key`), with `algorithm` set.
    public let key: COSEEC2Key
    public var curve: Int64 { key.curve }
    public var x: [UInt8] { key.x }
    public var y: [UInt8] { key.y }

    /// Validates coordinate lengths for the curve (P-256: 32, P-384: 48, P-521: 66 bytes).
    public init(algorithm: Int64, curve: Int64, x: [UInt8], y: [UInt8]) throws(TesseraError) {
        do {
            key = try COSEEC2Key(algorithm: algorithm, curve: curve, x: x, y: y)
        } catch {
            throw .invalidInput(error.message)
        }
        self.algorithm = algorithm
    }

    /// Canonical CBOR of `{1: 2, 3: -7, -1: 1, -2: x, -3: y}`; `x` and `y` must be 32 bytes each.
    public static func ec2P256(x: [UInt8], y: [UInt8]) throws(TesseraError) -> [UInt8] {
        try COSEKey(algorithm: algorithmES256, curve: curveP256, x: x, y: y).encoded
    }

    /// As `ec2P256(x:y:)`, from an uncompressed point `04 || x || y`, optionally wrapped in a
    /// DER OCTET STRING (`04 41 04 …`) as PKCS#11 returns `CKA_EC_POINT`.
    public static func ec2P256(ecPoint: [UInt8]) throws(TesseraError) -> [UInt8] {
        var point = ecPoint[...]
        if point.count == 67, point.starts(with: [0x04, 0x41]) { point = point.dropFirst(2) }
        guard point.count == 65, point.first == 0x04 else {
            throw .invalidInput("expected an uncompressed P-256 point (65 bytes starting 04)")
        }
        return try ec2P256(x: Array(point.dropFirst().prefix(32)), y: Array(point.suffix(32)))
    }

    /// Parses a canonical CBOR COSE_Key; it must be EC2 with `alg`, `crv`, `x` and `y`.
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let key = try COSEEC2Key(decoding: bytes)
        guard let alg = key.algorithm else { throw TesseraError(.malformedData, "COSE EC2 key lacks alg") }
        self.algorithm = alg
        self.key = key
    }

    /// Canonical CTAP2 CBOR encoding.
    public var encoded: [UInt8] { key.encoded }

    /// The key as a swift-crypto P-256 verifying key; throws `CRYPTO_ERROR` for other curves or off-curve points.
    public func p256PublicKey() throws(TesseraError) -> P256.Signing.PublicKey {
        guard curve == Self.curveP256 else { throw TesseraError(.cryptoError, "COSE key is not on P-256") }
        do {
            return try P256.Signing.PublicKey(rawRepresentation: x + y)
        } catch {
            throw TesseraError(.cryptoError, "COSE key is not a valid P-256 point")
        }
    }
}
