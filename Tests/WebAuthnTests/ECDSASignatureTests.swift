import Crypto
import Testing
import TesseraCore
import WebAuthn

@Suite struct DERConversion {
    @Test func matchesSwiftCryptoForManyRealSignatures() throws {
        let key = P256.Signing.PrivateKey()
        var sawHighBit = false
        for i in 0..<300 {
            let signature = try key.signature(for: [UInt8(i & 0xFF), UInt8(i >> 8)])
            let raw = Array(signature.rawRepresentation)
            let der = try ECDSASignature.derFromRaw(raw)
            #expect(der == Array(signature.derRepresentation))
            #expect(try ECDSASignature.rawFromDER(Array(signature.derRepresentation)) == raw)
            sawHighBit = sawHighBit || raw[0] & 0x80 != 0 || raw[32] & 0x80 != 0
        }
        #expect(sawHighBit)
    }

    @Test(arguments: [
        ("high bit in r and s", [UInt8](repeating: 0xFF, count: 32) + [0x80] + [UInt8](repeating: 0x01, count: 31)),
        ("leading zeros in r", [UInt8](repeating: 0, count: 31) + [0x01] + [UInt8](repeating: 0x42, count: 32)),
        ("zero byte then high bit", [0x00, 0x80] + [UInt8](repeating: 0x11, count: 30) + [0x00, 0x00, 0x7F] + [UInt8](repeating: 0x22, count: 29)),
        ("0x7F first byte", [0x7F] + [UInt8](repeating: 0xEE, count: 31) + [0x00, 0xFF] + [UInt8](repeating: 0x33, count: 30)),
    ])
    func edgeCasesMatchSwiftCrypto(_ name: String, _ raw: [UInt8]) throws {
        let reference = try P256.Signing.ECDSASignature(rawRepresentation: raw)
        #expect(try ECDSASignature.derFromRaw(raw) == Array(reference.derRepresentation), "\(name)")
        #expect(try ECDSASignature.rawFromDER(Array(reference.derRepresentation)) == raw, "\(name)")
    }

    @Test func handBuiltMinimalEncoding() throws {
        let raw = [UInt8](repeating: 0, count: 31) + [0x01] + [0x80] + [UInt8](repeating: 0, count: 31)
        let expected: [UInt8] = [0x30, 0x26, 0x02, 0x01, 0x01, 0x02, 0x21, 0x00, 0x80] + [UInt8](repeating: 0, count: 31)
        #expect(try ECDSASignature.derFromRaw(raw) == expected)
    }

    @Test func largerCurvesIncludingLongFormLength() throws {
        let p384 = try P384.Signing.PrivateKey().signature(for: [1, 2, 3])
        #expect(try ECDSASignature.derFromRaw(Array(p384.rawRepresentation)) == Array(p384.derRepresentation))
        #expect(try ECDSASignature.rawFromDER(Array(p384.derRepresentation), componentLength: 48) == Array(p384.rawRepresentation))

        let key521 = P521.Signing.PrivateKey()
        for i in 0..<20 {
            let p521 = try key521.signature(for: [UInt8(i)])
            let der = Array(p521.derRepresentation)
            #expect(try ECDSASignature.derFromRaw(Array(p521.rawRepresentation)) == der)
            #expect(try ECDSASignature.rawFromDER(der, componentLength: 66) == Array(p521.rawRepresentation))
        }
        let maximal = [0x01] + [UInt8](repeating: 0xFF, count: 65) + [0x01] + [UInt8](repeating: 0xFF, count: 65)
        #expect(try ECDSASignature.derFromRaw(maximal).prefix(3) == [0x30, 0x81, 0x88])
    }

    @Test func rejectsBadRawInput() {
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([]) }
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 63)) }
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([UInt8](repeating: 0, count: 32) + [UInt8](repeating: 1, count: 32)) }
    }

    @Test func rejectsNonDERSignatures() throws {
        let one: [UInt8] = [0x02, 0x01, 0x01]
        let cases: [(String, [UInt8])] = [
            ("not a sequence", [0x31, 0x06] + one + one),
            ("length mismatch", [0x30, 0x07] + one + one),
            ("trailing bytes", [0x30, 0x06] + one + one + [0x00]),
            ("non-minimal integer", [0x30, 0x07, 0x02, 0x02, 0x00, 0x01] + one),
            ("negative integer", [0x30, 0x06, 0x02, 0x01, 0x81] + one),
            ("zero integer", [0x30, 0x06, 0x02, 0x01, 0x00] + one),
            ("too long for P-256", [0x30, 0x26, 0x02, 0x21] + [UInt8](repeating: 0x01, count: 33) + one),
            ("one integer", [0x30, 0x03] + one),
            ("non-minimal sequence length", [0x30, 0x81, 0x06] + one + one),
            ("empty", []),
        ]
        for (name, der) in cases {
            do {
                _ = try ECDSASignature.rawFromDER(der)
                Issue.record("accepted \(name)")
            } catch {
                #expect(error.code == .malformedData, "\(name)")
            }
        }
        #expect(try ECDSASignature.rawFromDER([0x30, 0x06] + one + one) == [UInt8](repeating: 0, count: 31) + [1] + [UInt8](repeating: 0, count: 31) + [1])
    }
}
