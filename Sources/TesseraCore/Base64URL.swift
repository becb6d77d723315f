/// base64url without padding (RFC 4648 §5), as WebAuthn and the socket API use for every binary value.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let reverse: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        return t
    }()

    public static func encode<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        encode(Array(bytes))
    }

    public static func encode(_ input: [UInt8]) -> String {
        let length = encodedLength(input.count)
        guard length > 0 else { return "" }
        return String(unsafeUninitializedCapacity: length) { encode(input, into: $0) }
    }

    /// Appends `input` in base64url to `out` (no `String` on the way, e.g. for an answer written as bytes).
    public static func append(_ input: [UInt8], to out: inout [UInt8]) {
        let length = encodedLength(input.count)
        guard length > 0 else { return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: length) { buffer in
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<encode(input, into: buffer)]))
        }
    }

    /// Characters of `count` bytes encoded.
    static func encodedLength(_ count: Int) -> Int { (count * 4 + 2) / 3 }

    /// Writes `input` encoded at the start of `out` (room for `encodedLength(input.count)`); the count written.
    private static func encode(_ input: [UInt8], into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        input.withUnsafeBufferPointer { src in
            alphabet.withUnsafeBufferPointer { a in
                var i = 0, o = 0
                while i + 3 <= src.count {
                    let v = UInt32(src[i]) << 16 | UInt32(src[i + 1]) << 8 | UInt32(src[i + 2])
                    out[o] = a[Int(v >> 18)]; out[o + 1] = a[Int(v >> 12 & 63)]
                    out[o + 2] = a[Int(v >> 6 & 63)]; out[o + 3] = a[Int(v & 63)]
                    i += 3; o += 4
                }
                switch src.count - i {
                case 1:
                    let v = UInt32(src[i]) << 16
                    out[o] = a[Int(v >> 18)]; out[o + 1] = a[Int(v >> 12 & 63)]
                    o += 2
                case 2:
                    let v = UInt32(src[i]) << 16 | UInt32(src[i + 1]) << 8
                    out[o] = a[Int(v >> 18)]; out[o + 1] = a[Int(v >> 12 & 63)]; out[o + 2] = a[Int(v >> 6 & 63)]
                    o += 3
                default: break
                }
                return o
            }
        }
    }

    /// Decodes base64url; trailing '=' padding is accepted. Returns nil on any other character,
    /// an impossible length, or non-zero trailing bits.
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 in reverse.withUnsafeBufferPointer { decode(utf8, table: $0) } }
    }

    /// `decode(_:)` of the text's UTF-8 bytes.
    public static func decode(utf8: ArraySlice<UInt8>) -> [UInt8]? {
        utf8.withUnsafeBufferPointer { utf8 in reverse.withUnsafeBufferPointer { decode(utf8, table: $0) } }
    }

    private static func decode(_ input: UnsafeBufferPointer<UInt8>, table: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var n = input.count
        while n > 0, input[n - 1] == UInt8(ascii: "=") { n -= 1 }
        if n % 4 == 1 { return nil }
        var valid = true
        let out = [UInt8](unsafeUninitializedCapacity: n * 3 / 4) { buffer, initialized in
            var i = 0, o = 0
            // Every valid sextet is below 64: one test per group of four catches any 0xFF (not in the alphabet).
            while i + 4 <= n {
                let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                let c = table[Int(input[i + 2])], d = table[Int(input[i + 3])]
                guard (a | b | c | d) & 0xC0 == 0 else { valid = false; break }
                let v = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                buffer[o] = UInt8(truncatingIfNeeded: v >> 16)
                buffer[o + 1] = UInt8(truncatingIfNeeded: v >> 8)
                buffer[o + 2] = UInt8(truncatingIfNeeded: v)
                i += 4; o += 3
            }
            if valid, n - i >= 2 {
                let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                let c = n - i == 3 ? table[Int(input[i + 2])] : 0
                let v = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                // Unused low bits must be zero (canonical encoding).
                if (a | b | c) & 0xC0 != 0 || v & (n - i == 3 ? 0xFF : 0xFFFF) != 0 {
                    valid = false
                } else {
                    buffer[o] = UInt8(truncatingIfNeeded: v >> 16)
                    o += 1
                    if n - i == 3 {
                        buffer[o] = UInt8(truncatingIfNeeded: v >> 8)
                        o += 1
                    }
                }
            }
            initialized = valid ? o : 0
        }
        return valid ? out : nil
    }
}

/// Lower-case hexadecimal, for logs, test vectors and config files.
public enum Hex {
    public static func encode<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xF)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex, ignoring ASCII white space; nil on odd length or a non-hex character.
    public static func decode(_ text: String) -> [UInt8]? { decode(utf8: text.utf8) }

    /// `decode(_:)` of the text's UTF-8 bytes.
    public static func decode(utf8: some Sequence<UInt8>) -> [UInt8]? {
        var out = [UInt8]()
        var high: UInt8?
        for c in utf8 {
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { continue }
            let v: UInt8
            switch c {
            case 0x30...0x39: v = c - 0x30
            case 0x41...0x46: v = c - 0x41 + 10
            case 0x61...0x66: v = c - 0x61 + 10
            default: return nil
            }
            if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
        }
        return high == nil ? out : nil
    }
}
