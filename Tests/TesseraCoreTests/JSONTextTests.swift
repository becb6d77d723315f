import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

/// The JSON reader/writer is checked against FoundationEssentials' JSONDecoder (an independent implementation).
@Suite struct JSONTextTests {
    static let valid: [String] = [
        #"{}"#, #"[]"#, #"null"#, #"true"#, #"0"#, #"-0.5"#, #"1e3"#, #"1E-2"#, #"123456789012"#,
        #"{"a":[1,2,{"b":null}],"c":"x\ny","d":false}"#,
        #"" \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 ""#,
        "  {\"jsonrpc\" : \"2.0\" ,\t\"id\":1 , \"method\":\"m\"}\r\n",
        #"["é", "😀", "\u0000"]"#,
        #"[[[[[[[[[[1]]]]]]]]]]"#,
        #"[-42, 0, 7, 9007199254740991, -9007199254740991, 1.5e300]"#,
        #"["\"starts", "ends\\", "\u001f", "mid\tdle"]"#,
    ]

    static let invalid: [String] = [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{a:1}", "01", "1.", ".5", "-", "1e", "+1", "NaN", "Infinity",
        "\"abc", "\"\u{01}\"", #""\x""#, #""\ud800""#, #""\udc00\ud800""#, "tru", "nul", "[1 2]", "{\"a\" 1}",
        "1 2", "{\"a\":1}x", "'a'",
    ]

    @Test(arguments: valid) func parsesLikeFoundation(_ text: String) throws {
        let ours = try JSONValue.parse(Array(text.utf8))
        let theirs = try Self.reference(Array(text.utf8))
        #expect(ours == theirs)
        // Round trip through our writer, read back by Foundation.
        let written = ours.serialized()
        let again = try Self.reference(written)
        #expect(again == ours)
    }

    /// RFC 8259 rejects these (Foundation is lenient with some, e.g. trailing commas, so it is no oracle here).
    @Test(arguments: invalid) func rejectsInvalidJSON(_ text: String) {
        #expect(throws: TesseraError.self) { try JSONValue.parse(Array(text.utf8)) }
    }

    @Test func rejectsInvalidUTF8AndExcessiveDepth() {
        #expect(throws: TesseraError.self) { try JSONValue.parse([0x22, 0xC3, 0x28, 0x22]) }
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        #expect(throws: TesseraError.self) { try JSONValue.parse(Array(deep.utf8)) }
    }

    /// The pull reader's `skipValue` walks exactly the documents the tree reader accepts.
    @Test(arguments: valid + invalid) func skipValueAcceptsWhatTheTreeReaderAccepts(_ text: String) {
        var reader = JSONPullReader(Array(text.utf8))
        let skipped = (try? reader.skipValue()) != nil && (try? reader.end()) != nil
        #expect(skipped == ((try? JSONValue.parse(Array(text.utf8))) != nil))
    }

    @Test func pullReaderWalksADocumentValueByValue() throws {
        let text = #" {"n": 18446744073709551615, "s": "a\"b", "u": "é", "l": [true, null, {"x": [1]}], "z": 0} "#
        var reader = JSONPullReader(Array(text.utf8))
        try reader.enterObject()
        #expect(try reader.nextKey() == "n")
        #expect(try reader.unsignedInteger() == UInt64.max)
        #expect(try reader.nextKey() == "s")
        #expect(Array(try reader.stringBytes()) == Array(#"a"b"#.utf8))
        #expect(try reader.nextKey() == "u")
        #expect(try reader.peek() == .string)
        #expect(try reader.string() == "é")
        #expect(try reader.nextKey() == "l")
        try reader.skipValue()
        #expect(try reader.nextKey() == "z")
        #expect(try reader.null() == false)
        #expect(try reader.unsignedInteger() == 0)
        #expect(try reader.nextKey() == nil)
        try reader.end()
    }

    /// Malformed input is MALFORMED_DATA naming the byte where it went wrong; nothing past it is read.
    @Test func pullReaderRefusesWhatIsNotThere() throws {
        func failure(_ text: String, _ walk: (inout JSONPullReader) throws(TesseraError) -> Void) -> TesseraError? {
            var reader = JSONPullReader(Array(text.utf8))
            do { try walk(&reader) } catch { return error }
            return nil
        }
        let cases: [(String, (inout JSONPullReader) throws(TesseraError) -> Void, String)] = [
            ("18446744073709551616", { r throws(TesseraError) in _ = try r.unsignedInteger() }, "at byte 20"),
            ("-1", { r throws(TesseraError) in _ = try r.unsignedInteger() }, "a whole number"),
            ("1.0", { r throws(TesseraError) in _ = try r.unsignedInteger() }, "a whole number"),
            (
                "01",
                { r throws(TesseraError) in
                    _ = try r.unsignedInteger(); try r.end()
                }, "at byte 1"
            ),
            ("[1]", { r throws(TesseraError) in try r.enterObject() }, "an object at byte 0"),
            (
                "{\"a\":1 \"b\":2}",
                { r throws(TesseraError) in
                    try r.enterObject(); _ = try r.nextKey(); try r.skipValue(); _ = try r.nextKey()
                }, "',' or '}' at byte 7"
            ),
            (
                "[1,2",
                { r throws(TesseraError) in
                    try r.enterArray(); while try r.nextElement() { try r.skipValue() }
                }, "at byte 4"
            ),
            (#""\u12""#, { r throws(TesseraError) in _ = try r.string() }, "four hex digits"),
            ("[\"\u{7}\"]", { r throws(TesseraError) in try r.skipValue() }, "a closing quote at byte 2"),
            (
                "{}",
                { r throws(TesseraError) in
                    try r.enterObject(); _ = try r.nextElement()
                }, "an array"
            ),
        ]
        for (text, walk, expected) in cases {
            let error = try #require(failure(text, walk), "\(text)")
            #expect(error.code == .malformedData && error.message.contains(expected), "\(text): \(error.message)")
        }
        // Invalid UTF-8 bytes (not expressible in a Swift string literal).
        var reader = JSONPullReader([0x22, 0xC3, 0x28, 0x22])
        #expect(throws: TesseraError.self) { try reader.stringBytes() }
        let deep = Array((String(repeating: "[", count: 600) + String(repeating: "]", count: 600)).utf8)
        var deepReader = JSONPullReader(deep)
        #expect(throws: TesseraError.self) { try deepReader.skipValue() }
    }

    /// Random documents: `skipValue` consumes exactly one value, and `value` reads it back as written.
    @Test func pullReaderReadsRandomDocuments() throws {
        var g = SeededRandom(stream: "JSONPullReader")
        func random(_ depth: Int) -> JSONValue {
            switch Int.random(in: 0..<(depth > 3 ? 4 : 6), using: &g) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &g))
            case 2: return .number(Double(Int.random(in: -1_000_000...1_000_000, using: &g)))
            case 3:
                let scalars = (0..<Int.random(in: 0...8, using: &g)).map { _ in
                    ["a", "\"", "\\", "\n", "é", "😀", "\u{1}", "/"].randomElement(using: &g)!
                }
                return .string(scalars.joined())
            case 4: return .array((0..<Int.random(in: 0...4, using: &g)).map { _ in random(depth + 1) })
            default:
                return .object(
                    Dictionary(
                        (0..<Int.random(in: 0...4, using: &g)).map { ("k\($0)", random(depth + 1)) },
                        uniquingKeysWith: { a, _ in a }))
            }
        }
        for _ in 0..<200 {
            let value = random(0)
            let bytes = value.serialized() + Array(" ,".utf8)
            var skipper = JSONPullReader(bytes)
            try skipper.skipValue()
            #expect(skipper.offset == bytes.count - 2, "\(SeededRandom.reproduce)")
            var reader = JSONPullReader(bytes)
            #expect(try reader.value() == value, "\(SeededRandom.reproduce)")
        }
    }

    @Test func writerOutputIsCompactSortedAndEscaped() {
        let v: JSONValue = ["b": 1, "a": ["x\"y\\z\n\u{01}é", 2.5, nil, true]]
        #expect(String(decoding: v.serialized(), as: UTF8.self) == #"{"a":["x\"y\\z\n\u0001é",2.5,null,true],"b":1}"#)
    }

    /// Specials at every position around the 16-byte blocks of the scan, and non-ASCII text, each way round.
    @Test func stringsRoundTripAndEscapeLikeFoundationAtEveryOffset() throws {
        let specials: [Character] = ["\"", "\\", "\n", "\u{01}", "\u{1F}", "é", "€"]
        for length in [15, 16, 17, 31, 32, 33, 48] {
            for position in 0..<length {
                for special in specials {
                    var text = String(repeating: "a", count: length)
                    let index = text.index(text.startIndex, offsetBy: position)
                    text.replaceSubrange(index...index, with: String(special))
                    let written = JSONValue.string(text).serialized()
                    #expect(try Self.reference(written) == .string(text))
                    #expect(try JSONValue.parse(written) == .string(text))
                }
            }
        }
        let control = "\"" + String(repeating: "a", count: 20) + "\u{01}\""
        #expect(throws: TesseraError.self) { try JSONValue.parse(Array(control.utf8)) }
    }

    /// `bytes` as FoundationEssentials' JSONDecoder reads them.
    static func reference(_ bytes: [UInt8]) throws -> JSONValue {
        try JSONDecoder().decode(Reference.self, from: Data(bytes)).value
    }

    /// Any JSON value, decoded by JSONDecoder without our reader.
    private struct Reference: Decodable {
        let value: JSONValue

        init(from decoder: any Decoder) throws {
            if var array = try? decoder.unkeyedContainer() {
                var items: [JSONValue] = []
                while !array.isAtEnd { items.append(try array.decode(Reference.self).value) }
                value = .array(items)
            } else if let object = try? decoder.container(keyedBy: Key.self) {
                var members: [String: JSONValue] = [:]
                for key in object.allKeys {
                    members[key.stringValue] = try object.decode(Reference.self, forKey: key).value
                }
                value = .object(members)
            } else {
                let single = try decoder.singleValueContainer()
                if single.decodeNil() {
                    value = .null
                } else if let b = try? single.decode(Bool.self) {
                    value = .bool(b)
                } else if let s = try? single.decode(String.self) {
                    value = .string(s)
                } else {
                    value = .number(try single.decode(Double.self))
                }
            }
        }

        private struct Key: CodingKey {
            let stringValue: String
            init(stringValue: String) { self.stringValue = stringValue }
            var intValue: Int? { nil }
            init?(intValue: Int) { nil }
        }
    }
}

@Suite struct Base64URLTests {
    @Test func matchesFoundationOnRandomData() {
        var g = SeededRandom(stream: "Base64URLTests")
        for n in 0..<200 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
            let reference = Data(bytes).base64EncodedString()
                .replacing("+", with: "-").replacing("/", with: "_")
                .replacing("=", with: "")
            #expect(Base64URL.encode(bytes) == reference, "\(SeededRandom.reproduce)")
            // Appended to bytes already there (as a direct answer writes it), the same characters.
            var appended = Array("x".utf8)
            Base64URL.append(bytes, to: &appended)
            #expect(appended == Array(("x" + reference).utf8), "\(SeededRandom.reproduce)")
            #expect(Base64URL.decode(reference) == bytes, "\(SeededRandom.reproduce)")
            #expect(Base64URL.decode(reference + String(repeating: "=", count: (4 - reference.count % 4) % 4)) == bytes)
        }
    }

    @Test func rejectsForeignCharactersAndBadLengths() {
        #expect(Base64URL.decode("ab+c") == nil)
        #expect(Base64URL.decode("ab/c") == nil)
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("ab c") == nil)
        #expect(Base64URL.decode("QR") == nil)  // non-zero trailing bits
        #expect(Base64URL.decode("QQ") == [0x41])
        #expect(Base64URL.decode("QUE") == [0x41, 0x41])
        #expect(Base64URL.decode("QUF") == nil)  // non-zero trailing bits after two bytes
        #expect(Base64URL.decode("QUFB.UFB") == nil)
        #expect(Base64URL.decode("QUFBQ.") == nil)
        #expect(Base64URL.decode("QUFBQU.") == nil)
        #expect(Base64URL.decode("QUFBé") == nil)
        #expect(Base64URL.decode("") == [])
        #expect(Base64URL.decode("==") == [])
    }

    @Test func hexRoundTrip() {
        #expect(Hex.encode([0x00, 0xAB, 0xFF]) == "00abff")
        #expect(Hex.decode("00 AB ff") == [0x00, 0xAB, 0xFF])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
    }
}
