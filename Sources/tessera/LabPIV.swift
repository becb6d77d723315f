import ArgumentParser
import Emulation
import FoundationEssentials
import TesseraCore
import VPCD

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab emulate-piv`: an emulated PIV card in a vpcd reader of pcscd.
struct LabEmulatePIV: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulate-piv",
        abstract: "Insert an emulated PIV card (NIST SP 800-73-4) into a vpcd reader until interrupted.",
        discussion: """
            Connects an emulated PIV card to pcscd's vpcd driver (vsmartcard) at HOST:PORT, which makes the card appear in that vpcd reader; stopping (SIGINT, SIGTERM) removes it. The card keeps its state — PIN, PUK and retry counters, management key, keys, data objects — in the JSON file given with --state, so a restart is a card re-insertion. A new state file is a factory-fresh card: PIN 123456, PUK 12345678, the default 3DES management key 010203…08 ×3, a CHUID whose GUID derives from --serial, no keys. It answers SELECT, GET/PUT DATA, VERIFY, CHANGE REFERENCE DATA, RESET RETRY COUNTER, GENERAL AUTHENTICATE (management key 3DES/AES witness-challenge, ECC P-256 and RSA-1024/2048 signatures; RSA keys come in through the state file: algorithm 7 or 6, PKCS#8 DER in hex), GENERATE ASYMMETRIC KEY PAIR (P-256) and Yubico's GET SERIAL / GET METADATA. OpenSC's PIV driver (opensc-tool, piv-tool, opensc-pkcs11) recognises it.

            EXAMPLES
              tessera lab emulate-piv --vpcd 127.0.0.1:35963 --state /tmp/piv.json --serial 1234
              tessera lab emulate-piv --vpcd 127.0.0.1:35963 --state /tmp/piv.json --log-apdus
              tessera lab emulate-piv --vpcd 127.0.0.1:35963 --state /tmp/piv.json --trace /tmp/piv.pcap
              tessera lab emulate-piv --vpcd 127.0.0.1:35963 --state /tmp/piv.json --delay 87:3000
            """)

    @Option(
        help: ArgumentHelp("The vpcd reader's address (pcscd's reader.conf CHANNELID port).", valueName: "HOST:PORT"))
    var vpcd: String = "127.0.0.1:35963"
    @Option(help: ArgumentHelp("Card state file (JSON; created factory-fresh when missing).", valueName: "FILE"))
    var state: String
    @Option(
        help: ArgumentHelp(
            "Serial number of a newly created card (ignored when the state file exists).", valueName: "N"))
    var serial: UInt32 = 1
    @Flag(name: .customLong("log-apdus"), help: "Trace every APDU exchange on stderr.")
    var logAPDUs = false
    @Option(help: ArgumentHelp("Write an APDU trace (pcap, ISO 14443 link type) to FILE.", valueName: "FILE"))
    var trace: String?
    @Option(
        help: ArgumentHelp(
            "Answer commands with instruction INS (hex) only after MS milliseconds (tests: a card pulled mid-operation). Repeatable.",
            valueName: "INS:MS"))
    var delay: [String] = []

    func run() async throws {
        let (host, port) = try LabOutput.vpcdAddress(vpcd)
        var delays: [(UInt8, Int)] = []
        for d in delay {
            let parts = d.split(separator: ":")
            guard parts.count == 2, let ins = UInt8(parts[0], radix: 16), let ms = Int(parts[1]), ms >= 0 else {
                throw ValidationError("--delay takes INS:MS, e.g. 87:3000")
            }
            delays.append((ins, ms))
        }
        let card: EmulatedPIVCard
        do { card = try EmulatedPIVCard.open(stateFile: state, serial: serial) } catch {
            throw LabOutput.fail(error, status: 1)
        }
        for (ins, ms) in delays { await card.setDelay(.milliseconds(ms), forInstruction: ins) }
        let hooks = try LabOutput.vpcdHooks(trace: trace, log: logAPDUs)
        let link = VirtualCardLink(
            card: card, host: host.isEmpty ? "127.0.0.1" : host, port: port, reconnects: true,
            onExchange: hooks.exchange, onEvent: hooks.event)
        let stop = LabSignals.install()
        do { try await link.start(timeout: .seconds(10)) } catch {
            throw LabOutput.fail(error, status: 2)
        }
        LabOutput.line("inserted PIV card \(await card.state.serial) into vpcd \(host):\(port)")
        await LabSignals.waitForStop(stop)
        await link.remove()
        hooks.writer?.close()
        LabOutput.line("removed; \(await card.commands.count) APDUs served")
    }
}
