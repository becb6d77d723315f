import APDU
import ArgumentParser
import FoundationEssentials
import NFC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab trace FILE`: prints (and with --follow tails) an APDU trace written by `lab pn532 --trace`.
struct LabTrace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trace",
        abstract: "Print an APDU trace (pcap, ISO 14443 link type); --follow keeps reading as it grows.",
        discussion: """
            One line per frame: time, direction (> reader to card, < card to reader), hex, and for command APDUs the instruction name. The file is an ordinary pcap (LINKTYPE_ISO_14443); Wireshark shows the I-block payloads as ISO 7816 APDUs after Decode As… ISO 14443 payload → ISO 7816, or with tshark:
              mkdir -p ~/.config/wireshark
              echo 'decode_as_entry: iso14443.subdissector,0,(none),ISO 7816' >> ~/.config/wireshark/decode_as_entries
              tshark -r FILE
            """)

    @Argument(help: ArgumentHelp("The trace file.", valueName: "FILE"))
    var file: String
    @Flag(name: .shortAndLong, help: "Keep printing records as the file grows (until SIGINT).")
    var follow = false

    func run() async throws {
        var offset = 0
        var first: Date?
        while true {
            guard let data = FileManager.default.contents(atPath: file) else {
                OpenFile.standardError.write("error: cannot read \(file)\n")
                throw ExitCode(1)
            }
            let parsed: (records: [APDUTraceRecord], next: Int)
            do { parsed = try APDUTraceReader.parse([UInt8](data), from: offset) } catch {
                throw LabOutput.fail(error, status: 1)
            }
            for record in parsed.records {
                first = first ?? record.time
                LabOutput.line(Self.format(record, since: first!))
            }
            offset = parsed.next
            if !follow { return }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    static func format(_ r: APDUTraceRecord, since start: Date) -> String {
        let t = String(printf: "%9.3f", r.time.timeIntervalSince(start))
        switch r.kind {
        case .fieldOn: return "\(t)   field on"
        case .fieldOff: return "\(t)   field off"
        case .toCard:
            if let apdu = r.apdu {
                let name = apdu.count >= 2 ? instruction(apdu[1]) : ""
                return "\(t) > \(Hex.encode(apdu).uppercased())" + (name.isEmpty ? "" : "  \(name)")
            }
            return "\(t) > [14443] \(Hex.encode(r.data).uppercased())"
        case .toReader:
            if let apdu = r.apdu { return "\(t) < \(Hex.encode(apdu).uppercased())" }
            return "\(t) < [14443] \(Hex.encode(r.data).uppercased())"
        }
    }

    static func instruction(_ ins: UInt8) -> String {
        switch ins {
        case CommandAPDU.Instruction.select: return "SELECT"
        case CommandAPDU.Instruction.readBinary, CommandAPDU.Instruction.readBinaryOffsetDataObject:
            return "READ BINARY"
        case 0x84: return "GET CHALLENGE"
        case 0x82: return "EXTERNAL AUTHENTICATE"
        case 0x88: return "INTERNAL AUTHENTICATE"
        case 0x22: return "MSE"
        case 0x86, 0x87: return "GENERAL AUTHENTICATE"
        case CommandAPDU.Instruction.getResponse: return "GET RESPONSE"
        case 0x2A: return "PSO"
        default: return ""
        }
    }
}
