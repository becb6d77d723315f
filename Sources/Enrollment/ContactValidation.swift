import TesseraCore

/// Validation and masking of the contact details collected by `PHONE_INFO` and `EMAIL_INFO`.
public enum ContactValidation {
    /// E.164: removes spaces, '-', '.', '(', ')'; then "+" and 2–15 ASCII digits, the first not 0.
    /// Returns the canonical form, e.g. "+4915112345678". `INVALID_INPUT` (`details.field` "phone") otherwise.
    public static func phoneNumber(_ text: String) throws(TesseraError) -> String {
        let removed: Set<UInt8> = [0x20, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "("), UInt8(ascii: ")")]
        let bytes = Array(text.utf8).filter { !removed.contains($0) }
        guard bytes.first == UInt8(ascii: "+") else {
            throw invalid("phone", "a phone number must start with '+' and the country code (E.164)")
        }
        let digits = bytes.dropFirst()
        guard digits.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw invalid("phone", "a phone number may contain only digits after '+'")
        }
        guard (2...15).contains(digits.count) else {
            throw invalid("phone", "a phone number has 2 to 15 digits after '+' (E.164)")
        }
        guard digits.first != UInt8(ascii: "0") else {
            throw invalid("phone", "a country code never starts with 0")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// An RFC 5322 addr-spec without obsolete forms, comments or folding white space: a dot-atom or
    /// quoted-string local part (≤ 64 bytes) and a domain name (RFC 5321 labels of letters, digits and
    /// inner hyphens, ≤ 63 bytes each) or an address literal `[IPv4]` / `[IPv6:…]`; ≤ 254 bytes in all.
    /// Surrounding white space is trimmed; the domain is returned lower-cased.
    /// `INVALID_INPUT` (`details.field` "email") otherwise.
    public static func emailAddress(_ text: String) throws(TesseraError) -> String {
        var bytes = Array(text.utf8)[...]
        while let f = bytes.first, isSpace(f) { bytes = bytes.dropFirst() }
        while let l = bytes.last, isSpace(l) { bytes = bytes.dropLast() }
        guard !bytes.isEmpty else { throw invalid("email", "the email address is empty") }
        guard bytes.count <= 254 else { throw invalid("email", "an email address has at most 254 bytes") }
        guard bytes.allSatisfy({ $0 < 0x80 }) else {
            throw invalid("email", "an email address may contain only ASCII characters")
        }

        let at: Int
        if bytes.first == UInt8(ascii: "\"") {
            guard let end = quotedStringEnd(bytes) else {
                throw invalid("email", "the quoted local part is not closed or contains an invalid character")
            }
            guard end < bytes.endIndex, bytes[end] == UInt8(ascii: "@") else {
                throw invalid("email", "the quoted local part must be followed by '@'")
            }
            at = end
        } else {
            guard let i = bytes.firstIndex(of: UInt8(ascii: "@")) else {
                throw invalid("email", "an email address needs an '@'")
            }
            guard isDotAtom(bytes[..<i]) else {
                throw invalid("email", "the local part is not a valid dot-atom")
            }
            at = i
        }
        let local = bytes[..<at]
        guard local.count <= 64 else { throw invalid("email", "the local part has at most 64 bytes") }

        let domain = bytes[(at + 1)...]
        let canonicalDomain: String
        if domain.first == UInt8(ascii: "[") {
            guard let literal = addressLiteral(domain) else {
                throw invalid("email", "the domain literal is not [IPv4] or [IPv6:…]")
            }
            canonicalDomain = literal
        } else {
            let labels = domain.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            guard !domain.isEmpty, labels.allSatisfy(isDomainLabel) else {
                throw invalid("email", "the domain is not a valid domain name")
            }
            canonicalDomain = String(decoding: domain.map(lowercased), as: UTF8.self)
        }
        return String(decoding: local, as: UTF8.self) + "@" + canonicalDomain
    }

    /// The number for display in notifications: country-code digits and the last digits kept,
    /// every other digit a '•' (e.g. "+491511234567" → "+49••••••4567").
    public static func maskedPhone(_ e164: String) -> String {
        let chars = Array(e164)
        let hasPlus = chars.first == "+"
        let digits = hasPlus ? Array(chars.dropFirst()) : chars
        let n = digits.count
        guard n > 1 else { return (hasPlus ? "+" : "") + String(repeating: "•", count: n) }
        let keepStart = n >= 8 ? 2 : 1
        let keepEnd = n >= 8 ? 4 : (n >= 5 ? 2 : 0)
        return (hasPlus ? "+" : "") + String(digits.prefix(keepStart))
            + String(repeating: "•", count: n - keepStart - keepEnd) + String(digits.suffix(keepEnd))
    }

    /// The address for display: the local part's first character and "•••", then the domain
    /// (e.g. "anna@example.com" → "a•••@example.com"). The local part's length is not revealed.
    public static func maskedEmail(_ email: String) -> String {
        guard let at = email.lastIndex(of: "@") else { return "•••" }
        let first = email[..<at].first { $0 != "\"" }.map(String.init) ?? ""
        return first + "•••" + String(email[at...])
    }

    // MARK: - Grammar (RFC 5322 §3.2.3, §3.2.4, §3.4.1; RFC 5321 §4.1.2, §4.1.3)

    private static func invalid(_ field: String, _ message: String) -> TesseraError {
        TesseraError(.invalidInput, message, details: ["field": .string(field)])
    }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }

    private static func isAlpha(_ b: UInt8) -> Bool { (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) }
    private static func isDigit(_ b: UInt8) -> Bool { (0x30...0x39).contains(b) }
    private static func isHex(_ b: UInt8) -> Bool {
        isDigit(b) || (0x41...0x46).contains(b) || (0x61...0x66).contains(b)
    }
    private static func lowercased(_ b: UInt8) -> UInt8 { (0x41...0x5A).contains(b) ? b + 0x20 : b }

    /// atext: ALPHA / DIGIT / "!#$%&'*+-/=?^_`{|}~".
    private static func isAtext(_ b: UInt8) -> Bool { isAlpha(b) || isDigit(b) || atextSymbols.contains(b) }
    private static let atextSymbols = Set("!#$%&'*+-/=?^_`{|}~".utf8)

    /// 1*atext *("." 1*atext).
    private static func isDotAtom(_ s: ArraySlice<UInt8>) -> Bool {
        let parts = s.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return !s.isEmpty && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(isAtext) }
    }

    /// The index just after the closing quote of a quoted-string starting at `s.startIndex`:
    /// qtext (printable ASCII but '\' and '"'), quoted-pair ('\' + VCHAR or WSP), and WSP inside.
    private static func quotedStringEnd(_ s: ArraySlice<UInt8>) -> Int? {
        var i = s.startIndex + 1
        while i < s.endIndex {
            let b = s[i]
            switch b {
            case UInt8(ascii: "\""): return i + 1
            case UInt8(ascii: "\\"):
                guard i + 1 < s.endIndex, (0x21...0x7E).contains(s[i + 1]) || s[i + 1] == 0x20 || s[i + 1] == 0x09
                else { return nil }
                i += 2
            case 0x20, 0x09, 0x21...0x7E: i += 1
            default: return nil
            }
        }
        return nil
    }

    /// Let-dig [Ldh-str], at most 63 bytes.
    private static func isDomainLabel(_ label: ArraySlice<UInt8>) -> Bool {
        guard let f = label.first, let l = label.last, label.count <= 63 else { return false }
        return (isAlpha(f) || isDigit(f)) && (isAlpha(l) || isDigit(l))
            && label.allSatisfy { isAlpha($0) || isDigit($0) || $0 == UInt8(ascii: "-") }
    }

    /// "[" IPv4 "]" or "[IPv6:" IPv6 "]" (tag case-insensitive), canonicalised to "[IPv6:" + lower-case hex.
    private static func addressLiteral(_ s: ArraySlice<UInt8>) -> String? {
        guard s.count >= 3, s.last == UInt8(ascii: "]") else { return nil }
        let inner = s.dropFirst().dropLast()
        if isIPv4(inner) { return "[" + String(decoding: inner, as: UTF8.self) + "]" }
        let tag = Array("ipv6:".utf8)
        guard inner.count > tag.count, zip(inner.prefix(tag.count), tag).allSatisfy({ lowercased($0) == $1 }) else {
            return nil
        }
        let address = inner.dropFirst(tag.count)
        guard isIPv6(address) else { return nil }
        return "[IPv6:" + String(decoding: address.map(lowercased), as: UTF8.self) + "]"
    }

    /// Snum 3("." Snum), Snum = 1*3DIGIT with a value 0–255.
    private static func isIPv4(_ s: ArraySlice<UInt8>) -> Bool {
        let parts = s.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return parts.count == 4
            && parts.allSatisfy { p in
                (1...3).contains(p.count) && p.allSatisfy(isDigit) && p.reduce(0) { $0 * 10 + Int($1 - 0x30) } <= 255
            }
    }

    /// RFC 5321 IPv6-full / IPv6-comp / IPv6v4-full / IPv6v4-comp: eight hex groups (six before an IPv4 tail);
    /// with "::", which stands for at least two groups, at most six others (four with an IPv4 tail).
    private static func isIPv6(_ s: ArraySlice<UInt8>) -> Bool {
        let colon = UInt8(ascii: ":")
        let text = Array(s)
        var hexPart = text[...]
        var maxGroups = 8
        if let lastColon = text.lastIndex(of: colon), text[(lastColon + 1)...].contains(UInt8(ascii: ".")) {
            guard isIPv4(text[(lastColon + 1)...]) else { return false }
            maxGroups = 6
            hexPart = text[...lastColon]
            if !(hexPart.count >= 2 && hexPart[hexPart.endIndex - 2] == colon) { hexPart = hexPart.dropLast() }
        }
        func groups(_ part: ArraySlice<UInt8>) -> [ArraySlice<UInt8>]? {
            if part.isEmpty { return [] }
            let g = part.split(separator: colon, omittingEmptySubsequences: false)
            return g.allSatisfy { (1...4).contains($0.count) && $0.allSatisfy(isHex) } ? g : nil
        }
        if let i = hexPart.indices.first(where: {
            $0 + 1 < hexPart.endIndex && hexPart[$0] == colon
                && hexPart[$0 + 1] == colon
        }) {
            guard let left = groups(hexPart[..<i]), let right = groups(hexPart[(i + 2)...]) else { return false }
            return left.count + right.count <= maxGroups - 2
        }
        guard let all = groups(hexPart) else { return false }
        return all.count == maxGroups
    }
}
