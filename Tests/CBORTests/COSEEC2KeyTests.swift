import CBOR
import TesseraCore
import Testing

/// The one COSE EC2 key codec (RFC 9052 §7, RFC 9053 §7.1.1).
@Suite struct COSEEC2KeyTests {
    let x = [UInt8](repeating: 0x11, count: 32)
    let y = [UInt8](repeating: 0x22, count: 32)

    @Test func canonicalEncodingWithAndWithoutAlg() throws {
        // {1: 2, 3: -7, -1: 1, -2: x, -3: y}: labels in core deterministic order 01 03 20 21 22.
        let withAlg = try COSEEC2Key(algorithm: -7, curve: 1, x: x, y: y)
        #expect(
            withAlg.encoded == [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + x + [0x22, 0x58, 0x20] + y
        )
        // {1: 2, -1: 1, -2: x, -3: y}: mdoc's device keys carry no alg.
        let bare = try COSEEC2Key(algorithm: nil, curve: 1, x: x, y: y)
        #expect(bare.encoded == [0xA4, 0x01, 0x02, 0x20, 0x01, 0x21, 0x58, 0x20] + x + [0x22, 0x58, 0x20] + y)
        #expect(try COSEEC2Key(decoding: withAlg.encoded) == withAlg)
        #expect(try COSEEC2Key(decoding: bare.encoded) == bare)
        // The CTAP2 key agreement key's alg (ECDH-ES+HKDF-256).
        #expect(try COSEEC2Key(algorithm: -25, curve: 1, x: x, y: y).encoded[4] == 0x38)
    }

    @Test func uncompressedPointsOfEachCurve() throws {
        for (size, curve) in [(32, Int64(1)), (48, 2), (66, 3)] {
            let point = [0x04] + [UInt8](repeating: 1, count: size) + [UInt8](repeating: 2, count: size)
            let key = try COSEEC2Key(algorithm: nil, uncompressedPoint: point)
            #expect(key.curve == curve && key.uncompressedPoint == point)
            #expect(try COSEEC2Key(key.value) == key)
        }
        #expect(throws: TesseraError.self) { try COSEEC2Key(algorithm: nil, uncompressedPoint: [0x02] + x) }
        #expect(throws: TesseraError.self) { try COSEEC2Key(algorithm: nil, uncompressedPoint: [0x03] + x + y) }
    }

    @Test func strictParsing() throws {
        let refused: [(String, CBORValue)] = [
            ("not a map", .array([1, 2])),
            ("kty OKP", [1: 1, -1: 6, -2: .byteString(x)]),
            ("no kty", [-1: 1, -2: .byteString(x), -3: .byteString(y)]),
            ("alg as text", [1: 2, 3: "ES256", -1: 1, -2: .byteString(x), -3: .byteString(y)]),
            ("unknown curve", [1: 2, -1: 4, -2: .byteString(x), -3: .byteString(y)]),
            ("short x", [1: 2, -1: 1, -2: .byteString(Array(x.dropLast())), -3: .byteString(y)]),
            ("P-384 size on P-256", [1: 2, -1: 2, -2: .byteString(x), -3: .byteString(y)]),
            ("x as text", [1: 2, -1: 1, -2: "x", -3: .byteString(y)]),
            ("no y", [1: 2, -1: 1, -2: .byteString(x)]),
        ]
        for (what, value) in refused {
            let e = #expect(throws: TesseraError.self, "\(what)") { try COSEEC2Key(value) }
            #expect(e?.code == .malformedData, "\(what)")
        }
        // Not canonical (alg before kty), or trailing bytes: the strict CBOR decoder refuses.
        let unsorted: [UInt8] =
            [0xA5, 0x03, 0x26, 0x01, 0x02, 0x20, 0x01, 0x21, 0x58, 0x20] + x + [0x22, 0x58, 0x20] + y
        #expect(throws: TesseraError.self) { try COSEEC2Key(decoding: unsorted) }
        let key = try COSEEC2Key(algorithm: -7, curve: 1, x: x, y: y)
        #expect(throws: TesseraError.self) { try COSEEC2Key(decoding: key.encoded + [0x00]) }
    }
}
