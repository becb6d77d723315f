import CBOR
import Crypto
import TesseraCore

/// A COSE_Key holding an EC2 public key (RFC 9052 §7, RFC 9053 §7.1.1), as WebAuthn's credentialPublicKey.
public struct COSEKey: Sendable, Equatable {
    /// COSE key type EC2.
    public static let keyTypeEC2: Int64 = 2
    /// COSE algorithm ES256 (ECDSA with SHA-256).
    public static let algorithmES256: Int64 = -7
    /// COSE curve P-256.
    public static let curveP256: Int64 = 1

    public let algorithm: Int64
    public let curve: Int64
    public let x: [UInt8]
    public let y: [UInt8]

    /// Validates coordinate lengths for the curve (P-256: 32, P-384: 48, P-521: 66 bytes).
    public init(algorithm: Int64, curve: Int64, x: [UInt8], y: [UInt8]) throws(TesseraError) {
        guard let size = Self.coordinateSize(curve: curve) else {
            throw .invalidInput("unsupported COSE EC2 curve \(curve)")
        }
        guard x.count == size, y.count == size else {
            throw .invalidInput("EC2 coordinates must be \(size) bytes each for curve \(curve)")
        }
        self.algorithm = algorithm
        self.curve = curve
        self.x = x
        self.y = y
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
        let value = try CBORValue(decoding: bytes)
        guard value.mapValue != nil else { throw TesseraError(.malformedData, "COSE key is not a CBOR map") }
        guard value[1]?.int64Value == Self.keyTypeEC2 else {
            throw TesseraError(.malformedData, "COSE key type is not EC2")
        }
        guard let alg = value[3]?.int64Value, let crv = value[-1]?.int64Value,
            let x = value[-2]?.bytesValue, let y = value[-3]?.bytesValue
        else {
            throw TesseraError(.malformedData, "COSE EC2 key lacks alg, crv, x or y")
        }
        do {
            try self.init(algorithm: alg, curve: crv, x: x, y: y)
        } catch {
            throw TesseraError(.malformedData, "COSE EC2 key: \(error.message)")
        }
    }

    /// Canonical CTAP2 CBOR encoding.
    public var encoded: [UInt8] {
        let map: CBORValue = [
            1: CBORValue(Self.keyTypeEC2), 3: CBORValue(algorithm), -1: CBORValue(curve),
            -2: .byteString(x), -3: .byteString(y),
        ]
        return map.encodedWithDistinctKeys()
    }

    /// The key as a swift-crypto P-256 verifying key; throws `CRYPTO_ERROR` for other curves or off-curve points.
    public func p256PublicKey() throws(TesseraError) -> P256.Signing.PublicKey {
        guard curve == Self.curveP256 else { throw TesseraError(.cryptoError, "COSE key is not on P-256") }
        do {
            return try P256.Signing.PublicKey(rawRepresentation: x + y)
        } catch {
            throw TesseraError(.cryptoError, "COSE key is not a valid P-256 point")
        }
    }

    static func coordinateSize(curve: Int64) -> Int? {
        switch curve {
        case 1: return 32
        case 2: return 48
        case 3: return 66
        default: return nil
        }
    }
}
