/// A `tessera://` link handed to `enrollment.handleDeepLink`.
public enum EnrollmentDeepLink: Sendable, Equatable {
    /// The contact a one-time code binds.
    public enum Channel: String, Sendable {
        case phone, email
    }

    /// `tessera://phone-binding?otp=123456`, `tessera://email-binding?otp=123456`.
    case otp(Channel, code: String)
    /// `tessera://enroll?token=<JWS>`, optionally `&force=true` (or `false`).
    case enroll(token: String, force: Bool)

    /// Parses a link: scheme and host compared case-insensitively, an empty path or "/", the query's
    /// names and values percent-decoded, unknown parameters and a fragment ignored. Nil for any other
    /// scheme or host, a missing, empty or repeated parameter, a `force` other than "true"/"false",
    /// or invalid percent-encoding.
    public init?(url: String) {
        var text = Substring(url)
        if let hash = text.firstIndex(of: "#") { text = text[..<hash] }
        let prefix = "tessera://"
        guard text.count > prefix.count, text.prefix(prefix.count).lowercased() == prefix else { return nil }
        text = text.dropFirst(prefix.count)
        let authorityEnd = text.firstIndex { $0 == "/" || $0 == "?" } ?? text.endIndex
        let host = text[..<authorityEnd].lowercased()
        var rest = text[authorityEnd...]
        if rest.first == "/" { rest = rest.dropFirst() }
        guard rest.isEmpty || rest.first == "?" else { return nil }

        var parameters: [String: String] = [:]
        for pair in rest.dropFirst().split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.percentDecoded(parts[0]),
                let value = Self.percentDecoded(parts.count > 1 ? parts[1] : "")
            else { return nil }
            guard parameters[name] == nil else { return nil }
            parameters[name] = value
        }
        func required(_ name: String) -> String? {
            guard let v = parameters[name], !v.isEmpty else { return nil }
            return v
        }

        switch host {
        case "phone-binding", "email-binding":
            guard let code = required("otp") else { return nil }
            self = .otp(host == "phone-binding" ? .phone : .email, code: code)
        case "enroll":
            guard let token = required("token") else { return nil }
            let force: Bool
            switch parameters["force"] {
            case nil: force = false
            case "true": force = true
            case "false": force = false
            default: return nil
            }
            self = .enroll(token: token, force: force)
        default:
            return nil
        }
    }

    /// RFC 3986 §2.1 percent-decoding to UTF-8; nil for a malformed escape or invalid UTF-8.
    static func percentDecoded(_ s: Substring) -> String? {
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        func hex(_ b: UInt8) -> UInt8? {
            switch b {
            case 0x30...0x39: b - 0x30
            case 0x41...0x46: b - 0x41 + 10
            case 0x61...0x66: b - 0x61 + 10
            default: nil
            }
        }
        while let b = bytes.first {
            bytes = bytes.dropFirst()
            guard b == UInt8(ascii: "%") else { out.append(b); continue }
            guard bytes.count >= 2, let h = hex(bytes[bytes.startIndex]), let l = hex(bytes[bytes.startIndex + 1])
            else { return nil }
            out.append(h << 4 | l)
            bytes = bytes.dropFirst(2)
        }
        return String(validating: out, as: UTF8.self)
    }
}
