import APDU
import FoundationEssentials
import TesseraCore

/// An ATR offering T=0 and T=1 whose historical bytes carry card capabilities (compact-TLV tag 7) with
/// command chaining and extended Lc/Le (ISO/IEC 7816-4 §8.1.1.2.7, third software function byte = C0).
func testATR(extendedLength: Bool = true) -> [UInt8] {
    let historical: [UInt8] = [0x80, 0x73, 0x00, 0x00, extendedLength ? 0xC0 : 0x80]
    var atr: [UInt8] = [0x3B, 0x80 | UInt8(historical.count), 0x80, 0x01] + historical
    atr.append(atr.dropFirst().reduce(0, ^))  // TCK: XOR of T0 … last historical byte
    return atr
}

/// A test card: SELECT (A4) → 9000; ECHO (INS 01) returns its data; BIG (INS 02, P1P2 = n) returns n bytes at
/// once; CHAINED (INS 03, P1P2 = n) returns n bytes via 61xx + GET RESPONSE (C0) in chunks of at most 200;
/// STALL (INS 0F) answers after 5 s.
actor EchoCard: VirtualCard {
    private let atrBytes: [UInt8]
    private var pending: [UInt8] = []
    private(set) var powerOns = 0
    private(set) var commands: [[UInt8]] = []

    init(atr: [UInt8] = testATR()) { atrBytes = atr }

    var atr: [UInt8] { atrBytes }
    func powerOn() { powerOns += 1 }
    func powerOff() { pending = [] }
    func reset() { pending = [] }

    static func pattern(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) } }

    func process(_ command: [UInt8]) async -> [UInt8] {
        if let answer = answer(command) { return answer }
        // STALL (INS 0F): answers only after 5 s, so a test can pull the card mid-command.
        try? await Task.sleep(for: .seconds(5))
        return [0x90, 0x00]
    }

    private func answer(_ command: [UInt8]) -> [UInt8]? {
        commands.append(command)
        guard command.count >= 4 else { return [0x67, 0x00] }
        let ins = command[1]
        let n = Int(command[2]) << 8 | Int(command[3])
        switch ins {
        case 0xA4:
            return [0x90, 0x00]
        case 0x01:
            return Self.commandData(command) + [0x90, 0x00]
        case 0x02:
            return Self.pattern(n) + [0x90, 0x00]
        case 0x03:
            pending = Self.pattern(n)
            return nextChunk(limit: 200)
        case 0x0F:
            return nil
        case 0xC0:
            let le = command.count == 5 ? (command[4] == 0 ? 256 : Int(command[4])) : 256
            return nextChunk(limit: le)
        default:
            return [0x6D, 0x00]
        }
    }

    private func nextChunk(limit: Int) -> [UInt8] {
        let chunk = Array(pending.prefix(min(limit, 200)))
        pending.removeFirst(chunk.count)
        if pending.isEmpty { return chunk + [0x90, 0x00] }
        return chunk + [0x61, UInt8(truncatingIfNeeded: min(pending.count, 256))]
    }

    /// The data field of a short or extended case 3/4 command.
    static func commandData(_ c: [UInt8]) -> [UInt8] {
        guard c.count > 5 else { return [] }
        if c[4] == 0 && c.count >= 7 {
            let lc = Int(c[5]) << 8 | Int(c[6])
            return Array(c[7..<min(c.count, 7 + lc)])
        }
        let lc = Int(c[4])
        return Array(c[5..<min(c.count, 5 + lc)])
    }
}

/// Collects APDU exchanges seen by a VirtualCardLink hook.
final class ExchangeLog: Sendable {
    private let items = Locked<[(command: [UInt8], response: [UInt8], time: Date)]>([])

    func record(_ command: [UInt8], _ response: [UInt8], _ time: Date) {
        items.withLock { $0.append((command, response, time)) }
    }

    var all: [(command: [UInt8], response: [UInt8], time: Date)] { items.current }
}
