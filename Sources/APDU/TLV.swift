import TesseraCore

/// One BER-TLV data object (ISO/IEC 7816-4 §5.2, X.690 §8.1), as found in card data objects, LDS files and
/// CMS structures.
public struct TLV: Sendable, Equatable {
    /// The tag bytes as a big-endian number with class and constructed bits, e.g. `0x61`, `0x5F1F`, `0x5FC102`.
    public let tag: UInt32
    /// The value field (for indefinite lengths: the contents without the end-of-contents marker).
    public let value: [UInt8]
    /// The object exactly as it was read (or as built), header included.
    public let encoded: [UInt8]

    /// Builds an object with a minimal definite-length header.
    public init(tag: UInt32, value: [UInt8]) {
        self.init(tag: tag, value: value, encoded: TLV.encode(tag: tag, value: value))
    }

    /// Builds a constructed object from its children.
    public init(tag: UInt32, children: [TLV]) {
        self.init(tag: tag, value: children.flatMap(\.encoded))
    }

    init(tag: UInt32, value: [UInt8], encoded: [UInt8]) {
        self.tag = tag; self.value = value; self.encoded = encoded
    }

    /// Whether the constructed bit of the first tag byte is set.
    public var isConstructed: Bool { TLV.isConstructed(tag) }

    /// Parses the value as a sequence of objects. Throws MALFORMED_DATA on any inconsistency.
    public func children(options: ParseOptions = .ber) throws(TesseraError) -> [TLV] {
        guard isConstructed else { throw TesseraError(.malformedData, "tag \(TLV.tagHex(tag)) is not constructed") }
        return try TLV.parseAll(value, options: options)
    }

    /// The first child with `tag`, if any.
    public func child(_ tag: UInt32) throws(TesseraError) -> TLV? {
        try children().first(tag: tag)
    }
}

extension Array where Element == TLV {
    /// The first object with `tag`, if any.
    public func first(tag: UInt32) -> TLV? { first { $0.tag == tag } }
}

// MARK: Reading and writing

/// The reader is bounds-checked: lengths may never exceed the bytes present, tags are at most 4 bytes, length
/// fields at most 4 bytes, and indefinite-length nesting at most `maxNesting` deep, so hostile input causes
/// MALFORMED_DATA rather than a crash or a large allocation.
extension TLV {
    /// What the reader accepts beyond definite-length objects.
    public struct ParseOptions: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// The X.690 indefinite form on constructed objects (BER; some EF.SOD files use it).
        public static let indefiniteLength = ParseOptions(rawValue: 1)
        /// '00' and 'FF' bytes before, between and after objects are skipped (ISO/IEC 7816-4 §5.2.2.1).
        public static let padding = ParseOptions(rawValue: 2)

        /// X.690 BER: definite and indefinite lengths, no padding.
        public static let ber: ParseOptions = [.indefiniteLength]
        /// Interindustry data objects as cards send them: definite lengths, padding between objects.
        public static let card: ParseOptions = [.padding]
    }

    /// Deepest nesting of indefinite-length objects accepted.
    public static let maxNesting = 32

    /// Parses exactly one object. With `allowTrailing`, bytes after it are ignored (files padded by the chip).
    public static func parse(
        _ bytes: [UInt8], allowTrailing: Bool = false,
        options: ParseOptions = .ber
    ) throws(TesseraError) -> TLV {
        var reader = Reader(bytes: bytes, options: options)
        let tlv = try reader.readObject(depth: 0)
        if !allowTrailing && reader.pos != bytes.count {
            throw TesseraError(.malformedData, "\(bytes.count - reader.pos) trailing bytes after TLV")
        }
        return tlv
    }

    /// Parses a concatenation of objects filling `bytes` exactly.
    public static func parseAll(_ bytes: [UInt8], options: ParseOptions = .ber) throws(TesseraError) -> [TLV] {
        var reader = Reader(bytes: bytes, options: options)
        var out = [TLV]()
        while reader.pos < bytes.count {
            if options.contains(.padding) && (bytes[reader.pos] == 0x00 || bytes[reader.pos] == 0xFF) {
                reader.pos += 1
                continue
            }
            out.append(try reader.readObject(depth: 0))
        }
        return out
    }

    /// The object reached by following `path` through `bytes`: the first top-level object with `path[0]`, then its
    /// first child with `path[1]`, and so on. Nil when a tag is missing; MALFORMED_DATA when a level does not parse.
    public static func find(
        _ path: [UInt32], in bytes: [UInt8],
        options: ParseOptions = .ber
    ) throws(TesseraError) -> TLV? {
        guard let first = path.first, var found = try parseAll(bytes, options: options).first(tag: first) else {
            return nil
        }
        for tag in path.dropFirst() {
            guard let next = try parseAll(found.value, options: options).first(tag: tag) else { return nil }
            found = next
        }
        return found
    }

    /// Length in bytes of the first object's header + value when only a prefix of the file is known
    /// (for reading a file whose size is announced in its first bytes). Nil when more bytes are needed.
    public static func totalLength(ofPrefix prefix: [UInt8]) throws(TesseraError) -> Int? {
        var reader = Reader(bytes: prefix, options: [])
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

    /// Minimal definite length octets (X.690 §8.1.3): short form below 128, else 81, 82, 83 or 84 + big-endian.
    public static func encodeLength(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        var bytes = [UInt8]()
        var v = n
        while v > 0 { bytes.insert(UInt8(v & 0xFF), at: 0); v >>= 8 }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    /// The tag as it appears on the wire (1 to 4 bytes).
    public static func tagBytes(_ tag: UInt32) -> [UInt8] {
        if tag <= 0xFF { return [UInt8(tag)] }
        if tag <= 0xFFFF { return [UInt8(tag >> 8), UInt8(tag & 0xFF)] }
        if tag <= 0xFF_FFFF { return [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)] }
        return [UInt8(tag >> 24), UInt8((tag >> 16) & 0xFF), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)]
    }

    /// The tag in upper-case hex, for messages (e.g. "5F1F").
    public static func tagHex(_ tag: UInt32) -> String { Hex.encode(tagBytes(tag)).uppercased() }

    static func isConstructed(_ tag: UInt32) -> Bool { tagBytes(tag)[0] & 0x20 != 0 }

    struct Reader {
        static let truncated = "truncated TLV"
        let bytes: [UInt8]
        let options: ParseOptions
        var pos = 0

        init(bytes: [UInt8], options: ParseOptions) { self.bytes = bytes; self.options = options }

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
            guard depth <= TLV.maxNesting else { throw TesseraError(.malformedData, "TLV nested too deeply") }
            let start = pos
            let tag = try readTag()
            let constructed = TLV.isConstructed(tag)
            if let len = try readLength(constructed: constructed) {
                guard len <= bytes.count - pos else {
                    throw TesseraError(
                        .malformedData, "TLV length \(len) exceeds the \(bytes.count - pos) bytes present")
                }
                let value = Array(bytes[pos..<(pos + len)])
                pos += len
                return TLV(tag: tag, value: value, encoded: Array(bytes[start..<pos]))
            }
            guard options.contains(.indefiniteLength) else {
                throw TesseraError(.malformedData, "indefinite length not allowed here")
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
