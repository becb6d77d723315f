import Foundation
import TesseraCore
import TesseraTestSupport
import Testing

/// The JSON reader/writer is checked against Foundation's JSONSerialization (an independent implementation).
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
        let theirs = try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
        #expect(ours == Self.convert(theirs))
        // Round trip through our writer, read back by Foundation.
        let written = ours.serialized()
        let again = try JSONSerialization.jsonObject(with: Data(written), options: [.fragmentsAllowed])
        #expect(Self.convert(again) == ours)
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
                    let reference = try JSONSerialization.jsonObject(with: Data(written), options: .fragmentsAllowed)
                    #expect(reference as? String == text)
                    #expect(try JSONValue.parse(written) == .string(text))
                }
            }
        }
        let control = "\"" + String(repeating: "a", count: 20) + "\u{01}\""
        #expect(throws: TesseraError.self) { try JSONValue.parse(Array(control.utf8)) }
    }

    static func convert(_ any: Any) -> JSONValue {
        switch any {
        case is NSNull: return .null
        case let n as NSNumber:
            if String(cString: n.objCType) == "c" { return .bool(n.boolValue) }
            return .number(n.doubleValue)
        case let s as String: return .string(s)
        case let a as [Any]: return .array(a.map(convert))
        case let o as [String: Any]: return .object(o.mapValues(convert))
        default: return .null
        }
    }
}

@Suite struct Base64URLTests {
    @Test func matchesFoundationOnRandomData() {
        var g = SeededRandom(stream: "Base64URLTests")
        for n in 0..<200 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
            let reference = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
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
