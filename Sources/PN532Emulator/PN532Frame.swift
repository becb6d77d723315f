/// PN532 host-link frames (NXP UM0701-02 §6.2): preamble 00, start code 00 FF, LEN, LCS, TFI + data, DCS,
/// postamble 00. Extended frames carry 00 FF FF FF LENM LENL LCS; ACK is 00 00 FF 00 FF 00, NACK 00 00 FF FF 00 00.
public enum PN532Frame {
    /// Frame identifier of host → PN532 frames.
    public static let hostToPN532: UInt8 = 0xD4
    /// Frame identifier of PN532 → host frames.
    public static let pn532ToHost: UInt8 = 0xD5
    public static let ack: [UInt8] = [0x00, 0x00, 0xFF, 0x00, 0xFF, 0x00]
    public static let nack: [UInt8] = [0x00, 0x00, 0xFF, 0xFF, 0x00, 0x00]

    /// Encodes `payload` (TFI followed by the command or response bytes) as a normal or, when longer than
    /// 255 bytes, an extended information frame.
    public static func encode(_ payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x00, 0x00, 0xFF]
        if payload.count > 255 {
            let hi = UInt8(payload.count >> 8), lo = UInt8(payload.count & 0xFF)
            out += [0xFF, 0xFF, hi, lo, 0 &- (hi &+ lo)]
        } else {
            out += [UInt8(payload.count), 0 &- UInt8(payload.count)]
        }
        out += payload
        out.append(0 &- payload.reduce(0, &+))
        out.append(0x00)
        return out
    }

    /// A unit read from the host link.
    public enum Event: Sendable, Equatable {
        /// An information frame's payload (TFI + command code + parameters).
        case information([UInt8])
        case ack
        case nack
        /// A frame whose length or data checksum is wrong (a PN532 ignores it).
        case corrupt
    }

    /// Incremental parser for the host → PN532 direction. Bytes outside frames (wake-up 0x55 sequences,
    /// padding zeros) are skipped.
    public struct Parser: Sendable {
        private var buffer: [UInt8] = []
        public init() {}

        /// Appends received bytes and returns every complete event.
        public mutating func feed(_ bytes: [UInt8]) -> [Event] {
            buffer += bytes
            var events: [Event] = []
            while let event = next() { events.append(event) }
            return events
        }

        private mutating func next() -> Event? {
            // Find the start code 00 FF.
            var start: Int?
            var i = 0
            while i + 1 < buffer.count {
                if buffer[i] == 0x00 && buffer[i + 1] == 0xFF { start = i + 2; break }
                i += 1
            }
            guard let s = start else {
                // Keep a trailing 00 that may begin a start code.
                if buffer.last == 0x00 { buffer = [0x00] } else { buffer.removeAll() }
                return nil
            }
            let b = buffer
            guard b.count >= s + 2 else { return nil }
            if b[s] == 0x00 && b[s + 1] == 0xFF { buffer.removeFirst(min(b.count, s + 3)); return .ack }
            if b[s] == 0xFF && b[s + 1] == 0x00 { buffer.removeFirst(min(b.count, s + 3)); return .nack }
            var length: Int
            var dataStart: Int
            if b[s] == 0xFF && b[s + 1] == 0xFF {
                guard b.count >= s + 5 else { return nil }
                length = Int(b[s + 2]) << 8 | Int(b[s + 3])
                guard b[s + 2] &+ b[s + 3] &+ b[s + 4] == 0 else { buffer.removeFirst(s); return .corrupt }
                dataStart = s + 5
            } else {
                length = Int(b[s])
                guard b[s] &+ b[s + 1] == 0 else { buffer.removeFirst(s); return .corrupt }
                dataStart = s + 2
            }
            guard b.count >= dataStart + length + 1 else { return nil }
            let payload = Array(b[dataStart..<(dataStart + length)])
            let dcs = b[dataStart + length]
            // Consume the postamble too when it has arrived.
            let end = dataStart + length + 1
            buffer.removeFirst(b.count > end && b[end] == 0x00 ? end + 1 : end)
            guard payload.reduce(dcs, &+) == 0 else { return .corrupt }
            return .information(payload)
        }
    }
}
