import APDU
import ArgumentParser
import Emulation
import FoundationEssentials
import NFC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab emulate`: a libnfc device in target mode emulates an ISO 14443-4 card for third-party readers.
struct LabEmulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulate",
        abstract: "Emulate a contactless card with a libnfc device (PN532) in target mode, logging every APDU.",
        discussion: """
            Opens the libnfc device CONNSTRING in this process and makes it behave as an ISO/IEC 14443-4 type A card (nfc_target_init with ISO 14443-4 PICC emulation: the chip answers REQA, anticollision, SELECT and RATS itself). Every command APDU a reader sends goes to the card and its answer back; the card is either the e-passport chip of a document profile (--profile, see `tessera lab make-profile`: BAC, PACE, secure messaging, active authentication) or a script of canned answers (--script). After a reader leaves, the device waits for the next one. Runs until SIGINT/SIGTERM or --duration.

            The log on stdout has one line per event: `waiting for a reader`, `activated`, `> COMMAND  NAME` and `< RESPONSE` (hex, as on the air, i.e. protected by secure messaging), `field lost: REASON`, and a final summary. --trace FILE also writes a pcap for `tessera lab trace` and Wireshark.

            SCRIPT FORMAT (one rule per line, # comments, hex with optional spaces; first match wins; no match → 6D00)
              00A4040C07A0000002471001 => 9000        exact command
              00B0 *                   => 0102 9000   command prefix
              *                        => 6A82        everything else

            LIMITS (PN53x target mode through libnfc 1.8)
              The UID is 4 bytes starting with 08 (the chip fixes the first byte).
              The ATS interface bytes are the chip's; the historical bytes are --historical-bytes.
              Commands and responses hold at most 263 bytes; longer responses become 6700 so readers step down.
              A stop while a reader is attached takes effect within about a second.

            The socket method lab.emulate does the same inside tesserad (docs/API.md).

            EXAMPLES
              tessera lab emulate --device pn532_uart:/dev/ttyUSB0 --profile /tmp/anna --trace /tmp/anna.pcap
              tessera lab emulate --device pn53x_usb:003:005 --script applet.txt --duration 60
              tessera lab pn532 --pty /tmp/pn532 --reader-mrz "$MRZ" &   # a software reader to try it with
              tessera lab emulate --device pn532_uart:/tmp/pn532 --profile /tmp/anna
            """)

    @Option(help: ArgumentHelp("The libnfc device (e.g. pn532_uart:/dev/ttyUSB0).", valueName: "CONNSTRING"))
    var device: String
    @Option(help: ArgumentHelp("Serve the e-passport of this profile directory.", valueName: "DIR"))
    var profile: String?
    @Option(help: ArgumentHelp("Serve canned answers from this script (see SCRIPT FORMAT).", valueName: "FILE"))
    var script: String?
    @Option(help: ArgumentHelp("Write an APDU trace (pcap, ISO 14443 link type) to FILE.", valueName: "FILE"))
    var trace: String?
    @Option(help: ArgumentHelp("Stop after this many seconds.", valueName: "SECONDS"))
    var duration: Int?
    @Option(help: ArgumentHelp("UID: 4 bytes in hex starting with 08.", valueName: "HEX"))
    var uid: String = "08545352"
    @Option(name: .customLong("historical-bytes"), help: ArgumentHelp("ATS historical bytes in hex.", valueName: "HEX"))
    var historicalBytes: String = ""

    func validate() throws {
        guard (profile == nil) != (script == nil) else {
            throw ValidationError("give exactly one of --profile or --script")
        }
        if let duration, duration < 1 { throw ValidationError("--duration must be at least 1") }
    }

    func run() async throws {
        let card: any VirtualCard
        let writer: APDUTraceWriter?
        let identity: NFCCardIdentity
        do throws(TesseraError) {
            if let profile {
                card = EmulatedPassport(profile: try DocumentProfile.load(directory: profile))
            } else {
                card = try ScriptedCard.load(path: script!)
            }
            guard let uidBytes = Hex.decode(uid), let historical = Hex.decode(historicalBytes) else {
                throw TesseraError.invalidInput("--uid and --historical-bytes take hex")
            }
            identity = NFCCardIdentity(uid: uidBytes, historicalBytes: historical)
            writer = try trace.map { path throws(TesseraError) in try APDUTraceWriter(path: path) }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let stop = LabSignals.install()
        let emulator: NFCCardEmulator
        let nfc: NFCDevice
        do throws(TesseraError) {
            nfc = try await NFCDevice.open(device, context: try NFCContext.shared())
            emulator = try NFCCardEmulator(device: nfc, card: card, identity: identity, trace: writer)
        } catch {
            throw LabOutput.fail(error, status: 2)
        }
        let stopper = Task {
            await LabSignals.waitForStop(stop)
            emulator.stop()
        }
        LabOutput.line("emulating on \(device) (\(nfc.name)), UID \(Hex.encode(identity.uid).uppercased())")
        let summary: NFCEmulationSummary
        do {
            summary = try await emulator.run(for: duration.map { .seconds($0) }) { LabOutput.line(Self.format($0)) }
        } catch {
            stopper.cancel()
            writer?.close()
            await nfc.close()
            throw LabOutput.fail(error, status: 2)
        }
        stopper.cancel()
        writer?.close()
        await nfc.close()
        LabOutput.line("\(summary.reason.rawValue); \(summary.exchanges) APDUs in \(summary.activations) activations")
    }

    static func format(_ event: NFCEmulationEvent) -> String {
        switch event {
        case .waiting: return "waiting for a reader"
        case .activated: return "activated"
        case .exchange(let x):
            let name = x.command.count >= 2 ? LabTrace.instruction(x.command[1]) : ""
            let stamp = String(printf: "%.3f", x.commandTime.timeIntervalSince1970)
            var text = "\(stamp) > \(Hex.encode(x.command).uppercased())" + (name.isEmpty ? "" : "  \(name)")
            text += "\n\(stamp) < \(Hex.encode(x.response).uppercased())" + (x.delivered ? "" : "  (not delivered)")
            return text
        case .fieldLost(_, _, let reason): return "field lost: \(reason)"
        }
    }
}
