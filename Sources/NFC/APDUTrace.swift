import FoundationEssentials
import TesseraCore
import TesseraRuntime

/// One record of an APDU trace.
public struct APDUTraceRecord: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Reader → card; `data` is the ISO 14443 frame (for I-blocks: PCB + APDU).
        case toCard
        /// Card → reader.
        case toReader
        case fieldOn
        case fieldOff
    }
    public var time: Date
    public var kind: Kind
    public var data: [UInt8]

    public init(time: Date, kind: Kind, data: [UInt8]) { self.time = time; self.kind = kind; self.data = data }

    /// The APDU inside an I-block (PCB 0x02/0x03, no CID/NAD), or nil for activation frames.
    public var apdu: [UInt8]? {
        guard let pcb = data.first, pcb & 0xE6 == 0x02, data.count > 1 else { return nil }
        return Array(data.dropFirst())
    }
}

/// Writes APDU traces as pcap with link type LINKTYPE_ISO_14443 (264), which Wireshark/tshark decode.
///
/// Each packet carries the 4-byte ISO 14443 pseudo-header (version 0, event, big-endian length) and one frame
/// without CRC (events 0xFA reader→card, 0xFB card→reader, 0xFC field on, 0xFD field off). Activations are
/// recorded as REQA/ATQA, anticollision/UID, SELECT/SAK and RATS/ATS; every APDU exchange as a pair of
/// ISO 14443-4 I-blocks (alternating block number, no chaining). Wireshark shows the I-block payload as data
/// unless told it is ISO 7816: Decode As… → ISO 14443 payload → ISO 7816, or for tshark a `decode_as_entries`
/// file containing `decode_as_entry: iso14443.subdissector,0,(none),ISO 7816` in the configuration directory
/// (`WIRESHARK_CONFIG_DIR`). Records are flushed as they are written, so a running trace can be tailed.
public final class APDUTraceWriter: @unchecked Sendable {
    /// The pcap link type (LINKTYPE_ISO_14443).
    public static let linkType: UInt32 = 264
    /// The `decode_as_entries` line that makes Wireshark decode I-block payloads as ISO 7816 APDUs.
    public static let wiresharkDecodeAs = "decode_as_entry: iso14443.subdissector,0,(none),ISO 7816\n"

    private let file: OpenFile
    private let state = Locked((blockNumber: UInt8(0), closed: false))

    /// Creates (truncates) `path` and writes the pcap header.
    public init(path: String) throws(TesseraError) {
        do throws(OpenFile.Failure) {
            file = try OpenFile.forWriting(path, truncate: true)
        } catch {
            throw TesseraError(.invalidInput, "cannot create trace file \(path): \(error)")
        }
        var header: [UInt8] = []
        header.appendLE(UInt32(0xA1B2_C3D4))
        header.appendLE(UInt16(2)); header.appendLE(UInt16(4))
        header.appendLE(UInt32(0)); header.appendLE(UInt32(0))
        header.appendLE(UInt32(65535)); header.appendLE(Self.linkType)
        try? file.write(header)
    }

    deinit { close() }

    public func fieldOn(at time: Date = Date()) { append(.fieldOn, [], time) }
    public func fieldOff(at time: Date = Date()) { append(.fieldOff, [], time) }

    /// Records a type A activation: REQA/ATQA, anticollision/UID (cascade level 1..3), SELECT/SAK, RATS/ATS.
    /// `ats` is given with or without its length byte.
    public func activationA(uid: [UInt8], atqa: [UInt8], sak: UInt8, ats: [UInt8], at time: Date = Date()) {
        state.withLock { $0.blockNumber = 0 }
        append(.toCard, [0x26], time)
        append(.toReader, atqa.reversed(), time)  // ATQA goes LSB first on air; readers report it MSB first
        var levels: [[UInt8]] = []
        switch uid.count {
        case 7: levels = [[0x88] + uid[0..<3], Array(uid[3..<7])]
        case 10: levels = [[0x88] + uid[0..<3], [0x88] + uid[3..<6], Array(uid[6..<10])]
        default: levels = [Array(uid.prefix(4))]
        }
        let selectCodes: [UInt8] = [0x93, 0x95, 0x97]
        for (i, level) in levels.enumerated() {
            let bcc = level.reduce(0, ^)
            append(.toCard, [selectCodes[i], 0x20], time)
            append(.toReader, level + [bcc], time)
            append(.toCard, [selectCodes[i], 0x70] + level + [bcc], time)
            append(.toReader, [i == levels.count - 1 ? sak : 0x04], time)
        }
        if sak & 0x20 != 0 {
            append(.toCard, [0xE0, 0x80], time)
            let full = ats.first == UInt8(ats.count) ? ats : [UInt8(ats.count + 1)] + ats
            append(.toReader, full, time)
        }
    }

    /// Records one APDU exchange as two I-blocks. An empty `response` (the card did not answer) records only
    /// the command.
    public func exchange(command: [UInt8], response: [UInt8], commandTime: Date, responseTime: Date? = nil) {
        let pcb = state.withLock { s in
            defer { s.blockNumber ^= 1 }
            return 0x02 | s.blockNumber
        }
        append(.toCard, [pcb] + command, commandTime)
        if !response.isEmpty { append(.toReader, [pcb] + response, responseTime ?? commandTime) }
    }

    /// Flushes and closes the file (idempotent).
    public func close() {
        state.withLock { s in
            guard !s.closed else { return }
            s.closed = true
            try? file.synchronize()
            file.close()
        }
    }

    private func append(_ kind: APDUTraceRecord.Kind, _ data: [UInt8], _ time: Date) {
        let event: UInt8
        switch kind {
        case .toCard: event = 0xFA
        case .toReader: event = 0xFB
        case .fieldOn: event = 0xFC
        case .fieldOff: event = 0xFD
        }
        var packet: [UInt8] = [0x00, event, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data
        let interval = time.timeIntervalSince1970
        let seconds = UInt32(clamping: Int64(interval.rounded(.down)))
        let micros = UInt32(clamping: Int64(((interval - interval.rounded(.down)) * 1_000_000).rounded(.down)))
        var record: [UInt8] = []
        record.appendLE(seconds); record.appendLE(micros)
        record.appendLE(UInt32(packet.count)); record.appendLE(UInt32(packet.count))
        packet = record + packet
        state.withLock { s in
            guard !s.closed else { return }
            try? file.write(packet)
        }
    }
}

/// Reads traces written by `APDUTraceWriter` (and any LINKTYPE_ISO_14443 pcap).
public enum APDUTraceReader {
    /// Parses the complete records in `bytes`; returns them and the offset just after the last complete record
    /// (for tailing a growing file). Throws MALFORMED_DATA for a foreign file.
    public static func parse(_ bytes: [UInt8], from offset: Int = 0) throws(TesseraError) -> (
        records: [APDUTraceRecord], next: Int
    ) {
        var position = offset
        if position == 0 {
            guard bytes.count >= 24 else { return ([], 0) }
            guard bytes.readLE32(0) == 0xA1B2_C3D4 else {
                throw TesseraError(.malformedData, "not a little-endian microsecond pcap file")
            }
            guard bytes.readLE32(20) == APDUTraceWriter.linkType else {
                throw TesseraError(.malformedData, "pcap link type \(bytes.readLE32(20)) is not ISO 14443 (264)")
            }
            position = 24
        }
        var records: [APDUTraceRecord] = []
        while position + 16 <= bytes.count {
            let seconds = bytes.readLE32(position), micros = bytes.readLE32(position + 4)
            let length = Int(bytes.readLE32(position + 8))
            guard position + 16 + length <= bytes.count else { break }
            let packet = Array(bytes[(position + 16)..<(position + 16 + length)])
            position += 16 + length
            guard packet.count >= 4 else { continue }
            let kind: APDUTraceRecord.Kind
            switch packet[1] {
            case 0xFA, 0xFE: kind = .toCard
            case 0xFB, 0xFF: kind = .toReader
            case 0xFC: kind = .fieldOn
            case 0xFD: kind = .fieldOff
            default: continue
            }
            let time = Date(timeIntervalSince1970: Double(seconds) + Double(micros) / 1_000_000)
            records.append(APDUTraceRecord(time: time, kind: kind, data: Array(packet.dropFirst(4))))
        }
        return (records, position)
    }
}

extension [UInt8] {
    mutating func appendLE(_ v: UInt16) { append(UInt8(v & 0xFF)); append(UInt8(v >> 8)) }
    mutating func appendLE(_ v: UInt32) { for i in 0..<4 { append(UInt8((v >> (8 * UInt32(i))) & 0xFF)) } }
    func readLE32(_ at: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(self[at + $1]) << (8 * UInt32($1)) }
    }
}
