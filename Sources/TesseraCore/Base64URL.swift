import Foundation

/// base64url without padding (RFC 4648 §5), as WebAuthn and the socket API use for every binary value.
public enum Base64URL {
    public static func encode<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes base64url (padding optional). Returns nil on any character outside the alphabet.
    public static func decode(_ text: String) -> [UInt8]? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !s.contains("=") || text.hasSuffix("=") else { return nil }
        s = s.replacingOccurrences(of: "=", with: "")
        if s.count % 4 == 1 { return nil }
        s += String(repeating: "=", count: (4 - s.count % 4) % 4)
        guard let d = Data(base64Encoded: s) else { return nil }
        return [UInt8](d)
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
    public static func decode(_ text: String) -> [UInt8]? {
        var out = [UInt8]()
        var high: UInt8?
        for c in text.utf8 {
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
