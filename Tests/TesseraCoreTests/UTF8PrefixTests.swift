import TesseraCore
import Testing

/// `String.utf8Prefix`: entity names cut to a byte limit without splitting a character's UTF-8 encoding.
struct UTF8PrefixTests {
    @Test func cutsAtCodePointBoundaries() {
        #expect("abc".utf8Prefix(64) == "abc")
        #expect(String(repeating: "x", count: 65).utf8Prefix(64) == String(repeating: "x", count: 64))
        // "é" is 2 bytes: 32 of them fill 64 bytes exactly; 63 bytes hold 31.
        let e = String(repeating: "é", count: 4096)
        #expect(e.utf8Prefix(64) == String(repeating: "é", count: 32))
        #expect(e.utf8Prefix(63) == String(repeating: "é", count: 31))
        // A 4-byte scalar across the limit is left out whole.
        #expect(("a" + String(repeating: "😀", count: 20)).utf8Prefix(64) == "a" + String(repeating: "😀", count: 15))
        // Combining marks are scalars of their own (a code point boundary, as CTAP 2.1 §6.1.2 asks).
        #expect("e\u{301}".utf8Prefix(1) == "e")
        #expect("".utf8Prefix(0) == "" && "abc".utf8Prefix(0) == "")
    }
}
