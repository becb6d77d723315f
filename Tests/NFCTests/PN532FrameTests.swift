import PN532Emulator
import Testing

/// PN532 host-link framing (NXP UM0701-02 §6.2.1; the GetFirmwareVersion frame is the manual's example).
@Suite("PN532 frames")
struct PN532FrameTests {
    @Test("encodes the manual's GetFirmwareVersion frame and an extended frame")
    func encode() {
        #expect(PN532Frame.encode([0xD4, 0x02]) == [0x00, 0x00, 0xFF, 0x02, 0xFE, 0xD4, 0x02, 0x2A, 0x00])
        let long = PN532Frame.encode([0xD5, 0x41, 0x00] + [UInt8](repeating: 0xAB, count: 300))
        #expect(Array(long.prefix(8)) == [0x00, 0x00, 0xFF, 0xFF, 0xFF, 0x01, 0x2F, 0xD0])
        #expect(long.count == 8 + 303 + 2)
    }

    @Test("parses wake-up noise, split frames, extended frames, ACK/NACK and flags bad checksums")
    func parse() {
        var parser = PN532Frame.Parser()
        #expect(parser.feed([0x55, 0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0x03, 0xFD, 0xD4]).isEmpty)
        #expect(parser.feed([0x14, 0x01, 0x17, 0x00]) == [.information([0xD4, 0x14, 0x01])])
        #expect(parser.feed(PN532Frame.ack + PN532Frame.nack) == [.ack, .nack])
        let payload: [UInt8] = [0xD4, 0x40, 0x01] + [UInt8](repeating: 0x5A, count: 270)
        #expect(parser.feed(PN532Frame.encode(payload)) == [.information(payload)])
        var bad = PN532Frame.encode([0xD4, 0x02])
        bad[7] ^= 0xFF
        #expect(parser.feed(bad) == [.corrupt])
        #expect(parser.feed(PN532Frame.encode([0xD4, 0x02])) == [.information([0xD4, 0x02])])
    }
}
