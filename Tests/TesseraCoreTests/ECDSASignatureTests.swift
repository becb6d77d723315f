import Crypto
import TesseraCore
import Testing

@Suite struct ECDSASignatureConversion {
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
        (
            "zero byte then high bit",
            [0x00, 0x80] + [UInt8](repeating: 0x11, count: 30) + [0x00, 0x00, 0x7F]
                + [UInt8](repeating: 0x22, count: 29)
        ),
        (
            "0x7F first byte",
            [0x7F] + [UInt8](repeating: 0xEE, count: 31) + [0x00, 0xFF] + [UInt8](repeating: 0x33, count: 30)
        ),
    ])
    func edgeCasesMatchSwiftCrypto(_ name: String, _ raw: [UInt8]) throws {
        let reference = try P256.Signing.ECDSASignature(rawRepresentation: raw)
        // Encoding edge cases: the length-only group, as "high bit" has r above the P-256 order.
        let anyOrder = ECDSASignature.Group(componentLength: 32)
        #expect(try ECDSASignature.derFromRaw(raw) == Array(reference.derRepresentation), "\(name)")
        #expect(try ECDSASignature.rawFromDER(Array(reference.derRepresentation), group: anyOrder) == raw, "\(name)")
    }

    @Test func handBuiltMinimalEncoding() throws {
        let raw = [UInt8](repeating: 0, count: 31) + [0x01] + [0x80] + [UInt8](repeating: 0, count: 31)
        let expected: [UInt8] =
            [0x30, 0x26, 0x02, 0x01, 0x01, 0x02, 0x21, 0x00, 0x80] + [UInt8](repeating: 0, count: 31)
        #expect(try ECDSASignature.derFromRaw(raw) == expected)
    }

    @Test func largerCurvesIncludingLongFormLength() throws {
        let p384 = try P384.Signing.PrivateKey().signature(for: [1, 2, 3])
        #expect(try ECDSASignature.derFromRaw(Array(p384.rawRepresentation)) == Array(p384.derRepresentation))
        #expect(
            try ECDSASignature.rawFromDER(Array(p384.derRepresentation), group: .p384) == Array(p384.rawRepresentation))

        let key521 = P521.Signing.PrivateKey()
        for i in 0..<20 {
            let p521 = try key521.signature(for: [UInt8(i)])
            let der = Array(p521.derRepresentation)
            #expect(try ECDSASignature.derFromRaw(Array(p521.rawRepresentation)) == der)
            #expect(try ECDSASignature.rawFromDER(der, group: .p521) == Array(p521.rawRepresentation))
        }
        let maximal = [0x01] + [UInt8](repeating: 0xFF, count: 65) + [0x01] + [UInt8](repeating: 0xFF, count: 65)
        #expect(try ECDSASignature.derFromRaw(maximal).prefix(3) == [0x30, 0x81, 0x88])
    }

    @Test func rejectsBadRawInput() {
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([]) }
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 63)) }
        #expect(throws: TesseraError.self) {
            try ECDSASignature.derFromRaw([UInt8](repeating: 0, count: 32) + [UInt8](repeating: 1, count: 32))
        }
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
        #expect(
            try ECDSASignature.rawFromDER([0x30, 0x06] + one + one) == [UInt8](repeating: 0, count: 31) + [1]
                + [UInt8](repeating: 0, count: 31) + [1])
    }

    /// n − x for big-endian numbers of equal length (x ≤ n).
    private static func subtract(_ n: [UInt8], _ x: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n.count)
        var borrow = 0
        for i in stride(from: n.count - 1, through: 0, by: -1) {
            var d = Int(n[i]) - Int(x[i]) - borrow
            borrow = d < 0 ? 1 : 0
            if d < 0 { d += 256 }
            out[i] = UInt8(d)
        }
        return out
    }

    // The orders are quoted from SEC 2 v2. (r, n − s) is a valid signature exactly when n is the group order, so
    // swift-crypto accepting it ties each constant to its curve.
    @Test func groupOrdersMatchTheCurves() throws {
        let message: [UInt8] = [1, 2, 3]
        let p256 = P256.Signing.PrivateKey()
        let p384 = P384.Signing.PrivateKey()
        let p521 = P521.Signing.PrivateKey()
        let checks: [(ECDSASignature.Group, [UInt8], ([UInt8]) throws -> Bool)] = [
            (
                .p256, Array(try p256.signature(for: message).rawRepresentation),
                {
                    p256.publicKey.isValidSignature(
                        try P256.Signing.ECDSASignature(rawRepresentation: $0), for: message)
                }
            ),
            (
                .p384, Array(try p384.signature(for: message).rawRepresentation),
                {
                    p384.publicKey.isValidSignature(
                        try P384.Signing.ECDSASignature(rawRepresentation: $0), for: message)
                }
            ),
            (
                .p521, Array(try p521.signature(for: message).rawRepresentation),
                {
                    p521.publicKey.isValidSignature(
                        try P521.Signing.ECDSASignature(rawRepresentation: $0), for: message)
                }
            ),
        ]
        for (group, raw, verify) in checks {
            let n = try #require(group.order)
            let length = group.componentLength
            #expect(n.count == length && raw.count == 2 * length)
            let mirrored = Array(raw[..<length]) + Self.subtract(n, Array(raw[length...]))
            #expect(try verify(raw))
            #expect(try verify(mirrored))
            let der = try ECDSASignature.derFromRaw(mirrored, group: group)
            #expect(try ECDSASignature.rawFromDER(der, group: group) == mirrored)
            var nMinus1 = n
            nMinus1[length - 1] -= 1
            _ = try ECDSASignature.derFromRaw(nMinus1 + nMinus1, group: group)
            #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw(n + nMinus1, group: group) }
            #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw(nMinus1 + n, group: group) }
        }
    }

    @Test func rangeIsCheckedInBothModes() throws {
        let n = try #require(ECDSASignature.Group.p256.order)
        let one: [UInt8] = [0x02, 0x01, 0x01]
        let nInteger: [UInt8] = [0x02, 0x21, 0x00] + n
        for strictness in [ECDSASignature.Strictness.strict, .lenient] {
            for der in [[0x30, 0x26] + nInteger + one, [0x30, 0x26] + one + nInteger] {
                #expect(throws: TesseraError.self) { try ECDSASignature.rawFromDER(der, strictness: strictness) }
            }
            #expect(throws: TesseraError.self) {
                try ECDSASignature.rawFromDER([0x30, 0x06, 0x02, 0x01, 0x00] + one, strictness: strictness)
            }
        }
        // Without an order only the length bounds the value.
        #expect(
            try ECDSASignature.rawFromDER([0x30, 0x26] + nInteger + one, group: .init(componentLength: 32)).prefix(32)
                == n[...])
    }

    @Test func longFormLengths() throws {
        let one: [UInt8] = [0x02, 0x01, 0x01]
        let expected = [UInt8](repeating: 0, count: 31) + [1] + [UInt8](repeating: 0, count: 31) + [1]
        // Non-minimal long forms: a card's quirk, accepted only when asked for.
        for der in [
            [0x30, 0x81, 0x06] + one + one, [0x30, 0x82, 0x00, 0x06] + one + one,
            [0x30, 0x08, 0x02, 0x81, 0x01, 0x01, 0x02, 0x81, 0x01, 0x01],
        ] as [[UInt8]] {
            #expect(throws: TesseraError.self) { try ECDSASignature.rawFromDER(der) }
            #expect(try ECDSASignature.rawFromDER(der, strictness: .lenient) == expected)
        }
        // Three length octets, indefinite length, and a length longer than the input fail in both modes.
        for der in [
            [0x30, 0x83, 0x00, 0x00, 0x06] + one + one, [0x30, 0x80] + one + one + [0, 0],
            [0x30, 0x82, 0xFF, 0xFF] + one + one, [0x30, 0x81], [0x30, 0x06, 0x02, 0x81],
        ] as [[UInt8]] {
            for strictness in [ECDSASignature.Strictness.strict, .lenient] {
                #expect(throws: TesseraError.self) { try ECDSASignature.rawFromDER(der, strictness: strictness) }
            }
        }
        // P-521 needs the (minimal) long form 0x81 for its SEQUENCE: strict accepts it.
        let p521 = Array(try P521.Signing.PrivateKey().signature(for: [9]).derRepresentation)
        if p521[1] == 0x81 { #expect(try ECDSASignature.rawFromDER(p521, group: .p521).count == 132) }
    }

    @Test func lenientModeForCardQuirks() throws {
        let r: [UInt8] = [0x80] + [UInt8](repeating: 0x11, count: 31)
        let s: [UInt8] = [0x00, 0x00, 0x7F] + [UInt8](repeating: 0x22, count: 29)
        // High bit without the 0x00 pad (read as unsigned), and s padded to a fixed 32 bytes.
        let quirky: [UInt8] = [0x30, 0x44, 0x02, 0x20] + r + [0x02, 0x20] + s
        #expect(throws: TesseraError.self) { try ECDSASignature.rawFromDER(quirky) }
        #expect(try ECDSASignature.rawFromDER(quirky, strictness: .lenient) == r + s)
        // Padding beyond the component length is still only padding.
        let padded: [UInt8] = [0x30, 0x46, 0x02, 0x22, 0x00, 0x00] + r + [0x02, 0x20] + s
        #expect(try ECDSASignature.rawFromDER(padded, strictness: .lenient) == r + s)
        // Lenient is not anything-goes: trailing junk, a third INTEGER, a wrong tag, a short input all fail.
        let cases: [[UInt8]] = [
            quirky + [0x00],
            [0x30, 0x45] + Array(quirky[2...]) + [0x00],
            [0x30, 0x49, 0x02, 0x20] + r + [0x02, 0x20] + s + [0x02, 0x01, 0x01],
            [0x31] + Array(quirky[1...]),
            [0x30, 0x44, 0x04, 0x20] + r + [0x02, 0x20] + s,
            Array(quirky.dropLast()),
            [0x30, 0x44, 0x02, 0x21] + r + [0x02, 0x20] + s,
            [0x30, 0x00],
            [0x30, 0x02, 0x02, 0x00],
        ]
        for der in cases {
            #expect(throws: TesseraError.self) { try ECDSASignature.rawFromDER(der, strictness: .lenient) }
        }
    }

    @Test func rawInputMustFitTheGroup() {
        #expect(throws: TesseraError.self) {
            try ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 96), group: .p256)
        }
        #expect(throws: TesseraError.self) { try ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 134)) }
        #expect(throws: TesseraError.self) {
            try ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 32) + [UInt8](repeating: 0, count: 32))
        }
    }
}
