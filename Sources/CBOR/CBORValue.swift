import TesseraCore

/// A CBOR simple value (major type 7) other than false, true, null and undefined: 0–19 or 32–255.
public struct CBORSimpleValue: Sendable, Hashable {
    public let rawValue: UInt8

    /// Nil for 20–23 (use `.bool`, `.null`, `.undefined`) and the reserved 24–31.
    public init?(_ rawValue: UInt8) {
        guard rawValue < 20 || rawValue >= 32 else { return nil }
        self.rawValue = rawValue
    }
}

/// One CBOR data item (RFC 8949 §3).
///
/// Equality is structural and order-sensitive for maps: text strings compare by their UTF-8 bytes,
/// floats by bit pattern and width (so `NaN == NaN`, and `.float16` never equals `.float64`).
public enum CBORValue: Sendable {
    case unsigned(UInt64)
    /// The integer `-1 - n`, covering -1 … -2^64.
    case negative(UInt64)
    case byteString([UInt8])
    case textString(String)
    case array([CBORValue])
    /// Key/value pairs in the order given (the encoder sorts them canonically).
    case map([(key: CBORValue, value: CBORValue)])
    indirect case tagged(UInt64, CBORValue)
    case simple(CBORSimpleValue)
    case bool(Bool)
    case null
    case undefined
    /// An IEEE 754 binary16 value, as its bit pattern.
    case float16(UInt16)
    case float32(Float)
    case float64(Double)
}

extension CBORValue {
    /// An integer as `.unsigned` or `.negative`.
    public init<T: BinaryInteger>(_ value: T) {
        if value >= 0 {
            self = .unsigned(UInt64(value))
        } else {
            self = .negative(UInt64(-1 - value))
        }
    }

    /// The shortest float (half, single or double) that represents `value` exactly.
    public static func float(_ value: Double) -> CBORValue {
        if let half = HalfFloat.exactBits(value) { return .float16(half) }
        if let single = HalfFloat.exactSingle(value) { return .float32(single) }
        return .float64(value)
    }

    /// The value of an integer item when it fits in `Int64`.
    public var int64Value: Int64? {
        switch self {
        case .unsigned(let n): return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negative(let n): return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: return nil
        }
    }

    /// The value of an integer item when it fits in `Int`.
    public var intValue: Int? { int64Value.flatMap { Int(exactly: $0) } }

    public var bytesValue: [UInt8]? { if case .byteString(let b) = self { return b }; return nil }
    public var textValue: String? { if case .textString(let s) = self { return s }; return nil }
    public var arrayValue: [CBORValue]? { if case .array(let a) = self { return a }; return nil }
    public var mapValue: [(key: CBORValue, value: CBORValue)]? { if case .map(let m) = self { return m }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var isNull: Bool { if case .null = self { return true }; return false }

    /// The numeric value of a float item of any width.
    public var doubleValue: Double? {
        switch self {
        case .float16(let bits): return HalfFloat.toDouble(bits)
        case .float32(let f): return Double(f)
        case .float64(let d): return d
        default: return nil
        }
    }

    /// For a map: the value of the first entry whose key equals `key`; nil otherwise.
    public subscript(key: CBORValue) -> CBORValue? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first(where: { $0.key == key })?.value
    }
}

extension CBORValue: Equatable {
    public static func == (lhs: CBORValue, rhs: CBORValue) -> Bool {
        switch (lhs, rhs) {
        case (.unsigned(let a), .unsigned(let b)): return a == b
        case (.negative(let a), .negative(let b)): return a == b
        case (.byteString(let a), .byteString(let b)): return a == b
        case (.textString(let a), .textString(let b)): return a.utf8.elementsEqual(b.utf8)
        case (.array(let a), .array(let b)): return a == b
        case (.map(let a), .map(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.tagged(let ta, let va), .tagged(let tb, let vb)): return ta == tb && va == vb
        case (.simple(let a), .simple(let b)): return a == b
        case (.bool(let a), .bool(let b)): return a == b
        case (.null, .null), (.undefined, .undefined): return true
        case (.float16(let a), .float16(let b)): return a == b
        case (.float32(let a), .float32(let b)): return a.bitPattern == b.bitPattern
        case (.float64(let a), .float64(let b)): return a.bitPattern == b.bitPattern
        default: return false
        }
    }
}

extension CBORValue: Hashable {
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .unsigned(let n): hasher.combine(0); hasher.combine(n)
        case .negative(let n): hasher.combine(1); hasher.combine(n)
        case .byteString(let b): hasher.combine(2); hasher.combine(b)
        case .textString(let s):
            hasher.combine(3)
            hasher.combine(s.utf8.count)
            for byte in s.utf8 { hasher.combine(byte) }
        case .array(let a): hasher.combine(4); hasher.combine(a)
        case .map(let m):
            hasher.combine(5)
            hasher.combine(m.count)
            for pair in m { hasher.combine(pair.key); hasher.combine(pair.value) }
        case .tagged(let tag, let value): hasher.combine(6); hasher.combine(tag); hasher.combine(value)
        case .simple(let s): hasher.combine(7); hasher.combine(s)
        case .bool(let b): hasher.combine(8); hasher.combine(b)
        case .null: hasher.combine(9)
        case .undefined: hasher.combine(10)
        case .float16(let bits): hasher.combine(11); hasher.combine(bits)
        case .float32(let f): hasher.combine(12); hasher.combine(f.bitPattern)
        case .float64(let d): hasher.combine(13); hasher.combine(d.bitPattern)
        }
    }
}

extension CBORValue: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(integerLiteral value: Int64) { self.init(value) }
    public init(stringLiteral value: String) { self = .textString(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// The shortest exact float width, as `CBORValue.float(_:)`.
    public init(floatLiteral value: Double) { self = .float(value) }
    public init(arrayLiteral elements: CBORValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (CBORValue, CBORValue)...) {
        self = .map(elements.map { (key: $0.0, value: $0.1) })
    }
}

/// IEEE 754 binary16 conversions done on bit patterns, so NaN payloads survive and no `Float16` type is needed.
enum HalfFloat {
    static func toDouble(_ bits: UInt16) -> Double {
        let sign: UInt64 = UInt64(bits >> 15) << 63
        let exponent = Int((bits >> 10) & 0x1F)
        let mantissa = UInt64(bits & 0x3FF)
        if exponent == 0x1F {
            return Double(bitPattern: sign | (0x7FF << 52) | (mantissa << 42))
        }
        let magnitude: Double
        if exponent == 0 {
            magnitude = Double(mantissa) * 0x1p-24
        } else {
            magnitude = Double(mantissa + 1024) * Double(sign: .plus, exponent: exponent - 25, significand: 1)
        }
        return sign == 0 ? magnitude : -magnitude
    }

    /// The binary16 bit pattern of `value` when it is exactly representable, NaN payload and quiet bit included.
    static func exactBits(_ value: Float) -> UInt16? {
        guard value.isNaN else { return exactBits(Double(value)) }
        let bits = value.bitPattern
        let mantissa = bits & 0x007F_FFFF
        guard mantissa & 0x1FFF == 0 else { return nil }
        return UInt16(bits >> 16 & 0x8000) | 0x7C00 | UInt16(mantissa >> 13)
    }

    /// `value` as a binary32 when exactly representable, NaN payload and quiet bit included.
    static func exactSingle(_ value: Double) -> Float? {
        if value.isNaN {
            let bits = value.bitPattern
            let mantissa = bits & 0x000F_FFFF_FFFF_FFFF
            guard mantissa & 0x1FFF_FFFF == 0 else { return nil }
            return Float(bitPattern: UInt32(bits >> 32 & 0x8000_0000) | 0x7F80_0000 | UInt32(mantissa >> 29))
        }
        let single = Float(value)
        return Double(single).bitPattern == value.bitPattern ? single : nil
    }

    /// The binary16 bit pattern of `value` when it is exactly representable, NaN payload included.
    static func exactBits(_ value: Double) -> UInt16? {
        let sign: UInt16 = value.sign == .minus ? 0x8000 : 0
        if value.isNaN {
            let mantissa = value.bitPattern & 0x000F_FFFF_FFFF_FFFF
            guard mantissa & ((1 << 42) - 1) == 0 else { return nil }
            return sign | 0x7C00 | UInt16(mantissa >> 42)
        }
        if value.isInfinite { return sign | 0x7C00 }
        if value == 0 { return sign }
        let magnitude = value.magnitude
        let exponent = Int(magnitude.exponent)
        if exponent > 15 { return nil }
        if exponent >= -14 {
            let scaled = magnitude * Double(sign: .plus, exponent: 10 - exponent, significand: 1)
            guard scaled == scaled.rounded(.towardZero), scaled >= 1024, scaled < 2048 else { return nil }
            return sign | UInt16(exponent + 15) << 10 | (UInt16(scaled) - 1024)
        }
        let scaled = magnitude * 0x1p24
        guard scaled == scaled.rounded(.towardZero), scaled >= 1, scaled < 1024 else { return nil }
        return sign | UInt16(scaled)
    }
}
