import ArgumentParser
import Emulation
import Foundation
import NFC
import PN532Emulator
import TesseraCore

/// `tessera lab pn532`: a software PN532 on a pseudo-terminal with the emulated passport in its field.
struct LabPN532: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pn532",
        abstract: "Run a software PN532 (UART) on a pty with an emulated passport in its field.",
        discussion: """
        Creates a pseudo-terminal that behaves like a PN532 board on a serial port and makes PATH a symlink to
        its slave side. libnfc's pn532_uart driver (and so nfc-list, tesserad --nfc-device) opens it:
          LIBNFC_DEFAULT_DEVICE=pn532_uart:PATH nfc-list
          tesserad --nfc-device pn532_uart:PATH ...
        The card is an ISO 14443-4 type A target (UID 08 54 53 52, SAK 20) answering with the passport from
        --profile (see `tessera lab make-profile`). Runs until SIGINT/SIGTERM.

        --remove-after-apdus N: after N answered APDUs the card leaves the field once (the next APDU gets no
        answer); it is back at the reader's next poll. --trace FILE writes a pcap (ISO 14443 link type) that
        `tessera lab trace FILE` and Wireshark read.
        """)

    @Option(help: ArgumentHelp("Symlink to create for the pty slave (use as pn532_uart:PATH).", valueName: "PATH"))
    var pty: String
    @Option(help: ArgumentHelp("Document profile directory (tessera lab make-profile).", valueName: "DIR"))
    var profile: String
    @Option(name: .customLong("remove-after-apdus"), help: ArgumentHelp("Drop the target once after N APDUs.", valueName: "N"))
    var removeAfter: Int?
    @Option(help: ArgumentHelp("Write an APDU trace (pcap) to FILE.", valueName: "FILE"))
    var trace: String?
    @Flag(name: .customLong("log-apdus"), help: "Trace every APDU exchange on stderr.")
    var logAPDUs = false

    func run() async throws {
        if let removeAfter, removeAfter < 0 { throw ValidationError("--remove-after-apdus must be ≥ 0") }
        let card: EmulatedPassport
        let writer: APDUTraceWriter?
        do {
            card = EmulatedPassport(profile: try DocumentProfile.load(directory: profile))
            writer = try trace.map { path throws(TesseraError) in try APDUTraceWriter(path: path) }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let log = logAPDUs
        let emulator: PN532Emulator
        do {
            emulator = try PN532Emulator(card: card, options: .init(removeAfterAPDUs: removeAfter), link: pty) { event in
                LabPN532.record(event, writer: writer, log: log)
            }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let stop = LabSignals.install()
        emulator.start()
        LabOutput.line("pn532 ready at \(emulator.connstring) (\(emulator.slavePath))")
        await LabSignals.waitForStop(stop)
        emulator.stop()
        writer?.close()
        LabOutput.line("stopped; \(emulator.answeredAPDUs) APDUs answered")
    }

    @Sendable static func record(_ event: PN532Emulator.Event, writer: APDUTraceWriter?, log: Bool) {
        switch event {
        case .fieldOn: writer?.fieldOn()
        case .fieldOff: writer?.fieldOff()
        case .activated(let uid, let atqa, let sak, let ats):
            writer?.activationA(uid: uid, atqa: atqa, sak: sak, ats: ats)
        case .exchange(let command, let response, let commandTime, let responseTime):
            writer?.exchange(command: command, response: response, commandTime: commandTime, responseTime: responseTime)
            if log { LabOutput.traceExchange(command, response, commandTime) }
        case .cardRemoved:
            LabOutput.line("card left the field")
        case .released:
            break
        }
    }
}
