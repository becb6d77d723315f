import CBOR
import TesseraCore
import Testing

/// RFC 8949 Appendix A, "Examples of Encoded CBOR Data Items" (https://www.rfc-editor.org/rfc/rfc8949#appendix-A).
/// `canonical` marks items whose listed encoding is also their CTAP2 canonical form.
struct Vector: Sendable, CustomTestStringConvertible {
    let diagnostic: String
    let hex: String
    let value: CBORValue
    let canonical: Bool
    var testDescription: String { diagnostic }
}

private func v(_ diagnostic: String, _ hex: String, _ value: CBORValue, canonical: Bool = true) -> Vector {
    Vector(diagnostic: diagnostic, hex: hex, value: value, canonical: canonical)
}

private func text(_ s: String) -> CBORValue { .textString(s) }
private let oneToTwentyFive: [CBORValue] = (1...25).map { CBORValue($0) }

let rfc8949Vectors: [Vector] = [
    v("0", "00", .unsigned(0)),
    v("1", "01", .unsigned(1)),
    v("10", "0a", .unsigned(10)),
    v("23", "17", .unsigned(23)),
    v("24", "1818", .unsigned(24)),
    v("25", "1819", .unsigned(25)),
    v("100", "1864", .unsigned(100)),
    v("1000", "1903e8", .unsigned(1000)),
    v("1000000", "1a000f4240", .unsigned(1_000_000)),
    v("1000000000000", "1b000000e8d4a51000", .unsigned(1_000_000_000_000)),
    v("18446744073709551615", "1bffffffffffffffff", .unsigned(UInt64.max)),
    v("18446744073709551616", "c249010000000000000000", .tagged(2, .byteString([1, 0, 0, 0, 0, 0, 0, 0, 0]))),
    v("-18446744073709551616", "3bffffffffffffffff", .negative(UInt64.max)),
    v("-18446744073709551617", "c349010000000000000000", .tagged(3, .byteString([1, 0, 0, 0, 0, 0, 0, 0, 0]))),
    v("-1", "20", .negative(0)),
    v("-10", "29", .negative(9)),
    v("-100", "3863", .negative(99)),
    v("-1000", "3903e7", .negative(999)),
    v("0.0", "f90000", .float16(0x0000)),
    v("-0.0", "f98000", .float16(0x8000)),
    v("1.0", "f93c00", .float16(0x3C00)),
    v("1.1", "fb3ff199999999999a", .float64(1.1)),
    v("1.5", "f93e00", .float16(0x3E00)),
    v("65504.0", "f97bff", .float16(0x7BFF)),
    v("100000.0", "fa47c35000", .float32(100000.0)),
    v("3.4028234663852886e+38", "fa7f7fffff", .float32(Float.greatestFiniteMagnitude)),
    v("1.0e+300", "fb7e37e43c8800759c", .float64(1.0e300)),
    v("5.960464477539063e-8", "f90001", .float16(0x0001)),
    v("0.00006103515625", "f90400", .float16(0x0400)),
    v("-4.0", "f9c400", .float16(0xC400)),
    v("-4.1", "fbc010666666666666", .float64(-4.1)),
    v("Infinity (half)", "f97c00", .float16(0x7C00)),
    v("NaN (half)", "f97e00", .float16(0x7E00)),
    v("-Infinity (half)", "f9fc00", .float16(0xFC00)),
    v("Infinity (single)", "fa7f800000", .float32(.infinity), canonical: false),
    v("NaN (single)", "fa7fc00000", .float32(Float(bitPattern: 0x7FC0_0000)), canonical: false),
    v("-Infinity (single)", "faff800000", .float32(-.infinity), canonical: false),
    v("Infinity (double)", "fb7ff0000000000000", .float64(.infinity), canonical: false),
    v("NaN (double)", "fb7ff8000000000000", .float64(Double(bitPattern: 0x7FF8_0000_0000_0000)), canonical: false),
    v("-Infinity (double)", "fbfff0000000000000", .float64(-.infinity), canonical: false),
    v("false", "f4", .bool(false)),
    v("true", "f5", .bool(true)),
    v("null", "f6", .null),
    v("undefined", "f7", .undefined),
    v("simple(16)", "f0", .simple(CBORSimpleValue(16)!)),
    v("simple(255)", "f8ff", .simple(CBORSimpleValue(255)!)),
    v(
        "0(\"2013-03-21T20:04:00Z\")", "c074323031332d30332d32315432303a30343a30305a",
        .tagged(0, text("2013-03-21T20:04:00Z"))),
    v("1(1363896240)", "c11a514b67b0", .tagged(1, .unsigned(1_363_896_240))),
    v("1(1363896240.5)", "c1fb41d452d9ec200000", .tagged(1, .float64(1_363_896_240.5))),
    v("23(h'01020304')", "d74401020304", .tagged(23, .byteString([1, 2, 3, 4]))),
    v("24(h'6449455446')", "d818456449455446", .tagged(24, .byteString([0x64, 0x49, 0x45, 0x54, 0x46]))),
    v(
        "32(\"http://www.example.com\")", "d82076687474703a2f2f7777772e6578616d706c652e636f6d",
        .tagged(32, text("http://www.example.com"))),
    v("h''", "40", .byteString([])),
    v("h'01020304'", "4401020304", .byteString([1, 2, 3, 4])),
    v("\"\"", "60", text("")),
    v("\"a\"", "6161", text("a")),
    v("\"IETF\"", "6449455446", text("IETF")),
    v("\"\\\"\\\\\"", "62225c", text("\"\\")),
    v("\"\\u00fc\"", "62c3bc", text("\u{00FC}")),
    v("\"\\u6c34\"", "63e6b0b4", text("\u{6C34}")),
    v("\"\\ud800\\udd51\"", "64f0908591", text("\u{10151}")),
    v("[]", "80", .array([])),
    v("[1, 2, 3]", "83010203", [1, 2, 3]),
    v("[1, [2, 3], [4, 5]]", "8301820203820405", [1, [2, 3], [4, 5]]),
    v("[1, 2, ..., 25]", "98190102030405060708090a0b0c0d0e0f101112131415161718181819", .array(oneToTwentyFive)),
    v("{}", "a0", .map([])),
    v("{1: 2, 3: 4}", "a201020304", [1: 2, 3: 4]),
    v("{\"a\": 1, \"b\": [2, 3]}", "a26161016162820203", ["a": 1, "b": [2, 3]]),
    v("[\"a\", {\"b\": \"c\"}]", "826161a161626163", ["a", ["b": "c"]]),
    v(
        "{\"a\": \"A\", ..., \"e\": \"E\"}", "a56161614161626142616361436164614461656145",
        ["a": "A", "b": "B", "c": "C", "d": "D", "e": "E"]),
    v("(_ h'0102', h'030405')", "5f42010243030405ff", .byteString([1, 2, 3, 4, 5]), canonical: false),
    v("(_ \"strea\", \"ming\")", "7f657374726561646d696e67ff", text("streaming"), canonical: false),
    v("[_ ]", "9fff", .array([]), canonical: false),
    v("[_ 1, [2, 3], [_ 4, 5]]", "9f018202039f0405ffff", [1, [2, 3], [4, 5]], canonical: false),
    v("[_ 1, [2, 3], [4, 5]]", "9f01820203820405ff", [1, [2, 3], [4, 5]], canonical: false),
    v("[1, [2, 3], [_ 4, 5]]", "83018202039f0405ff", [1, [2, 3], [4, 5]], canonical: false),
    v("[1, [_ 2, 3], [4, 5]]", "83019f0203ff820405", [1, [2, 3], [4, 5]], canonical: false),
    v(
        "[_ 1, 2, ..., 25]", "9f0102030405060708090a0b0c0d0e0f101112131415161718181819ff",
        .array(oneToTwentyFive), canonical: false),
    v("{_ \"a\": 1, \"b\": [_ 2, 3]}", "bf61610161629f0203ffff", ["a": 1, "b": [2, 3]], canonical: false),
    v("[\"a\", {_ \"b\": \"c\"}]", "826161bf61626163ff", ["a", ["b": "c"]], canonical: false),
    v("{_ \"Fun\": true, \"Amt\": -2}", "bf6346756ef563416d7421ff", ["Fun": true, "Amt": -2], canonical: false),
]

@Suite struct RFC8949AppendixA {
    @Test(arguments: rfc8949Vectors)
    func decodesLeniently(_ vector: Vector) throws {
        let bytes = try #require(Hex.decode(vector.hex))
        #expect(try CBORValue(decoding: bytes, options: .lenient) == vector.value)
    }

    @Test(arguments: rfc8949Vectors.filter(\.canonical))
    func canonicalItemsRoundTrip(_ vector: Vector) throws {
        let bytes = try #require(Hex.decode(vector.hex))
        #expect(Hex.encode(try vector.value.encoded()) == vector.hex)
        #expect(try CBORValue(decoding: bytes, options: .strict) == vector.value)
    }

    @Test(arguments: rfc8949Vectors.filter { !$0.canonical })
    func nonCanonicalItemsAreRejectedInStrictMode(_ vector: Vector) throws {
        let bytes = try #require(Hex.decode(vector.hex))
        #expect(throws: TesseraError.self) { try CBORValue(decoding: bytes, options: .strict) }
    }

    @Test func floatValuesMatchTheDiagnosticNotation() throws {
        let expected: [(String, Double)] = [
            ("f90000", 0.0), ("f93c00", 1.0), ("f93e00", 1.5), ("f97bff", 65504.0), ("fa47c35000", 100000.0),
            ("fa7f7fffff", 3.4028234663852886e+38), ("f90001", 5.960464477539063e-8),
            ("f90400", 0.00006103515625), ("f9c400", -4.0), ("f97c00", .infinity), ("f9fc00", -.infinity),
            ("fb3ff199999999999a", 1.1), ("fbc010666666666666", -4.1),
        ]
        for (hex, number) in expected {
            let value = try CBORValue(decoding: try #require(Hex.decode(hex)), options: .lenient)
            #expect(value.doubleValue == number, "\(hex)")
        }
        let negativeZero = try CBORValue(decoding: [0xF9, 0x80, 0x00]).doubleValue
        #expect(negativeZero == 0 && negativeZero?.sign == .minus)
        #expect(try CBORValue(decoding: [0xF9, 0x7E, 0x00]).doubleValue?.isNaN == true)
    }

    @Test func shortestFloatSelection() throws {
        #expect(Hex.encode(try CBORValue.float(1.5).encoded()) == "f93e00")
        #expect(Hex.encode(try CBORValue.float(100000.0).encoded()) == "fa47c35000")
        #expect(Hex.encode(try CBORValue.float(1.1).encoded()) == "fb3ff199999999999a")
        #expect(Hex.encode(try CBORValue.float(.infinity).encoded()) == "f97c00")
        #expect(Hex.encode(try CBORValue.float(.nan).encoded()) == "f97e00")
        #expect(Hex.encode(try CBORValue.float(5.960464477539063e-8).encoded()) == "f90001")
        #expect(Hex.encode(try CBORValue.float(-0.0).encoded()) == "f98000")
    }
}
