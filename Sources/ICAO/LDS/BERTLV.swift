import TesseraCore

/// One BER-TLV data object (ISO/IEC 7816-4 / X.690), as found in LDS files and CMS structures.
public struct TLV: Sendable, Equatable {
    /// The tag bytes as a big-endian number, e.g. `0x61`, `0x5F1F`, `0x7F61`.
    public var tag: UInt32
    /// The value field (for indefinite lengths: the contents without the end-of-contents marker).
    public var value: [UInt8]
    /// The object exactly as it was read (or as built), header included.
    public var encoded: [UInt8]

    /// Builds an object with a minimal definite-length header.
    public init(tag: UInt32, value: [UInt8]) {
        self.tag = tag
        self.value = value
        encoded = BERTLV.encode(tag: tag, value: value)
    }

    init(tag: UInt32, value: [UInt8], encoded: [UInt8]) {
        self.tag = tag; self.value = value; self.encoded = encoded
    }

    /// Whether the constructed bit of the first tag byte is set.
    public var isConstructed: Bool { BERTLV.tagBytes(tag)[0] & 0x20 != 0 }

    /// Parses the value as a sequence of objects. Throws MALFORMED_DATA on any inconsistency.
    public func children() throws(TesseraError) -> [TLV] {
        guard isConstructed else { throw TesseraError(.malformedData, "tag \(BERTLV.tagHex(tag)) is not constructed") }
        return try BERTLV.parseAll(value)
    }

    /// The first child with `tag`, if any.
    public func child(_ tag: UInt32) throws(TesseraError) -> TLV? {
        try children().first { $0.tag == tag }
    }
}

/// A bounds-checked BER-TLV reader and writer. Lengths may never exceed the bytes present, tags are at most
/// 4 bytes, length fields at most 4 bytes, and indefinite-length nesting at most `maxNesting` deep, so a
/// hostile chip causes MALFORMED_DATA rather than a crash or a large allocation.
public enum BERTLV {
    /// Deepest nesting of indefinite-length objects accepted.
    public static let maxNesting = 32

    /// Parses exactly one object. With `allowTrailing`, bytes after it are ignored (files padded by the chip).
    public static func parse(_ bytes: [UInt8], allowTrailing: Bool = false) throws(TesseraError) -> TLV {
        var reader = Reader(bytes: bytes)
        let tlv = try reader.readObject(depth: 0)
        if !allowTrailing && reader.pos != bytes.count {
            throw TesseraError(.malformedData, "\(bytes.count - reader.pos) trailing bytes after TLV")
        }
        return tlv
    }

    /// Parses a concatenation of objects filling `bytes` exactly.
    public static func parseAll(_ bytes: [UInt8]) throws(TesseraError) -> [TLV] {
        var reader = Reader(bytes: bytes)
        var out = [TLV]()
        while reader.pos < bytes.count {
            out.append(try reader.readObject(depth: 0))
        }
        return out
    }

    /// Length in bytes of the first object's header + value when only a prefix of the file is known
    /// (for reading a file whose size is announced in its first bytes). Nil when more bytes are needed.
    public static func totalLength(ofPrefix prefix: [UInt8]) throws(TesseraError) -> Int? {
        var reader = Reader(bytes: prefix)
        do throws(TesseraError) {
            _ = try reader.readTag()
            guard let len = try reader.readLength(constructed: true) else {
                throw TesseraError(.malformedData, "indefinite length at file level")
            }
            return reader.pos + len
        } catch {
            if error.message == Reader.truncated { return nil }
            throw error
        }
    }

    /// Encodes a tag + value with a minimal definite length.
    public static func encode(tag: UInt32, value: [UInt8]) -> [UInt8] {
        tagBytes(tag) + encodeLength(value.count) + value
    }

    /// DER/BER definite length octets.
    public static func encodeLength(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        var bytes = [UInt8]()
        var v = n
        while v > 0 { bytes.insert(UInt8(v & 0xFF), at: 0); v >>= 8 }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    static func tagBytes(_ tag: UInt32) -> [UInt8] {
        if tag <= 0xFF { return [UInt8(tag)] }
        if tag <= 0xFFFF { return [UInt8(tag >> 8), UInt8(tag & 0xFF)] }
        if tag <= 0xFF_FFFF { return [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)] }
        return [UInt8(tag >> 24), UInt8((tag >> 16) & 0xFF), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)]
    }

    static func tagHex(_ tag: UInt32) -> String { Hex.encode(tagBytes(tag)).uppercased() }

    struct Reader {
        static let truncated = "truncated TLV"
        let bytes: [UInt8]
        var pos = 0

        mutating func byte() throws(TesseraError) -> UInt8 {
            guard pos < bytes.count else { throw TesseraError(.malformedData, Reader.truncated) }
            defer { pos += 1 }
            return bytes[pos]
        }

        mutating func readTag() throws(TesseraError) -> UInt32 {
            let first = try byte()
            var tag = UInt32(first)
            if first & 0x1F == 0x1F {
                var count = 0
                while true {
                    let b = try byte()
                    tag = tag << 8 | UInt32(b)
                    count += 1
                    if b & 0x80 == 0 { break }
                    guard count < 3 else { throw TesseraError(.malformedData, "tag longer than 4 bytes") }
                }
            }
            return tag
        }

        /// Nil for the indefinite form.
        mutating func readLength(constructed: Bool) throws(TesseraError) -> Int? {
            let first = try byte()
            if first < 0x80 { return Int(first) }
            if first == 0x80 {
                guard constructed else { throw TesseraError(.malformedData, "indefinite length on a primitive object") }
                return nil
            }
            let n = Int(first & 0x7F)
            guard n <= 4 else { throw TesseraError(.malformedData, "length field of \(n) bytes") }
            var len = 0
            for _ in 0..<n { len = len << 8 | Int(try byte()) }
            return len
        }

        mutating func readObject(depth: Int) throws(TesseraError) -> TLV {
            guard depth <= BERTLV.maxNesting else { throw TesseraError(.malformedData, "TLV nested too deeply") }
            let start = pos
            let tag = try readTag()
            let constructed = BERTLV.tagBytes(tag)[0] & 0x20 != 0
            if let len = try readLength(constructed: constructed) {
                guard len <= bytes.count - pos else {
                    throw TesseraError(.malformedData, "TLV length \(len) exceeds the \(bytes.count - pos) bytes present")
                }
                let value = Array(bytes[pos..<(pos + len)])
                pos += len
                return TLV(tag: tag, value: value, encoded: Array(bytes[start..<pos]))
            }
            let valueStart = pos
            while true {
                guard pos + 1 < bytes.count else { throw TesseraError(.malformedData, Reader.truncated) }
                if bytes[pos] == 0 && bytes[pos + 1] == 0 { break }
                _ = try readObject(depth: depth + 1)
            }
            let value = Array(bytes[valueStart..<pos])
            pos += 2
            return TLV(tag: tag, value: value, encoded: Array(bytes[start..<pos]))
        }
    }
}
