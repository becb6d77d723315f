import CryptoPrimitives
import TesseraCore

/// Minimal BER-TLV helpers for secure messaging and PACE data objects (one- or two-byte tags,
/// definite lengths up to 4 length bytes). Internal to the Access code.
enum AccessTLV {
    struct Element: Equatable {
        var tag: UInt32
        var value: [UInt8]
        /// The complete encoding (tag, length, value) as it appeared.
        var encoded: [UInt8]
    }

    static func encodeLength(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        if n <= 0xFF { return [0x81, UInt8(n)] }
        if n <= 0xFFFF { return [0x82, UInt8(n >> 8), UInt8(n & 0xFF)] }
        return [0x83, UInt8(n >> 16), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
    }

    static func encode(tag: UInt32, _ value: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        if tag > 0xFF { out += [UInt8(tag >> 8), UInt8(tag & 0xFF)] } else { out.append(UInt8(tag)) }
        return out + encodeLength(value.count) + value
    }

    /// Parses the tag and length at `offset`: (tag, header length, value length). Nil when incomplete/invalid.
    static func header(_ bytes: [UInt8], at offset: Int = 0) -> (tag: UInt32, headerLength: Int, length: Int)? {
        var i = offset
        guard i < bytes.count else { return nil }
        var tag = UInt32(bytes[i])
        if bytes[i] & 0x1F == 0x1F {
            repeat {
                i += 1
                guard i < bytes.count, i - offset <= 3 else { return nil }
                tag = tag << 8 | UInt32(bytes[i])
            } while bytes[i] & 0x80 != 0
        }
        i += 1
        guard i < bytes.count else { return nil }
        let first = bytes[i]
        i += 1
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else {
            let n = Int(first & 0x7F)
            guard n >= 1, n <= 4, i + n <= bytes.count else { return nil }
            for _ in 0..<n { length = length << 8 | Int(bytes[i]); i += 1 }
        }
        return (tag, i - offset, length)
    }

    /// Parses a flat sequence of TLVs. Throws `code` on malformed input.
    static func parse(_ bytes: [UInt8], errorCode: TesseraError.Code = .malformedData) throws(TesseraError) -> [Element] {
        var out: [Element] = []
        var i = 0
        while i < bytes.count {
            guard let h = header(bytes, at: i), i + h.headerLength + h.length <= bytes.count else {
                throw TesseraError(errorCode, "malformed TLV at offset \(i)")
            }
            let start = i + h.headerLength
            out.append(Element(tag: h.tag, value: Array(bytes[start..<(start + h.length)]),
                               encoded: Array(bytes[i..<(start + h.length)])))
            i = start + h.length
        }
        return out
    }
}

/// `fixed` when given (tests), otherwise `count` secure random bytes.
func orRandom(_ fixed: [UInt8]?, _ count: Int) throws(TesseraError) -> [UInt8] {
    if let fixed { return fixed }
    return try SecureRandom.bytes(count)
}
