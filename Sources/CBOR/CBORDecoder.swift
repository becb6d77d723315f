import TesseraCore

/// Limits and strictness for decoding. Every violation throws `MALFORMED_DATA` naming the byte offset.
public struct CBORDecodingOptions: Sendable {
    /// Maximum nesting of arrays, maps and tags (a scalar has depth 0, `[1]` depth 1); capped at 128, a recursion
    /// depth that fits a cooperative thread's stack even in AddressSanitizer builds.
    public var maxDepth: Int
    /// Maximum number of data items in the whole input, containers included.
    public var maxItems: Int
    /// Accept indefinite-length strings, arrays and maps.
    public var allowIndefiniteLength: Bool
    /// Require shortest heads, shortest exact floats and sorted map keys (per `keyOrder`).
    public var requireCanonical: Bool
    /// Key order checked when `requireCanonical` is set.
    public var keyOrder: CBORMapKeyOrder
    /// Accept maps with two equal keys.
    public var allowDuplicateKeys: Bool
    /// Accept bytes after the first data item (only for `CBORValue(decoding:)`).
    public var allowTrailingBytes: Bool

    public init(
        maxDepth: Int = 32, maxItems: Int = 100_000, allowIndefiniteLength: Bool = false,
        requireCanonical: Bool = true, keyOrder: CBORMapKeyOrder = .ctap2, allowDuplicateKeys: Bool = false,
        allowTrailingBytes: Bool = false
    ) {
        self.maxDepth = maxDepth
        self.maxItems = maxItems
        self.allowIndefiniteLength = allowIndefiniteLength
        self.requireCanonical = requireCanonical
        self.keyOrder = keyOrder
        self.allowDuplicateKeys = allowDuplicateKeys
        self.allowTrailingBytes = allowTrailingBytes
    }

    /// CTAP2 canonical CBOR: definite lengths, canonical encodings, no duplicate keys, no trailing bytes.
    public static let strict = CBORDecodingOptions()

    /// Any well-formed RFC 8949 item, indefinite lengths and non-shortest encodings included (duplicates still rejected).
    public static let lenient = CBORDecodingOptions(
        maxDepth: 128, allowIndefiniteLength: true, requireCanonical: false)
}

extension CBORValue {
    /// Decodes exactly one data item from `bytes`.
    public init(decoding bytes: [UInt8], options: CBORDecodingOptions = .strict) throws(TesseraError) {
        let (value, end) = try CBORValue.decode(bytes, from: 0, options: options)
        if end != bytes.count && !options.allowTrailingBytes {
            throw CBORParser.malformed("\(bytes.count - end) trailing byte(s)", at: end)
        }
        self = value
    }

    /// Decodes one data item starting at `offset`; returns it and the offset just past it.
    public static func decode(
        _ bytes: [UInt8], from offset: Int, options: CBORDecodingOptions = .strict
    ) throws(TesseraError) -> (value: CBORValue, end: Int) {
        guard offset >= 0, offset <= bytes.count else {
            throw CBORParser.malformed("start beyond end of input", at: offset)
        }
        var parser = CBORParser(bytes: bytes, position: offset, options: options)
        let value = try parser.parseItem(depth: 0)
        return (value, parser.position)
    }
}

struct CBORParser {
    let bytes: [UInt8]
    var position: Int
    let options: CBORDecodingOptions
    let maxDepth: Int
    var itemCount = 0

    init(bytes: [UInt8], position: Int, options: CBORDecodingOptions) {
        self.bytes = bytes
        self.position = position
        self.options = options
        self.maxDepth = min(max(options.maxDepth, 0), 128)
    }

    static func malformed(_ what: String, at offset: Int) -> TesseraError {
        TesseraError(.malformedData, "CBOR: \(what) at offset \(offset)", details: ["offset": .number(Double(offset))])
    }

    var remaining: Int { bytes.count - position }

    /// Elements reserved up front for a container that declares `count`: no more than the remaining input can
    /// hold (`canHold`) and no more than `maxReservation`, so nested containers that each declare the whole
    /// input cannot multiply memory; larger containers grow as their elements are actually decoded.
    static func reservation(declared count: UInt64, canHold: Int) -> Int {
        Int(min(count, UInt64(max(canHold, 0)), UInt64(maxReservation)))
    }

    static let maxReservation = 256

    struct Head {
        var major: UInt8
        var info: UInt8
        var argument: UInt64
        var offset: Int
        var isIndefinite: Bool { info == 31 }
    }

    mutating func readByte() throws(TesseraError) -> UInt8 {
        guard position < bytes.count else { throw Self.malformed("unexpected end of input", at: position) }
        defer { position += 1 }
        return bytes[position]
    }

    mutating func readHead() throws(TesseraError) -> Head {
        let offset = position
        let initial = try readByte()
        let major = initial >> 5
        let info = initial & 0x1F
        var argument: UInt64 = 0
        switch info {
        case 0..<24:
            argument = UInt64(info)
        case 24, 25, 26, 27:
            let width = 1 << Int(info - 24)
            guard remaining >= width else { throw Self.malformed("unexpected end of input", at: position) }
            for _ in 0..<width { argument = argument << 8 | UInt64(bytes[position]); position += 1 }
            if options.requireCanonical && major != 7 {
                let shortest: Bool
                switch info {
                case 24: shortest = argument >= 24
                case 25: shortest = argument > 0xFF
                case 26: shortest = argument > 0xFFFF
                default: shortest = argument > 0xFFFF_FFFF
                }
                guard shortest else { throw Self.malformed("non-shortest integer or length encoding", at: offset) }
            }
        case 31:
            guard major == 2 || major == 3 || major == 4 || major == 5 || major == 7 else {
                throw Self.malformed("indefinite length not allowed for major type \(major)", at: offset)
            }
            if major != 7 && !options.allowIndefiniteLength {
                throw Self.malformed("indefinite-length item", at: offset)
            }
        default:
            throw Self.malformed("reserved additional information \(info)", at: offset)
        }
        return Head(major: major, info: info, argument: argument, offset: offset)
    }

    mutating func countItem(at offset: Int) throws(TesseraError) {
        itemCount += 1
        if itemCount > options.maxItems { throw Self.malformed("more than \(options.maxItems) data items", at: offset) }
    }

    func checkDepth(_ depth: Int, at offset: Int) throws(TesseraError) {
        if depth + 1 > maxDepth { throw Self.malformed("nesting deeper than \(maxDepth)", at: offset) }
    }

    /// True (and consumes it) when the next byte is the "break" stop code.
    mutating func consumeBreak() throws(TesseraError) -> Bool {
        guard position < bytes.count else { throw Self.malformed("unexpected end of input", at: position) }
        if bytes[position] == 0xFF { position += 1; return true }
        return false
    }

    mutating func readDefiniteBytes(count: UInt64, head: Head) throws(TesseraError) -> ArraySlice<UInt8> {
        guard count <= UInt64(remaining) else {
            throw Self.malformed("length \(count) exceeds the \(remaining) remaining byte(s)", at: head.offset)
        }
        let start = position
        position += Int(count)
        return bytes[start..<position]
    }

    static func text(_ utf8: ArraySlice<UInt8>, at offset: Int) throws(TesseraError) -> String {
        let string = String(decoding: utf8, as: UTF8.self)
        guard string.utf8.elementsEqual(utf8) else { throw malformed("invalid UTF-8 in text string", at: offset) }
        return string
    }

    mutating func parseItem(depth: Int) throws(TesseraError) -> CBORValue {
        let head = try readHead()
        try countItem(at: head.offset)
        switch head.major {
        case 0:
            return .unsigned(head.argument)
        case 1:
            return .negative(head.argument)
        case 2, 3:
            if head.isIndefinite {
                var joined: [UInt8] = []
                while try !consumeBreak() {
                    let chunk = try readHead()
                    try countItem(at: chunk.offset)
                    guard chunk.major == head.major, !chunk.isIndefinite else {
                        throw Self.malformed("invalid chunk in indefinite-length string", at: chunk.offset)
                    }
                    let part = try readDefiniteBytes(count: chunk.argument, head: chunk)
                    if head.major == 3 { _ = try Self.text(part, at: chunk.offset) }
                    joined.append(contentsOf: part)
                }
                return head.major == 2 ? .byteString(joined) : .textString(try Self.text(joined[...], at: head.offset))
            }
            let content = try readDefiniteBytes(count: head.argument, head: head)
            return head.major == 2 ? .byteString(Array(content)) : .textString(try Self.text(content, at: head.offset))
        case 4:
            try checkDepth(depth, at: head.offset)
            var items: [CBORValue] = []
            if head.isIndefinite {
                while try !consumeBreak() { items.append(try parseItem(depth: depth + 1)) }
            } else {
                guard head.argument <= UInt64(remaining) else {
                    throw Self.malformed("array of \(head.argument) items exceeds the remaining input", at: head.offset)
                }
                items.reserveCapacity(Self.reservation(declared: head.argument, canHold: remaining))
                for _ in 0..<head.argument { items.append(try parseItem(depth: depth + 1)) }
            }
            return .array(items)
        case 5:
            try checkDepth(depth, at: head.offset)
            return try parseMap(head: head, depth: depth)
        case 6:
            if head.isIndefinite { throw Self.malformed("indefinite tag", at: head.offset) }
            try checkDepth(depth, at: head.offset)
            return .tagged(head.argument, try parseItem(depth: depth + 1))
        default:
            return try parseSimpleOrFloat(head)
        }
    }

    mutating func parseMap(head: Head, depth: Int) throws(TesseraError) -> CBORValue {
        var pairs: [(key: CBORValue, value: CBORValue)] = []
        var previousKey: Range<Int>?
        var seen = Set<CBORValue>()
        let checkSeen = !options.allowDuplicateKeys && !options.requireCanonical
        if !head.isIndefinite {
            guard head.argument <= UInt64(remaining / 2) else {
                throw Self.malformed("map of \(head.argument) pairs exceeds the remaining input", at: head.offset)
            }
            pairs.reserveCapacity(Self.reservation(declared: head.argument, canHold: remaining / 2))
        }
        var index: UInt64 = 0
        while true {
            if head.isIndefinite {
                if try consumeBreak() { break }
            } else if index == head.argument {
                break
            }
            index += 1
            let keyStart = position
            let key = try parseItem(depth: depth + 1)
            let keyRange = keyStart..<position
            if options.requireCanonical, let previous = previousKey {
                let before = bytes[previous]
                let current = bytes[keyRange]
                if before == current {
                    if !options.allowDuplicateKeys { throw Self.malformed("duplicate map key", at: keyStart) }
                } else if !options.keyOrder.precedes(before, current) {
                    throw Self.malformed("map keys not in canonical order", at: keyStart)
                }
            }
            if checkSeen && !seen.insert(key).inserted {
                throw Self.malformed("duplicate map key", at: keyStart)
            }
            previousKey = keyRange
            if head.isIndefinite && position < bytes.count && bytes[position] == 0xFF {
                throw Self.malformed("map missing a value", at: position)
            }
            let value = try parseItem(depth: depth + 1)
            pairs.append((key, value))
        }
        return .map(pairs)
    }

    func parseSimpleOrFloat(_ head: Head) throws(TesseraError) -> CBORValue {
        switch head.info {
        case 0..<20:
            return .simple(CBORSimpleValue(UInt8(head.info))!)
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 22: return .null
        case 23: return .undefined
        case 24:
            guard let simple = CBORSimpleValue(UInt8(head.argument)), head.argument >= 32 else {
                throw Self.malformed("two-byte simple value below 32", at: head.offset)
            }
            return .simple(simple)
        case 25:
            return .float16(UInt16(head.argument))
        case 26:
            let f = Float(bitPattern: UInt32(head.argument))
            if options.requireCanonical && HalfFloat.exactBits(f) != nil {
                throw Self.malformed("float32 that fits in float16", at: head.offset)
            }
            return .float32(f)
        case 27:
            let d = Double(bitPattern: head.argument)
            if options.requireCanonical && CBORValue.float(d) != .float64(d) {
                throw Self.malformed("float64 that fits in a shorter float", at: head.offset)
            }
            return .float64(d)
        default:
            throw Self.malformed("unexpected break", at: head.offset)
        }
    }
}
