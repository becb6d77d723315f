extension String {
    /// The longest prefix of at most `maxBytes` bytes of UTF-8 that does not cut a character's encoding (a code
    /// point: CTAP 2.1 §6.1.2 and WebAuthn §6.4.1's truncation of entity names).
    public func utf8Prefix(_ maxBytes: Int) -> String {
        guard utf8.count > maxBytes else { return self }
        var used = 0
        var end = unicodeScalars.startIndex
        for scalar in unicodeScalars {
            let size = UTF8.width(scalar)
            guard used + size <= maxBytes else { break }
            used += size
            end = unicodeScalars.index(after: end)
        }
        return String(unicodeScalars[..<end])
    }
}
