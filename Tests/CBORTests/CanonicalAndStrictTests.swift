import CBOR
import TesseraCore
import Testing

private func bytes(_ hex: String) -> [UInt8] { Hex.decode(hex)! }

private func expectMalformed(
    _ hex: String, options: CBORDecodingOptions = .strict, mentioning fragment: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    do {
        let value = try CBORValue(decoding: bytes(hex), options: options)
        Issue.record("decoded \(value) from \(hex)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.code == .malformedData, sourceLocation: sourceLocation)
        #expect(
            fragment.isEmpty || error.message.contains(fragment), "\(error.message)", sourceLocation: sourceLocation)
        #expect(error.message.contains("offset"), sourceLocation: sourceLocation)
    }
}

@Suite struct CanonicalEncoding {
    @Test func integerBoundariesUseShortestHeads() throws {
        let cases: [(CBORValue, String)] = [
            (23, "17"), (24, "1818"), (255, "18ff"), (256, "190100"), (65535, "19ffff"), (65536, "1a00010000"),
            (4_294_967_295, "1affffffff"), (4_294_967_296, "1b0000000100000000"),
            (-24, "37"), (-25, "3818"), (-256, "38ff"), (-257, "390100"),
            (CBORValue(Int64.min), "3b7fffffffffffffff"),
        ]
        for (value, hex) in cases {
            #expect(Hex.encode(try value.encoded()) == hex)
            #expect(try CBORValue(decoding: bytes(hex)) == value)
        }
        let long = CBORValue.byteString([UInt8](repeating: 7, count: 300))
        #expect(Array(try long.encoded().prefix(3)) == [0x59, 0x01, 0x2C])
    }

    @Test func mapKeysSortCTAP2Style() throws {
        // CTAP 2.1 §8 "CTAP2 canonical CBOR encoding form": major type first, then length, then bytes.
        let map: CBORValue = ["b": 0, 256: 0, -1: 0, "aa": 0, 24: 0, 1: 0, .byteString([0]): 0]
        let encoded = try map.encoded()
        // 1 (01), 24 (1818), 256 (190100), -1 (20), h'00' (4100), "b" (6162), "aa" (626161)
        #expect(
            Hex.encode(encoded) == "a7" + "0100" + "181800" + "19010000" + "2000" + "410000" + "616200" + "62616100")
        #expect(try CBORValue(decoding: encoded) != map)
        #expect(try CBORValue(decoding: encoded).encoded() == encoded)
    }

    @Test func mapKeysSortLengthFirstAndBytewise() throws {
        let map: CBORValue = [256: 0, -1: 0, "a": 0]
        // RFC 7049 §3.9: -1 (20) and "a" (6161) are shorter than 256 (190100).
        #expect(Hex.encode(try map.encoded(keyOrder: .lengthFirst)) == "a3" + "2000" + "616100" + "19010000")
        // RFC 8949 §4.2.1: bytewise 19.. < 20 < 61..
        #expect(Hex.encode(try map.encoded(keyOrder: .bytewise)) == "a3" + "19010000" + "2000" + "616100")
        var lengthFirst = CBORDecodingOptions.strict
        lengthFirst.keyOrder = .lengthFirst
        #expect(throws: TesseraError.self) {
            try CBORValue(decoding: bytes("a3" + "19010000" + "2000" + "616100"), options: lengthFirst)
        }
        _ = try CBORValue(decoding: bytes("a3" + "2000" + "616100" + "19010000"), options: lengthFirst)
    }

    @Test func nestedMapsAreSortedToo() throws {
        let value: CBORValue = [["z": 1, "y": 2], ["b": ["d": 0, "c": 0]]]
        #expect(Hex.encode(try value.encoded()) == "82a2617902617a01a16162a2616300616400")
    }

    @Test func duplicateKeysCannotBeEncoded() {
        let map: CBORValue = [1: "a", 1: "b"]
        #expect(throws: TesseraError.self) { try map.encoded() }
    }

    @Test func textStringsCompareByBytesNotCanonicalEquivalence() throws {
        let composed = CBORValue.textString("\u{00E9}")
        let decomposed = CBORValue.textString("e\u{0301}")
        #expect(composed != decomposed)
        let map: CBORValue = [composed: 1, decomposed: 2]
        let decoded = try CBORValue(decoding: try map.encoded())
        #expect(decoded.mapValue?.count == 2)
    }
}

@Suite struct StrictDecoding {
    @Test func rejectsDuplicateKeys() {
        expectMalformed("a2616101616102", mentioning: "duplicate map key")
        expectMalformed("a2616101616102", options: .lenient, mentioning: "duplicate map key")
        // 1 and 1 written non-canonically are still the same key.
        expectMalformed("a201011801 02", options: .lenient, mentioning: "duplicate map key")
    }

    @Test func rejectsUnsortedKeys() {
        expectMalformed("a2030401 02", mentioning: "canonical order")
        expectMalformed("a2616202616101", mentioning: "canonical order")
    }

    @Test func rejectsTrailingBytes() {
        expectMalformed("0000", mentioning: "trailing")
        expectMalformed("a0 ff", options: .lenient, mentioning: "trailing")
    }

    @Test func acceptsTrailingBytesOnlyWhenAskedOrViaPrefixDecoding() throws {
        var options = CBORDecodingOptions.strict
        options.allowTrailingBytes = true
        #expect(try CBORValue(decoding: bytes("0102"), options: options) == 1)
        let (value, end) = try CBORValue.decode(bytes("ff0a0b"), from: 1)
        #expect(value == 10 && end == 2)
    }

    @Test func rejectsIndefiniteLengths() {
        expectMalformed("9fff", mentioning: "indefinite")
        expectMalformed("5f42010243030405ff", mentioning: "indefinite")
        expectMalformed("bf6346756ef563416d7421ff", mentioning: "indefinite")
    }

    @Test func rejectsNonShortestEncodings() {
        expectMalformed("1817", mentioning: "non-shortest")
        expectMalformed("190017", mentioning: "non-shortest")
        expectMalformed("1a0000ffff", mentioning: "non-shortest")
        expectMalformed("1b00000000ffffffff", mentioning: "non-shortest")
        expectMalformed("3817", mentioning: "non-shortest")
        expectMalformed("580100", mentioning: "non-shortest")
        expectMalformed("9801 01", mentioning: "non-shortest")
        expectMalformed("d80101", mentioning: "non-shortest")
        expectMalformed("fa3fc00000", mentioning: "float16")
        expectMalformed("fb3ff8000000000000", mentioning: "shorter float")
        expectMalformed("fb40f0000000000000", mentioning: "shorter float")  // 65536.0 fits in float32
    }

    @Test func lenientAcceptsNonShortestEncodings() throws {
        #expect(try CBORValue(decoding: bytes("1b0000000000000017"), options: .lenient) == 23)
        #expect(try CBORValue(decoding: bytes("fb3ff8000000000000"), options: .lenient) == .float64(1.5))
    }

    @Test func rejectsIllFormedItemsInEveryMode() {
        for options in [CBORDecodingOptions.strict, .lenient] {
            expectMalformed("1c", options: options, mentioning: "reserved")
            expectMalformed("ff", options: options, mentioning: "break")
            expectMalformed("f818", options: options, mentioning: "simple")
            expectMalformed("1f", options: options, mentioning: "indefinite")
            expectMalformed("df00", options: options, mentioning: "indefinite")
            expectMalformed("62c328", options: options, mentioning: "UTF-8")
        }
        expectMalformed("5f6100ff", options: .lenient, mentioning: "chunk")
        expectMalformed("7f5f ff ff", options: .lenient, mentioning: "chunk")
        expectMalformed("bf01ff", options: .lenient, mentioning: "value")
    }

    @Test func truncatedInput() {
        for hex in [
            "", "18", "19 01", "1a000001", "1b00000000000001", "42 01", "63 6161", "82 01", "a1 01",
            "c1", "fa 0000", "9f 01", "5f 41", "a2 0102 03",
        ] {
            expectMalformed(hex, options: .lenient, mentioning: "")
        }
        expectMalformed("8201", mentioning: "exceeds")
        expectMalformed("82011a00", mentioning: "end of input")
    }

    @Test func hugeDeclaredLengthsFailBeforeAllocating() {
        expectMalformed("5bffffffffffffffff00", mentioning: "exceeds")
        expectMalformed("7b7fffffffffffffff", mentioning: "exceeds")
        expectMalformed("9bffffffffffffffff", mentioning: "exceeds")
        expectMalformed("bb4000000000000000 0000", mentioning: "exceeds")
        expectMalformed("9a0001000001", mentioning: "exceeds")
    }

    @Test func deepNestingIsBounded() throws {
        let depth = 100_000
        let deep = [UInt8](repeating: 0x81, count: depth) + [0x00]
        expectMalformed(Hex.encode(deep), mentioning: "nesting deeper than 32")
        expectMalformed(Hex.encode([UInt8](repeating: 0x9F, count: depth)), options: .lenient, mentioning: "nesting")
        expectMalformed(Hex.encode([UInt8](repeating: 0xC1, count: depth) + [0x00]), mentioning: "nesting")
        expectMalformed(Hex.encode([UInt8](repeating: 0xA1, count: 50)), mentioning: "nesting")

        var options = CBORDecodingOptions.strict
        options.maxDepth = 3
        _ = try CBORValue(decoding: bytes("81818100"), options: options)
        expectMalformed("8181818100", options: options, mentioning: "nesting deeper than 3")
        // The cap: at 1024, ASan builds overflowed the stack of the test's cooperative thread (make sanitize).
        options.maxDepth = 10_000_000
        expectMalformed(Hex.encode(deep), options: options, mentioning: "nesting deeper than 128")
        expectMalformed(
            Hex.encode([UInt8](repeating: 0xA1, count: depth)), options: options, mentioning: "nesting deeper than 128")
    }

    @Test func itemCountIsBounded() throws {
        var options = CBORDecodingOptions.strict
        options.maxItems = 4
        _ = try CBORValue(decoding: bytes("83010203"), options: options)
        expectMalformed("8401020304", options: options, mentioning: "more than 4")
    }

    @Test func errorsNameTheOffset() {
        do {
            _ = try CBORValue(decoding: bytes("83 01 02 1817"))
            Issue.record("accepted a non-shortest integer")
        } catch {
            #expect(error.message.contains("offset 3"))
            #expect(error.details["offset"] == .number(3))
        }
    }
}
