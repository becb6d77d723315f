/// A strict RFC 8259 JSON reader and a compact writer for `JSONValue`, working on UTF-8 bytes directly
/// (the socket parses and writes one document per request, so this sits on the hot path).
struct JSONReader {
    private let bytes: [UInt8]
    private var i = 0
    private static let maxDepth = 512

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        var r = JSONReader(bytes)
        guard let v = r.value(depth: 0) else { return nil }
        r.skipSpace()
        guard r.i == bytes.count else { return nil }
        return v
    }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private mutating func literal(_ word: StaticString, _ v: JSONValue) -> JSONValue? {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { return nil }
        let ok = word.withUTF8Buffer { w in (0..<n).allSatisfy { bytes[i + $0] == w[$0] } }
        guard ok else { return nil }
        i += n
        return v
    }

    private mutating func value(depth: Int) -> JSONValue? {
        guard depth < Self.maxDepth else { return nil }
        skipSpace()
        guard i < bytes.count else { return nil }
        switch bytes[i] {
        case UInt8(ascii: "{"): return object(depth: depth)
        case UInt8(ascii: "["): return array(depth: depth)
        case UInt8(ascii: "\""): return string().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return number()
        }
    }

    private mutating func object(depth: Int) -> JSONValue? {
        i += 1
        var o: [String: JSONValue] = [:]
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(o) }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\""), let key = string() else { return nil }
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            guard let v = value(depth: depth + 1) else { return nil }
            o[key] = v
            skipSpace()
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(o) }
            return nil
        }
    }

    private mutating func array(depth: Int) -> JSONValue? {
        i += 1
        var a: [JSONValue] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
        while true {
            guard let v = value(depth: depth + 1) else { return nil }
            a.append(v)
            skipSpace()
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
            return nil
        }
    }

    private mutating func hex4() -> UInt32? {
        guard i + 4 <= bytes.count else { return nil }
        var v: UInt32 = 0
        for k in 0..<4 {
            let c = bytes[i + k]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            default: return nil
            }
            v = v << 4 | d
        }
        i += 4
        return v
    }

    /// Reads a string starting at the opening quote; rejects control characters and invalid UTF-8.
    private mutating func string() -> String? {
        i += 1
        let start = i
        // Fast path: no escapes.
        var ascii = true
        while true {
            i = bytes.withUnsafeBufferPointer { JSONString.firstSpecial(in: $0, from: i, orNonASCII: ascii) }
            guard i < bytes.count, bytes[i] >= 0x80 else { break }
            ascii = false
        }
        guard i < bytes.count, bytes[i] >= 0x20 else { return nil }
        if bytes[i] == UInt8(ascii: "\""), ascii {
            // ASCII needs no UTF-8 validation.
            defer { i += 1 }
            return String(decoding: bytes[start..<i], as: UTF8.self)
        }
        var out = Array(bytes[start..<i])
        while bytes[i] != UInt8(ascii: "\"") {
            // At a backslash.
            i += 1
            guard i < bytes.count else { return nil }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var scalar = hex4() else { return nil }
                if (0xD800...0xDBFF).contains(scalar) {
                    guard i + 2 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        return nil
                    }
                    i += 2
                    guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    return nil
                }
                guard let u = Unicode.Scalar(scalar) else { return nil }
                out += Array(String(Character(u)).utf8)
            default: return nil
            }
            while i < bytes.count, bytes[i] != UInt8(ascii: "\""), bytes[i] != UInt8(ascii: "\\") {
                if bytes[i] < 0x20 { return nil }
                out.append(bytes[i])
                i += 1
            }
            guard i < bytes.count else { return nil }
        }
        i += 1
        return String(validating: out, as: UTF8.self)
    }

    private mutating func number() -> JSONValue? {
        let start = i
        func digits() -> Int {
            let s = i
            while i < bytes.count, (0x30...0x39).contains(bytes[i]) { i += 1 }
            return i - s
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count else { return nil }
        if bytes[i] == 0x30 { i += 1 } else if digits() == 0 { return nil }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            guard digits() > 0 else { return nil }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { return nil }
        }
        guard let d = Double(String(decoding: bytes[start..<i], as: UTF8.self)), d.isFinite else { return nil }
        return .number(d)
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
