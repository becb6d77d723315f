import TesseraCore

/// An EC2 COSE_Key (RFC 9052 §7, RFC 9053 §7.1.1): `{1: 2, 3: alg?, -1: crv, -2: x, -3: y}`. The one codec of
/// EC2 keys: WebAuthn's credential public key, the CTAP2 platform key agreement key and mdoc's device and
/// ephemeral keys are all read and written here.
public struct COSEEC2Key: Sendable, Equatable {
    /// COSE key type EC2.
    public static let keyTypeEC2: Int64 = 2

    /// The `alg` label's value, when the key has one.
    public let algorithm: Int64?
    /// COSE curve: 1 P-256, 2 P-384, 3 P-521.
    public let curve: Int64
    public let x: [UInt8]
    public let y: [UInt8]

    /// Checks the curve and the coordinate lengths (P-256: 32, P-384: 48, P-521: 66 bytes); `MALFORMED_DATA`.
    public init(algorithm: Int64?, curve: Int64, x: [UInt8], y: [UInt8]) throws(TesseraError) {
        guard let size = Self.coordinateSize(curve: curve) else {
            throw TesseraError(.malformedData, "unsupported COSE EC2 curve \(curve)")
        }
        guard x.count == size, y.count == size else {
            throw TesseraError(.malformedData, "EC2 coordinates must be \(size) bytes each for curve \(curve)")
        }
        self.algorithm = algorithm
        self.curve = curve
        self.x = x
        self.y = y
    }

    /// From an uncompressed point `04 || x || y` on P-256, P-384 or P-521; `MALFORMED_DATA` otherwise.
    public init(algorithm: Int64?, uncompressedPoint point: [UInt8]) throws(TesseraError) {
        let curve: Int64? =
            switch point.count {
            case 65: 1
            case 97: 2
            case 133: 3
            default: nil
            }
        guard let curve, point.first == 0x04 else {
            throw TesseraError(.malformedData, "not an uncompressed EC point")
        }
        let size = (point.count - 1) / 2
        try self.init(algorithm: algorithm, curve: curve, x: Array(point[1...size]), y: Array(point[(size + 1)...]))
    }

    /// Strict parsing of a decoded COSE_Key: a map with `kty` 2, an integer `alg` when present, a known `crv` and
    /// byte-string coordinates of its size; other labels are ignored. `MALFORMED_DATA`.
    public init(_ value: CBORValue) throws(TesseraError) {
        guard value.mapValue != nil else { throw TesseraError(.malformedData, "COSE key is not a CBOR map") }
        guard value[1]?.int64Value == Self.keyTypeEC2 else {
            throw TesseraError(.malformedData, "COSE key type is not EC2")
        }
        var algorithm: Int64?
        if let alg = value[3] {
            guard let a = alg.int64Value else { throw TesseraError(.malformedData, "COSE key alg is not an integer") }
            algorithm = a
        }
        guard let crv = value[-1]?.int64Value, let x = value[-2]?.bytesValue, let y = value[-3]?.bytesValue else {
            throw TesseraError(.malformedData, "COSE EC2 key lacks crv, x or y")
        }
        try self.init(algorithm: algorithm, curve: crv, x: x, y: y)
    }

    /// Parses the strict CBOR encoding of a COSE_Key (no trailing bytes).
    public init(decoding bytes: [UInt8]) throws(TesseraError) {
        try self.init(try CBORValue(decoding: bytes))
    }

    /// The key as a CBOR map, its labels in canonical order (1, 3, -1, -2, -3; `alg` only when set).
    public var value: CBORValue {
        var entries: [(key: CBORValue, value: CBORValue)] = [(1, CBORValue(Self.keyTypeEC2))]
        if let algorithm { entries.append((3, CBORValue(algorithm))) }
        entries += [(-1, CBORValue(curve)), (-2, .byteString(x)), (-3, .byteString(y))]
        return .map(entries)
    }

    /// The canonical CBOR encoding (CTAP2 / RFC 8949 §4.2.1 core deterministic order).
    public var encoded: [UInt8] { value.encodedWithDistinctKeys() }

    /// `04 || x || y`.
    public var uncompressedPoint: [UInt8] { [0x04] + x + y }

    /// The coordinate size of a COSE curve, nil for a curve other than P-256, P-384 and P-521.
    public static func coordinateSize(curve: Int64) -> Int? {
        switch curve {
        case 1: 32
        case 2: 48
        case 3: 66
        default: nil
        }
    }
}
