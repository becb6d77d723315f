import APDU
import TesseraCore
import Testing

private func expectMalformed(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        try body()
        Issue.record("expected MALFORMED_DATA", sourceLocation: sourceLocation)
    } catch {
        #expect((error as? TesseraError)?.code == .malformedData, "\(error)", sourceLocation: sourceLocation)
    }
}

@Suite struct TLVLengthTests {
    /// X.690 §8.1.3: short form below 128, then 81, 82, 83, 84 followed by the minimal big-endian length.
    @Test(
        arguments: [
            (0, [0x00]), (0x7F, [0x7F]), (0x80, [0x81, 0x80]), (0xFF, [0x81, 0xFF]), (0x100, [0x82, 0x01, 0x00]),
            (0xFFFF, [0x82, 0xFF, 0xFF]), (0x1_0000, [0x83, 0x01, 0x00, 0x00]), (0xFF_FFFF, [0x83, 0xFF, 0xFF, 0xFF]),
            (0x100_0000, [0x84, 0x01, 0x00, 0x00, 0x00]),
        ] as [(Int, [UInt8])])
    func minimalLengthEncoding(length: Int, octets: [UInt8]) {
        #expect(TLV.encodeLength(length) == octets)
    }

    @Test(arguments: [0, 1, 0x7F, 0x80, 0xFF, 0x100, 0x1234, 0xFFFF, 0x1_0000, 0x1_2345])
    func everyLengthFormRoundTrips(length: Int) throws {
        let value = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let bytes = TLV.encode(tag: 0x04, value: value)
        let tlv = try TLV.parse(bytes)
        #expect(tlv.tag == 0x04)
        #expect(tlv.value == value)
        #expect(tlv.encoded == bytes)
        #expect(tlv == TLV(tag: 0x04, value: value))
        #expect(try TLV.totalLength(ofPrefix: Array(bytes.prefix(6))) == bytes.count)
    }

    @Test func nonMinimalLengthsAreReadAndKeptAsRead() throws {
        let bytes: [UInt8] = [0x04, 0x83, 0x00, 0x00, 0x02, 0xAA, 0xBB]
        let tlv = try TLV.parse(bytes)
        #expect(tlv.value == [0xAA, 0xBB])
        #expect(tlv.encoded == bytes)
        #expect(TLV(tag: 0x04, value: [0xAA, 0xBB]).encoded == [0x04, 0x02, 0xAA, 0xBB])
        #expect(try TLV.parse([0x04, 0x84, 0x00, 0x00, 0x00, 0x01, 0xCC]).value == [0xCC])
    }

    @Test func parsesMultiByteTagsAndLongLengths() throws {
        let value = [UInt8](repeating: 0x41, count: 300)
        let bytes: [UInt8] = [0x5F, 0x1F, 0x82, 0x01, 0x2C] + value
        let tlv = try TLV.parse(bytes)
        #expect(tlv.tag == 0x5F1F)
        #expect(tlv.value == value)
        #expect(tlv.encoded == bytes)
        #expect(!tlv.isConstructed)
        #expect(TLV(tag: 0x5F1F, value: value).encoded == bytes)
        #expect(try TLV.totalLength(ofPrefix: [0x75, 0x82, 0x12, 0x34, 0x7F]) == 4 + 0x1234)
        #expect(try TLV.totalLength(ofPrefix: [0x75, 0x82]) == nil)
        #expect(try TLV.totalLength(ofPrefix: []) == nil)
    }
}

@Suite struct TLVTagTests {
    @Test func multiByteTags() throws {
        // 5F1F MRZ (Doc 9303 Part 10), 7F49 public key and 7F21 CV certificate (BSI TR-03110), 5FC102 PIV CHUID
        // (SP 800-73-4), and a four-byte tag.
        for (tag, wire) in [
            (0x5F1F, [0x5F, 0x1F]), (0x7F49, [0x7F, 0x49]), (0x7F21, [0x7F, 0x21]),
            (0x5FC102, [0x5F, 0xC1, 0x02]), (0x5F81_8101, [0x5F, 0x81, 0x81, 0x01]),
        ] as [(UInt32, [UInt8])] {
            #expect(TLV.tagBytes(tag) == wire)
            let bytes = wire + [0x01, 0x99]
            let tlv = try TLV.parse(bytes)
            #expect(tlv.tag == tag)
            #expect(tlv.value == [0x99])
            #expect(TLV(tag: tag, value: [0x99]).encoded == bytes)
        }
        #expect(TLV.tagHex(0x7F49) == "7F49")
        #expect(TLV.tagHex(0x06) == "06")
    }

    @Test func constructedFlag() throws {
        for tag: UInt32 in [0x30, 0x31, 0x61, 0x7C, 0xA0, 0x7F49, 0x7F21, 0x7F61] {
            #expect(TLV(tag: tag, value: []).isConstructed, "\(TLV.tagHex(tag))")
        }
        for tag: UInt32 in [0x02, 0x04, 0x06, 0x53, 0x80, 0x5F1F, 0x5F2E, 0x5FC102] {
            #expect(!TLV(tag: tag, value: []).isConstructed, "\(TLV.tagHex(tag))")
        }
        expectMalformed { _ = try TLV(tag: 0x5F1F, value: [0x04, 0x00]).children() }
    }
}

@Suite struct TLVStructureTests {
    @Test func constructedRoundTrip() throws {
        // A PIV GENERAL AUTHENTICATE template (SP 800-73-4 Part 2 §3.2.4): 7C { 82 (empty), 81 challenge }.
        let challenge = [UInt8](repeating: 0x5A, count: 32)
        let built = TLV(tag: 0x7C, children: [TLV(tag: 0x82, value: []), TLV(tag: 0x81, value: challenge)])
        #expect(built.encoded == [0x7C, 0x24, 0x82, 0x00, 0x81, 0x20] + challenge)
        let parsed = try TLV.parse(built.encoded)
        #expect(parsed == built)
        #expect(try parsed.children().map(\.tag) == [0x82, 0x81])
        #expect(try parsed.child(0x81)?.value == challenge)
        #expect(try parsed.child(0x80) == nil)
    }

    @Test func longConstructedRoundTrip() throws {
        let children = (0..<40).map { TLV(tag: 0x5F0F, value: [UInt8](repeating: UInt8($0), count: 100)) }
        let built = TLV(tag: 0x7F61, children: children)
        #expect(Array(built.encoded.prefix(5)) == [0x7F, 0x61, 0x82, 0x10, 0x18])
        #expect(try TLV.parse(built.encoded).children() == children)
        #expect(try TLV.parseAll(children.flatMap(\.encoded)) == children)
    }

    @Test func findFollowsATagPath() throws {
        let point = [0x04] + [UInt8](repeating: 0x11, count: 64)
        let response = TLV(tag: 0x7F49, children: [TLV(tag: 0x06, value: [0x2A]), TLV(tag: 0x86, value: point)]).encoded
        #expect(try TLV.find([0x7F49, 0x86], in: response)?.value == point)
        #expect(try TLV.find([0x7F49], in: response)?.encoded == response)
        #expect(try TLV.find([0x7F49, 0x87], in: response) == nil)
        #expect(try TLV.find([0x7C, 0x86], in: response) == nil)
        #expect(try TLV.find([], in: response) == nil)
        expectMalformed { _ = try TLV.find([0x7C, 0x82], in: [0x7C, 0x02, 0x82, 0x05]) }
    }

    @Test func indefiniteLengthConstructedObject() throws {
        let bytes: [UInt8] = [0x30, 0x80, 0x02, 0x01, 0x05, 0x04, 0x00, 0x00, 0x00]
        let tlv = try TLV.parse(bytes)
        #expect(tlv.value == [0x02, 0x01, 0x05, 0x04, 0x00])
        #expect(tlv.encoded == bytes)
        #expect(try tlv.children().map(\.tag) == [0x02, 0x04])
        let nested: [UInt8] = [0x30, 0x80, 0x31, 0x80, 0x02, 0x01, 0x07, 0x00, 0x00, 0x00, 0x00]
        #expect(try TLV.parse(nested).children().first?.children().first?.value == [0x07])
    }

    @Test func trailingBytes() throws {
        let bytes: [UInt8] = [0x53, 0x01, 0x07, 0x00, 0x00]
        expectMalformed { _ = try TLV.parse(bytes) }
        #expect(try TLV.parse(bytes, allowTrailing: true).value == [0x07])
    }

    /// ISO/IEC 7816-4 §5.2.2.1: '00' and 'FF' may precede, separate and follow data objects.
    @Test func cardPaddingIsSkippedOnlyWhenAsked() throws {
        let bytes: [UInt8] = [0x00, 0xFF, 0x53, 0x01, 0x07, 0x00, 0x5C, 0x01, 0x7E, 0xFF, 0xFF]
        let items = try TLV.parseAll(bytes, options: .card)
        #expect(items.map(\.tag) == [0x53, 0x5C])
        #expect(items.first(tag: 0x5C)?.value == [0x7E])
        #expect(items.first(tag: 0x99) == nil)
        expectMalformed { _ = try TLV.parseAll(bytes) }
        #expect(try TLV.parseAll([]).isEmpty)
    }
}

@Suite struct TLVHostileInputTests {
    @Test func truncatedHeadersAndValues() throws {
        expectMalformed { _ = try TLV.parse([]) }
        expectMalformed { _ = try TLV.parse([0x5F]) }
        expectMalformed { _ = try TLV.parse([0x5F, 0x1F]) }
        expectMalformed { _ = try TLV.parse([0x04, 0x82, 0x01]) }
        expectMalformed { _ = try TLV.parse([0x04, 0x84, 0x00, 0x00]) }
        expectMalformed { _ = try TLV.parse([0x61, 0x05, 0x5F, 0x1F]) }
        expectMalformed { _ = try TLV.parseAll([0x53, 0x01, 0x07, 0x5C]) }
        #expect(try TLV.totalLength(ofPrefix: [0x04, 0x82, 0x01]) == nil)
    }

    @Test func lengthsBeyondTheBuffer() {
        // Length claims 4 GiB.
        expectMalformed { _ = try TLV.parse([0x61, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]) }
        expectMalformed { _ = try TLV.parse([0x04, 0x81, 0x80] + [UInt8](repeating: 0, count: 0x7F)) }
        expectMalformed { _ = try TLV.parse([0x04, 0x82, 0x01, 0x00] + [UInt8](repeating: 0, count: 0xFF)) }
        expectMalformed { _ = try TLV.parse([0x04, 0x83, 0x01, 0x00, 0x00]) }
        // A child running past its parent.
        expectMalformed { _ = try TLV.parse([0x61, 0x03, 0x5F, 0x1F, 0x05]).children() }
    }

    @Test func overLongLengthFields() throws {
        // Length fields of 5, 8 and 127 bytes (the last is X.690's reserved FF); 8 would overflow Int arithmetic.
        expectMalformed { _ = try TLV.parse([0x04, 0x85, 0x00, 0x00, 0x00, 0x00, 0x01, 0xAA]) }
        expectMalformed { _ = try TLV.parse([0x61, 0x88, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) }
        expectMalformed { _ = try TLV.parse([0x04, 0xFF] + [UInt8](repeating: 0, count: 127)) }
        expectMalformed { _ = try TLV.totalLength(ofPrefix: [0x75, 0x85, 0x00, 0x00, 0x00, 0x00, 0x01]) }
    }

    @Test func tagsLongerThanFourBytes() {
        expectMalformed { _ = try TLV.parse([0x5F, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x00]) }
        expectMalformed { _ = try TLV.parse([0x5F, 0x81, 0x81, 0x81, 0x01, 0x01, 0x00]) }
    }

    @Test func indefiniteLengths() {
        // On a primitive object, without an end-of-contents marker, at file level, and where BER is not asked for.
        expectMalformed { _ = try TLV.parse([0x04, 0x80, 0x00, 0x00]) }
        expectMalformed { _ = try TLV.parse([0x30, 0x80, 0x02, 0x01, 0x05]) }
        expectMalformed { _ = try TLV.parse([0x30, 0x80, 0x02, 0x01, 0x05, 0x00]) }
        expectMalformed { _ = try TLV.totalLength(ofPrefix: [0x30, 0x80, 0x02, 0x01, 0x05, 0x00, 0x00]) }
        for options: TLV.ParseOptions in [[], .card] {
            expectMalformed { _ = try TLV.parse([0x30, 0x80, 0x02, 0x01, 0x05, 0x00, 0x00], options: options) }
            expectMalformed { _ = try TLV.parseAll([0x7C, 0x80, 0x82, 0x00, 0x00, 0x00], options: options) }
        }
    }

    @Test func excessiveNesting() throws {
        func nested(_ depth: Int) -> [UInt8] {
            Array([[UInt8]](repeating: [0x30, 0x80], count: depth).joined()) + [UInt8](repeating: 0, count: 2 * depth)
        }
        #expect(try TLV.parse(nested(TLV.maxNesting + 1)).tag == 0x30)
        expectMalformed { _ = try TLV.parse(nested(TLV.maxNesting + 2)) }
        expectMalformed { _ = try TLV.parse(nested(1000)) }
    }
}
