/// The tree reader for `JSONValue` (the socket parses one document per request, so this sits on the hot path): a
/// `JSONPullReader` walked to the end of one value.
enum JSONReader {
    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        var reader = JSONPullReader(bytes)
        guard let value = try? reader.value(), (try? reader.end()) != nil else { return nil }
        return value
    }
}

/// The one strict RFC 8259 JSON reader: a pull reader over UTF-8 bytes that hands out one value at a time, so a
/// large document (a door list) can be read straight into what keeps it, with no tree and no copy of its text. The
/// caller walks the structure (`enterObject`/`nextKey`, `enterArray`/`nextElement`, then a scalar or `skipValue`);
/// anything not JSON is MALFORMED_DATA naming the byte offset, and nesting deeper than `maxDepth` is refused.
public struct JSONPullReader {
    /// What the next value is.
    public enum Kind: Sendable, Equatable { case object, array, string, number, bool, null }

    private let bytes: [UInt8]
    /// The offset of the next byte to read.
    public private(set) var offset = 0
    /// One entry per open object or array, innermost last.
    private var open: [Container] = []

    private struct Container {
        var object: Bool
        /// Whether a member or element has been read in it.
        var had = false
    }
    /// The deepest nesting accepted.
    public static let maxDepth = 512

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    private func failure(_ expected: String) -> TesseraError {
        TesseraError(.malformedData, "JSON: expected \(expected) at byte \(offset)")
    }

    private mutating func skipSpace() {
        while offset < bytes.count,
            bytes[offset] == 0x20 || bytes[offset] == 0x0A || bytes[offset] == 0x0D || bytes[offset] == 0x09
        {
            offset += 1
        }
    }

    /// Skips white space and consumes `byte`, or fails.
    private mutating func expect(_ byte: UInt8, _ name: String) throws(TesseraError) {
        skipSpace()
        guard offset < bytes.count, bytes[offset] == byte else { throw failure(name) }
        offset += 1
    }

    /// The kind of the next value (white space before it skipped).
    public mutating func peek() throws(TesseraError) -> Kind {
        skipSpace()
        guard offset < bytes.count else { throw failure("a value") }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: throw failure("a value")
        }
    }

    /// Only white space is left and every object and array is closed.
    public mutating func end() throws(TesseraError) {
        skipSpace()
        guard open.isEmpty, offset == bytes.count else { throw failure("the end of the document") }
    }

    private mutating func enter(_ byte: UInt8, _ name: String) throws(TesseraError) {
        guard open.count < Self.maxDepth else { throw failure("at most \(Self.maxDepth) levels") }
        try expect(byte, name)
        open.append(Container(object: byte == UInt8(ascii: "{")))
    }

    /// Consumes the `{` of an object; then `nextKey` until it returns nil.
    public mutating func enterObject() throws(TesseraError) { try enter(UInt8(ascii: "{"), "an object") }

    /// The next member's key (its `:` consumed: read or skip its value next), or nil when the object closed.
    public mutating func nextKey() throws(TesseraError) -> String? {
        skipSpace()
        guard let container = open.last, container.object else { throw failure("an object") }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
            offset += 1
            open.removeLast()
            return nil
        }
        if container.had { try expect(UInt8(ascii: ","), "',' or '}'") }
        let key = try string()
        try expect(UInt8(ascii: ":"), "':'")
        open[open.count - 1].had = true
        return key
    }

    /// Consumes the `[` of an array; then `nextElement` until it returns false.
    public mutating func enterArray() throws(TesseraError) { try enter(UInt8(ascii: "["), "an array") }

    /// True when an element follows (read or skip it next); false when the array closed.
    public mutating func nextElement() throws(TesseraError) -> Bool {
        skipSpace()
        guard let container = open.last, !container.object else { throw failure("an array") }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
            offset += 1
            open.removeLast()
            return false
        }
        if container.had { try expect(UInt8(ascii: ","), "',' or ']'") }
        open[open.count - 1].had = true
        return true
    }

    /// Consumes `null` when it is next; false (nothing consumed) otherwise.
    public mutating func null() throws(TesseraError) -> Bool {
        guard try peek() == .null else { return false }
        try literal("null")
        return true
    }

    public mutating func bool() throws(TesseraError) -> Bool {
        skipSpace()
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "t") {
            try literal("true")
            return true
        }
        try literal("false")
        return false
    }

    private mutating func literal(_ word: StaticString) throws(TesseraError) {
        let n = word.utf8CodeUnitCount
        let ok =
            offset + n <= bytes.count && word.withUTF8Buffer { w in (0..<n).allSatisfy { bytes[offset + $0] == w[$0] } }
        guard ok else { throw failure("\(word)") }
        offset += n
    }

    /// A string's value.
    public mutating func string() throws(TesseraError) -> String {
        let (text, ascii) = try rawString()
        if ascii { return String(decoding: text, as: UTF8.self) }
        guard let string = String(validating: text, as: UTF8.self) else { throw failure("UTF-8") }
        return string
    }

    /// A string's value as UTF-8 bytes (validated): without escapes a slice of the document, no copy.
    public mutating func stringBytes() throws(TesseraError) -> ArraySlice<UInt8> {
        let (text, ascii) = try rawString()
        guard ascii || String(validating: text, as: UTF8.self) != nil else { throw failure("UTF-8") }
        return text
    }

    private mutating func hex4() -> UInt32? {
        guard offset + 4 <= bytes.count else { return nil }
        var v: UInt32 = 0
        for k in 0..<4 {
            let c = bytes[offset + k]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            default: return nil
            }
            v = v << 4 | d
        }
        offset += 4
        return v
    }

    /// A string's bytes with its escapes resolved, not yet validated as UTF-8, and whether they are all ASCII (no
    /// validation needed); rejects control characters and bad escapes.
    private mutating func rawString() throws(TesseraError) -> (ArraySlice<UInt8>, ascii: Bool) {
        try expect(UInt8(ascii: "\""), "a string")
        let start = offset
        // Fast path: no escapes.
        var ascii = true
        while true {
            offset = bytes.withUnsafeBufferPointer { JSONString.firstSpecial(in: $0, from: offset, orNonASCII: ascii) }
            guard offset < bytes.count, bytes[offset] >= 0x80 else { break }
            ascii = false
        }
        guard offset < bytes.count, bytes[offset] >= 0x20 else { throw failure("a closing quote") }
        if bytes[offset] == UInt8(ascii: "\"") {
            defer { offset += 1 }
            return (bytes[start..<offset], ascii)
        }
        var out = Array(bytes[start..<offset])
        while bytes[offset] != UInt8(ascii: "\"") {
            // At a backslash.
            offset += 1
            guard offset < bytes.count else { throw failure("an escape") }
            let e = bytes[offset]
            offset += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var scalar = hex4() else { throw failure("four hex digits") }
                if (0xD800...0xDBFF).contains(scalar) {
                    guard offset + 2 <= bytes.count, bytes[offset] == UInt8(ascii: "\\"),
                        bytes[offset + 1] == UInt8(ascii: "u")
                    else { throw failure("a low surrogate") }
                    offset += 2
                    guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { throw failure("a low surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw failure("no lone low surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else { throw failure("a Unicode scalar") }
                out += Array(String(Character(u)).utf8)
            default: throw failure("an escape")
            }
            while offset < bytes.count, bytes[offset] != UInt8(ascii: "\""), bytes[offset] != UInt8(ascii: "\\") {
                if bytes[offset] < 0x20 { throw failure("no control character") }
                out.append(bytes[offset])
                offset += 1
            }
            guard offset < bytes.count else { throw failure("a closing quote") }
        }
        offset += 1
        return (out[...], false)
    }

    /// The range of the number at the offset (RFC 8259's grammar), consumed.
    private mutating func numberText() throws(TesseraError) -> Range<Int> {
        skipSpace()
        let start = offset
        func digits() -> Int {
            let s = offset
            while offset < bytes.count, (0x30...0x39).contains(bytes[offset]) { offset += 1 }
            return offset - s
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "-") { offset += 1 }
        guard offset < bytes.count else { throw failure("a number") }
        if bytes[offset] == 0x30 { offset += 1 } else if digits() == 0 { throw failure("a number") }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            offset += 1
            guard digits() > 0 else { throw failure("a fraction's digits") }
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            offset += 1
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") {
                offset += 1
            }
            guard digits() > 0 else { throw failure("an exponent's digits") }
        }
        return start..<offset
    }

    /// A number's value (finite).
    public mutating func number() throws(TesseraError) -> Double {
        let text = try numberText()
        guard let d = Double(String(decoding: bytes[text], as: UTF8.self)), d.isFinite else {
            throw failure("a finite number")
        }
        return d
    }

    /// A number that is a whole number from 0 to `UInt64.max` written without fraction or exponent.
    public mutating func unsignedInteger() throws(TesseraError) -> UInt64 {
        let text = try numberText()
        var value: UInt64 = 0
        for c in bytes[text] {
            guard (0x30...0x39).contains(c) else { throw failure("a whole number") }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(UInt64(c - 0x30))
            guard !o1, !o2 else { throw failure("a number below 2^64") }
            value = sum
        }
        return value
    }

    /// Consumes the next value whatever it is.
    public mutating func skipValue() throws(TesseraError) {
        let depth = open.count
        repeat {
            switch try peek() {
            case .object: try enterObject()
            case .array: try enterArray()
            case .string: _ = try rawString()
            case .number: _ = try numberText()
            case .bool: _ = try bool()
            case .null: _ = try null()
            }
            // Close what is complete; stop at the next value to skip inside an open container.
            while open.count > depth {
                let more = open[open.count - 1].object ? try nextKey() != nil : try nextElement()
                if more { break }
            }
        } while open.count > depth
    }

    /// The next value as a tree.
    public mutating func value() throws(TesseraError) -> JSONValue {
        switch try peek() {
        case .object:
            try enterObject()
            var o: [String: JSONValue] = [:]
            while let key = try nextKey() { o[key] = try value() }
            return .object(o)
        case .array:
            try enterArray()
            var a: [JSONValue] = []
            while try nextElement() { a.append(try value()) }
            return .array(a)
        case .string: return .string(try string())
        case .number: return .number(try number())
        case .bool: return .bool(try bool())
        case .null:
            _ = try null()
            return .null
        }
    }
}

/// Writes compact JSON with sorted object keys.
struct JSONWriter {
    var out: [UInt8] = []
    init() { out.reserveCapacity(512) }

    mutating func write(_ v: JSONValue) {
        switch v {
        case .null: append("null")
        case .bool(let b): append(b ? "true" : "false")
        case .number(let n):
            if !n.isFinite {
                append("null")
            } else if n.rounded() == n, abs(n) < 9.007_199_254_740_992e15 {
                integer(Int64(n))
            } else {
                out += Array("\(n)".utf8)
            }
        case .string(let s): string(s)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            var first = true
            for e in a {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                write(e)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in o.sorted(by: { $0.key < $1.key }) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                string(key)
                out.append(UInt8(ascii: ":"))
                write(value)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private mutating func append(_ word: StaticString) {
        word.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    private mutating func integer(_ n: Int64) {
        if n == 0 { out.append(UInt8(ascii: "0")); return }
        var digits:
            (
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
            ) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var m = n.magnitude
        var count = 0
        withUnsafeMutableBytes(of: &digits) { d in
            while m > 0 {
                d[19 - count] = UInt8(ascii: "0") + UInt8(m % 10)
                m /= 10
                count += 1
            }
            if n < 0 { out.append(UInt8(ascii: "-")) }
            out.append(contentsOf: d[(20 - count)...])
        }
    }

    private mutating func string(_ s: String) { JSONString.appendQuoted(s, to: &out, shortEscapes: true) }
}
