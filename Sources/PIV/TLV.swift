import TesseraCore

/// A BER-TLV data object as PIV uses them (SP 800-73-4 Part 2, §3: tags of one to three bytes,
/// definite lengths of up to three length bytes).
public struct TLV: Sendable, Equatable {
    /// The tag with its class/constructed bits, big-endian (e.g. 0x7C, 0x5FC102, 0x7F49).
    public var tag: UInt32
    public var value: [UInt8]

    public init(_ tag: UInt32, _ value: [UInt8]) { self.tag = tag; self.value = value }

    /// A constructed object from its children.
    public init(_ tag: UInt32, children: [TLV]) { self.tag = tag; self.value = children.flatMap(\.encoded) }

    /// The wire form: tag, length, value.
    public var encoded: [UInt8] { Self.tagBytes(tag) + Self.lengthBytes(value.count) + value }

    public static func tagBytes(_ tag: UInt32) -> [UInt8] {
        if tag > 0xFFFF { return [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)] }
        if tag > 0xFF { return [UInt8(tag >> 8), UInt8(tag & 0xFF)] }
        return [UInt8(tag)]
    }

    public static func lengthBytes(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        if n <= 0xFF { return [0x81, UInt8(n)] }
        if n <= 0xFFFF { return [0x82, UInt8(n >> 8), UInt8(n & 0xFF)] }
        return [0x83, UInt8(n >> 16), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
    }

    /// Parses a sequence of TLVs that fills `bytes` exactly (trailing 00/FF padding is tolerated).
    /// Throws MALFORMED_DATA on truncation or unsupported encodings.
    public static func parseAll(_ bytes: [UInt8]) throws(TesseraError) -> [TLV] {
        var out: [TLV] = []
        var i = 0
        while i < bytes.count {
            if bytes[i] == 0x00 || bytes[i] == 0xFF {
                // Padding between or after objects (ISO 7816-4 §5.2.2.1).
                i += 1
                continue
            }
            let (tlv, next) = try parse(bytes, at: i)
            out.append(tlv)
            i = next
        }
        return out
    }

    /// Parses one TLV at `offset`; returns it and the offset after it.
    public static func parse(_ bytes: [UInt8], at offset: Int) throws(TesseraError) -> (TLV, Int) {
        var i = offset
        func need(_ n: Int) throws(TesseraError) {
            guard i + n <= bytes.count else { throw TesseraError(.malformedData, "truncated BER-TLV") }
        }
        try need(1)
        var tag = UInt32(bytes[i])
        i += 1
        if bytes[i - 1] & 0x1F == 0x1F {
            var more = true
            var count = 0
            while more {
                try need(1)
                count += 1
                guard count <= 2 else { throw TesseraError(.malformedData, "BER-TLV tag longer than 3 bytes") }
                tag = tag << 8 | UInt32(bytes[i])
                more = bytes[i] & 0x80 != 0
                i += 1
            }
        }
        try need(1)
        var length = Int(bytes[i])
        i += 1
        if length & 0x80 != 0 {
            let n = length & 0x7F
            guard (1...3).contains(n) else { throw TesseraError(.malformedData, "unsupported BER-TLV length form") }
            try need(n)
            length = 0
            for _ in 0..<n { length = length << 8 | Int(bytes[i]); i += 1 }
        }
        try need(length)
        return (TLV(tag, Array(bytes[i..<(i + length)])), i + length)
    }
}

extension Array where Element == TLV {
    /// The first object with `tag`, if any.
    public func first(tag: UInt32) -> TLV? { first { $0.tag == tag } }
}
