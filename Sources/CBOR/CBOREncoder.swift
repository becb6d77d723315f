import TesseraCore

/// How map keys are ordered in canonical output, compared on each key's canonical encoding.
public enum CBORMapKeyOrder: Sendable {
    /// CTAP2 §8 canonical CBOR: lower major type first, then shorter encoding, then bytewise.
    case ctap2
    /// RFC 7049 §3.9 "Canonical CBOR" (RFC 8949 §4.2.3): shorter encoding first, then bytewise.
    case lengthFirst
    /// RFC 8949 §4.2.1 core deterministic encoding: bytewise lexicographic.
    case bytewise

    /// Whether encoded key `a` sorts strictly before encoded key `b`.
    func precedes(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        switch self {
        case .ctap2:
            let majorA = a.first.map { $0 >> 5 } ?? 0
            let majorB = b.first.map { $0 >> 5 } ?? 0
            if majorA != majorB { return majorA < majorB }
            if a.count != b.count { return a.count < b.count }
            return a.lexicographicallyPrecedes(b)
        case .lengthFirst:
            if a.count != b.count { return a.count < b.count }
            return a.lexicographicallyPrecedes(b)
        case .bytewise:
            return a.lexicographicallyPrecedes(b)
        }
    }
}

extension CBORValue {
    /// Canonical encoding: shortest heads, definite lengths, sorted map keys; floats keep their width.
    ///
    /// Throws `INVALID_INPUT` when a map holds two equal keys, which no canonical encoding allows.
    public func encoded(keyOrder: CBORMapKeyOrder = .ctap2) throws(TesseraError) -> [UInt8] {
        var out: [UInt8] = []
        try CBOREncoding.append(self, to: &out, order: keyOrder, rejectDuplicates: true)
        return out
    }

    /// Canonical encoding for values whose map keys are known to be distinct (fixed protocol structures).
    package func encodedWithDistinctKeys(keyOrder: CBORMapKeyOrder = .ctap2) -> [UInt8] {
        var out: [UInt8] = []
        do {
            try CBOREncoding.append(self, to: &out, order: keyOrder, rejectDuplicates: false)
        } catch {}
        return out
    }

    /// Encoding with shortest heads and definite lengths that keeps every map's pairs in the order given
    /// (protocols such as ISO/IEC 18013-5 sign bytes whose maps are not in canonical order).
    public func encodedPreservingMapOrder() -> [UInt8] {
        var out: [UInt8] = []
        do {
            try CBOREncoding.append(self, to: &out, order: .ctap2, rejectDuplicates: false, preserveMapOrder: true)
        } catch {}
        return out
    }
}

enum CBOREncoding {
    static func appendHead(major: UInt8, argument: UInt64, to out: inout [UInt8]) {
        let m = major << 5
        switch argument {
        case 0..<24:
            out.append(m | UInt8(argument))
        case 24...0xFF:
            out.append(m | 24)
            out.append(UInt8(argument))
        case 0x100...0xFFFF:
            out.append(m | 25)
            appendBigEndian(argument, bytes: 2, to: &out)
        case 0x1_0000...0xFFFF_FFFF:
            out.append(m | 26)
            appendBigEndian(argument, bytes: 4, to: &out)
        default:
            out.append(m | 27)
            appendBigEndian(argument, bytes: 8, to: &out)
        }
    }

    static func appendBigEndian(_ value: UInt64, bytes: Int, to out: inout [UInt8]) {
        for i in stride(from: bytes - 1, through: 0, by: -1) {
            out.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i))))
        }
    }

    static func append(
        _ value: CBORValue, to out: inout [UInt8], order: CBORMapKeyOrder, rejectDuplicates: Bool,
        preserveMapOrder: Bool = false
    ) throws(TesseraError) {
        switch value {
        case .unsigned(let n):
            appendHead(major: 0, argument: n, to: &out)
        case .negative(let n):
            appendHead(major: 1, argument: n, to: &out)
        case .byteString(let bytes):
            appendHead(major: 2, argument: UInt64(bytes.count), to: &out)
            out.append(contentsOf: bytes)
        case .textString(let text):
            let utf8 = Array(text.utf8)
            appendHead(major: 3, argument: UInt64(utf8.count), to: &out)
            out.append(contentsOf: utf8)
        case .array(let items):
            appendHead(major: 4, argument: UInt64(items.count), to: &out)
            for item in items {
                try append(
                    item, to: &out, order: order, rejectDuplicates: rejectDuplicates, preserveMapOrder: preserveMapOrder
                )
            }
        case .map(let pairs):
            var encoded: [(key: [UInt8], value: [UInt8])] = []
            encoded.reserveCapacity(pairs.count)
            for pair in pairs {
                var k: [UInt8] = []
                var v: [UInt8] = []
                try append(
                    pair.key, to: &k, order: order, rejectDuplicates: rejectDuplicates,
                    preserveMapOrder: preserveMapOrder)
                try append(
                    pair.value, to: &v, order: order, rejectDuplicates: rejectDuplicates,
                    preserveMapOrder: preserveMapOrder)
                encoded.append((k, v))
            }
            if !preserveMapOrder { encoded.sort { order.precedes($0.key[...], $1.key[...]) } }
            if rejectDuplicates && !preserveMapOrder {
                for i in encoded.indices.dropFirst() where encoded[i - 1].key == encoded[i].key {
                    throw TesseraError(.invalidInput, "CBOR map has a duplicate key")
                }
            }
            appendHead(major: 5, argument: UInt64(encoded.count), to: &out)
            for pair in encoded {
                out.append(contentsOf: pair.key)
                out.append(contentsOf: pair.value)
            }
        case .tagged(let tag, let inner):
            appendHead(major: 6, argument: tag, to: &out)
            try append(
                inner, to: &out, order: order, rejectDuplicates: rejectDuplicates, preserveMapOrder: preserveMapOrder)
        case .simple(let simple):
            appendHead(major: 7, argument: UInt64(simple.rawValue), to: &out)
        case .bool(let b):
            out.append(b ? 0xF5 : 0xF4)
        case .null:
            out.append(0xF6)
        case .undefined:
            out.append(0xF7)
        case .float16(let bits):
            out.append(0xF9)
            appendBigEndian(UInt64(bits), bytes: 2, to: &out)
        case .float32(let f):
            out.append(0xFA)
            appendBigEndian(UInt64(f.bitPattern), bytes: 4, to: &out)
        case .float64(let d):
            out.append(0xFB)
            appendBigEndian(d.bitPattern, bytes: 8, to: &out)
        }
    }
}
