/// The bytes of JSON strings: the one escaping (JSONWriter's and WebAuthn's CCDToString) and the scan for the bytes a
/// string must treat specially (a control character, `"` or `\`), 16 bytes at a time, behind it and `JSONPullReader`.
public enum JSONString {
    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `string` in quotes: `"` and `\` escaped with a backslash, control characters as `\u00xx` or, with
    /// `shortEscapes`, LF, CR and tab as `\n`, `\r`, `\t`; every other byte as it is.
    public static func appendQuoted(_ string: String, to out: inout [UInt8], shortEscapes: Bool) {
        out.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { utf8 in
            var clean = 0  // start of the bytes not yet copied
            var k = firstSpecial(in: utf8, from: 0)
            while k < utf8.count {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean..<k]))
                let c = utf8[k]
                switch c {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [0x5C, c]
                case 0x0A where shortEscapes: out += [0x5C, UInt8(ascii: "n")]
                case 0x0D where shortEscapes: out += [0x5C, UInt8(ascii: "r")]
                case 0x09 where shortEscapes: out += [0x5C, UInt8(ascii: "t")]
                default: out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(c >> 4)], hex[Int(c & 0xF)]]
                }
                clean = k + 1
                k = firstSpecial(in: utf8, from: clean)
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean...]))
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The index of the first special byte of `bytes` at or after `start` (with `orNonASCII`, any byte of 0x80 or
    /// more too), or `bytes.count`.
    static func firstSpecial(in bytes: UnsafeBufferPointer<UInt8>, from start: Int, orNonASCII: Bool = false) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var i = start
        let controls = SIMD16<UInt8>(repeating: 0x20), quote = SIMD16<UInt8>(repeating: 0x22)
        let backslash = SIMD16<UInt8>(repeating: 0x5C), high = SIMD16<UInt8>(repeating: 0x80)
        while i + 16 <= bytes.count {
            let v = UnsafeRawPointer(base + i).loadUnaligned(as: SIMD16<UInt8>.self)
            var special = (v .< controls) .| (v .== quote) .| (v .== backslash)
            if orNonASCII { special .|= v .>= high }
            if any(special) { break }
            i += 16
        }
        while i < bytes.count {
            let c = bytes[i]
            if c < 0x20 || c == 0x22 || c == 0x5C || (orNonASCII && c >= 0x80) { return i }
            i += 1
        }
        return i
    }
}
