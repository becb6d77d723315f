import TesseraCore
import TesseraTestSupport
import Testing

@testable import CBOR

@Suite struct HostileInput {
    @Test func randomInputsNeverCrashAndStrictRoundTripsAreExact() throws {
        var rng = SeededRandom(stream: "CBOR.HostileInput")
        // Bias towards structural bytes so containers, heads and breaks are common.
        let interesting: [UInt8] = [
            0x18, 0x19, 0x1A, 0x1B, 0x5B, 0x7B, 0x9B, 0xBB, 0x9F, 0xBF, 0x5F, 0x7F, 0xFF,
            0xF9, 0xFA, 0xFB, 0xF8, 0x81, 0xA1, 0xC1, 0x00, 0x20, 0x41, 0x61,
        ]
        var strictAccepted = 0
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...24, using: &rng)
            let input: [UInt8] = (0..<count).map { _ in
                Bool.random(using: &rng)
                    ? interesting.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng)
            }
            do {
                let value = try CBORValue(decoding: input, options: .strict)
                strictAccepted += 1
                #expect(try value.encoded() == input, "\(Hex.encode(input)) \(SeededRandom.reproduce)")
            } catch {
                #expect(error.code == .malformedData)
            }
            do {
                let value = try CBORValue(decoding: input, options: .lenient)
                let reencoded = try value.encoded()
                // The encoding sorts map keys (RFC 8949 §4.2.1), and a map's pairs have no order in CBOR's data
                // model (§2), so the round trip is compared as data, not pair by pair.
                #expect(
                    sameData(try CBORValue(decoding: reencoded, options: .strict), value),
                    "\(Hex.encode(input)) \(SeededRandom.reproduce)")
            } catch {
                #expect(error.code == .malformedData || error.code == .invalidInput)
            }
        }
        #expect(strictAccepted > 100)
    }

    /// CBOR data-model equality: a map equals another with the same pairs in any order.
    private func sameData(_ a: CBORValue, _ b: CBORValue) -> Bool {
        switch (a, b) {
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { sameData($0, $1) }
        case (.map(let x), .map(let y)):
            guard x.count == y.count else { return false }
            var unmatched = y
            for pair in x {
                guard
                    let index = unmatched.firstIndex(where: {
                        sameData($0.key, pair.key) && sameData($0.value, pair.value)
                    })
                else { return false }
                unmatched.remove(at: index)
            }
            return true
        case (.tagged(let tx, let vx), .tagged(let ty, let vy)): return tx == ty && sameData(vx, vy)
        default: return a == b
        }
    }
}

/// Declared element counts are attacker-controlled: they must not decide how much memory is reserved.
@Suite struct DeclaredCountTests {
    @Test func reservationNeverExceedsWhatTheInputCanHold() {
        #expect(CBORParser.reservation(declared: UInt64.max, canHold: 3) == 3)
        #expect(CBORParser.reservation(declared: 1_000_000, canHold: 1_000_000) == CBORParser.maxReservation)
        #expect(CBORParser.reservation(declared: 2, canHold: 1_000) == 2)
        #expect(CBORParser.reservation(declared: 5, canHold: -1) == 0)
    }

    @Test func hugeDeclaredArrayAndMapInATinyInputAreMalformed() {
        // Array of 2^64-1 items and map of 2^32-1 pairs, each followed by one byte.
        for input: [UInt8] in [
            [0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00],
            [0xBA, 0xFF, 0xFF, 0xFF, 0xFF, 0x00],
        ] {
            #expect(throws: TesseraError.self) { try CBORValue(decoding: input, options: .lenient) }
        }
    }
}
