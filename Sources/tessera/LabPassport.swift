import ArgumentParser
import Dispatch
import Emulation
import FoundationEssentials
import ICAO
import NFC
import TesseraCore
import TesseraRuntime
import VPCD
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab make-profile`: issues a test e-passport (LDS files signed by a fresh test PKI) into a directory.
struct LabMakeProfile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-profile",
        abstract: "Issue a test e-passport into a profile directory.",
        discussion: """
            Writes a document profile to DIR (created if needed; files of an earlier profile are overwritten): profile.json, EF.COM, DG1 (the MRZ), DG2 (the portrait: --face, JPEG or JPEG 2000), DG11, DG12, DG14 (PACE infos, active authentication info), DG15 (with --aa), EF.SOD signed by a freshly generated test document signer, and EF.CardAccess when PACE is offered, EF.CardSecurity (signed, with the chip authentication keys) with PACE-CAM. The test PKI is written next to it: csca.pem is the trust anchor to give to `tesserad --csca`; the private keys (csca-key.pem, ds-key.pem, aa-key.pem) are for lab use only.

            Serve the profile with `tessera lab emulate-passport --profile DIR --vpcd HOST:PORT`.

            PACE OPTIONS (--pace, repeatable, listed in EF.CardAccess in the order given)
              <agreement>-<mapping>-<parameters>-<cipher>, e.g. ecdh-gm-p256-aes128, ecdh-gm-brainpoolp256r1-aes128,
              ecdh-gm-p256-aes256, dh-gm-2048-aes128, ecdh-im-brainpoolp256r1-aes128, ecdh-cam-p256-aes128;
              `default` is ecdh-gm-p256-aes128.
              agreement: ecdh | dh; mapping: gm (generic) | im (integrated mapping; not on p224) | cam (chip
              authentication mapping: ecdh with AES only; a static chip authentication key per curve goes into DG14
              and ca-key-<id>.bin);
              parameters: p192 p224 p256 p384 p521 brainpoolp192r1 … brainpoolp512r1 (ecdh),
              1024 2048-224 2048-256 (dh), or idN; cipher: 3des aes128 aes192 aes256.

            CHIP AUTHENTICATION (--ca, repeatable; Chip Authentication v1 announced in DG14)
              <agreement>-<parameters>-<cipher>, e.g. ecdh-p256-aes128, ecdh-brainpoolp256r1-3des, dh-2048-aes128;
              the chip gets one static key per parameter set (shared with PACE-CAM on the same curve), written to
              ca-key-<id>.bin, with its public key in DG14 (keyId = parameter id).

            EXAMPLES
              tessera lab make-profile /tmp/anna --mrz 'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<
              L898902C36UTO7408122F1204159ZE184226B<<<<<10'
              tessera lab make-profile /tmp/pace --mrz "$MRZ" --can 123456 --pace ecdh-gm-brainpoolp256r1-aes128 --no-bac --aa
              tessera lab make-profile /tmp/big --mrz "$MRZ" --face face.jpg --photo-padding 20000
              tessera lab make-profile /tmp/holder --mrz "$MRZ" --face holder.jp2
              tessera lab make-profile /tmp/ca --mrz "$MRZ" --ca ecdh-p256-aes128 --aa
            """)

    @Argument(help: ArgumentHelp("Profile directory.", valueName: "DIR"))
    var directory: String
    @Option(
        help: ArgumentHelp("The MRZ as printed: lines separated by a newline (TD1, TD2 or TD3).", valueName: "TEXT"))
    var mrz: String
    @Option(
        name: [.customLong("face"), .customLong("photo")],
        help: ArgumentHelp(
            "The portrait for DG2, a JPEG or JPEG 2000 file (default: a small built-in portrait); --photo is the older name.",
            valueName: "IMAGE"))
    var photo: String?
    @Option(help: ArgumentHelp("Card access number for PACE with the CAN.", valueName: "N"))
    var can: String?
    @Option(
        name: .customLong("pace"),
        help: ArgumentHelp("PACE configuration to offer (repeatable; see PACE OPTIONS).", valueName: "OPTION"))
    var pace: [String] = []
    @Option(
        name: .customLong("ca"),
        help: ArgumentHelp(
            "Chip Authentication v1 protocol to announce in DG14 (repeatable; see CHIP AUTHENTICATION).",
            valueName: "OPTION"))
    var chipAuthentication: [String] = []
    @Flag(name: .customLong("no-bac"), help: "Do not offer BAC (needs at least one --pace).")
    var noBAC = false
    @Flag(name: .customLong("aa"), help: "Give the chip an active authentication key (DG15).")
    var activeAuthentication = false
    @Option(
        help: ArgumentHelp(
            "Key algorithm of the test PKI and the AA key: p256, p384, brainpoolP256r1, brainpoolP384r1, rsa2048, rsaPSS2048.",
            valueName: "ALG"))
    var algorithm = "p256"
    @Option(
        name: .customLong("photo-padding"),
        help: ArgumentHelp(
            "Pad the JPEG with comment segments to about this many bytes (large DG2 for benchmarks).",
            valueName: "BYTES"))
    var photoPadding: Int?

    func run() async throws {
        guard let alg = TestKeyAlgorithm.allCases.first(where: { $0.rawValue.lowercased() == algorithm.lowercased() })
        else {
            throw ValidationError(
                "unknown --algorithm \(algorithm); one of "
                    + TestKeyAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))
        }
        var options: [PACEOption] = []
        for text in pace {
            do { options.append(try PACEOption(parsing: text)) } catch { throw ValidationError(error.message) }
        }
        var caOptions: [ChipAuthenticationOption] = []
        for text in chipAuthentication {
            do { caOptions.append(try ChipAuthenticationOption(parsing: text)) } catch {
                throw ValidationError(error.message)
            }
        }
        var image: [UInt8]?
        if let photo {
            guard let data = FileManager.default.contents(atPath: photo) else {
                throw ValidationError("cannot read \(photo)")
            }
            image = [UInt8](data)
        }
        let profile: DocumentProfile
        do {
            profile = try DocumentProfile.make(
                directory: directory, mrz: mrz, photoJPEG: image, can: can,
                access: AccessOptions(bac: !noBAC, pace: options, chipAuthentication: caOptions), algorithm: alg,
                activeAuthentication: activeAuthentication, photoPadding: photoPadding)
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let access = (profile.access.bac ? ["BAC"] : []) + profile.access.pace.map { "PACE \($0)" }
        print(
            """
            profile   \(profile.directory)
            document  \(profile.parsedMRZ.documentNumber) (\(profile.parsedMRZ.primaryIdentifier))
            access    \(access.joined(separator: ", "))\(profile.can.map { ", CAN \($0)" } ?? "")
            files     \(profile.dataGroupNumbers.map { "DG\($0)" }.joined(separator: " ")) SOD; DG2 \(profile.dataGroup(2)?.count ?? 0) bytes
            AA        \(profile.activeAuthentication ? "yes (\(alg.rawValue))" : "no")
            CA        \(profile.access.chipAuthentication.isEmpty ? "no" : profile.access.chipAuthentication.map(\.description).joined(separator: ", "))
            csca      \(profile.cscaPath)
            """)
    }
}

/// `tessera lab emulate-passport`: serves a profile as a contactless chip in a vpcd reader of pcscd.
struct LabEmulatePassport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulate-passport",
        abstract: "Insert an emulated e-passport into a vpcd reader until interrupted.",
        discussion: """
            Connects the chip built from --profile to pcscd's vpcd driver (vsmartcard) at HOST:PORT, which makes the card appear in that vpcd reader; stopping (SIGINT, SIGTERM) removes it. The chip answers BAC, PACE (as listed in the profile), secure messaging, READ BINARY (short and extended length, odd INS B1), INTERNAL AUTHENTICATE and Chip Authentication (MSE:Set KAT, MSE:Set AT + GENERAL AUTHENTICATE) when the profile has --ca. Lost links (pcscd restarting) are re-established.

            Misbehaviour for testing readers:
              --tamper-dg N           serve DG N with one byte changed (passive authentication must fail)
              --max-le N              answer 6700 to READ BINARY asking for more than N bytes
              --no-extended           refuse extended-length APDUs and do not announce them in the ATR
              --tamper-cam            PACE-CAM: corrupt the encrypted chip authentication data (the reader's
                                      chip authentication check must fail)
              --wrong-cam-key         PACE-CAM: prove a fresh key instead of the one in DG14
              --tamper-card-security  serve EF.CardSecurity with its signature changed (it must be invalid)

            Clones (the data copied, the private keys not; a reader must find each one not authentic):
              --com-omit-dg N         EF.COM does not list DG N (repeatable; the file stays readable)
              --missing-dg N          DG N answers 6A82 file not found (repeatable)
              --no-aa-key             no active authentication key: INTERNAL AUTHENTICATE answers 6D00
              --wrong-aa-key          answer INTERNAL AUTHENTICATE with a fresh key, not the one in DG15
              --hide-cam              EF.CardAccess offers no PACE-CAM (DG14 still announces it) and the chip
                                      refuses it
              --wrong-ca-key          Chip Authentication (and PACE-CAM): the chip holds a fresh key, not the one
                                      in DG14, so its answers under the new session keys do not verify
              --remove-after-apdus N  pull the card when the Nth command APDU arrives and insert it again a
                                      second later (card-removed tests)

            Quirks of real chips (--quirk NAME, repeatable; the reader must cope with each):
              no-le                   SELECT and MSE with Le are refused (6700)
              no-key-reference        MSE:Set AT with the 0x84 domain parameter reference is refused (6A80)
              mf-6a82, mf-6a87        SELECT of the master file answers 6A82 / 6A87
              pace-fails              PACE fails at the mapping step (6985); BAC still works if the profile has it
              short-responses         READ BINARY returns at most 64 bytes with 9000, whatever Le asks
              eof-6282                the READ BINARY reaching the end of a file answers 6282

            With --log-apdus every exchange is written to stderr (command and response in hex, as seen on the wire, i.e. protected by secure messaging). --trace FILE records the exchanges as a pcap (ISO 14443 link type, power on/off as field on/off) for `tessera lab trace` and Wireshark.

            EXAMPLES
              tessera lab emulate-passport --profile /tmp/anna --vpcd 127.0.0.1:35963
              tessera lab emulate-passport --profile /tmp/anna --vpcd 127.0.0.1:35963 --tamper-dg 2 --log-apdus
              tessera lab emulate-passport --profile /tmp/anna-aa --com-omit-dg 15 --no-aa-key
              tessera lab emulate-passport --profile /tmp/anna --quirk pace-fails --quirk eof-6282
            """)

    @Option(help: ArgumentHelp("Profile directory written by `tessera lab make-profile`.", valueName: "DIR"))
    var profile: String
    @Option(
        help: ArgumentHelp("The vpcd reader's address (pcscd's reader.conf CHANNELID port).", valueName: "HOST:PORT"))
    var vpcd: String = "127.0.0.1:35963"
    @Option(
        name: .customLong("tamper-dg"),
        help: ArgumentHelp("Serve this data group with one byte changed.", valueName: "N"))
    var tamperDG: Int?
    @Option(name: .customLong("max-le"), help: ArgumentHelp("Largest READ BINARY length accepted.", valueName: "N"))
    var maxLe: Int?
    @Flag(name: .customLong("no-extended"), help: "Refuse extended-length APDUs.")
    var noExtended = false
    @Flag(name: .customLong("tamper-cam"), help: "Corrupt the PACE-CAM chip authentication data.")
    var tamperCAM = false
    @Flag(
        name: [.customLong("wrong-cam-key"), .customLong("wrong-ca-key")],
        help: "PACE-CAM and Chip Authentication: prove a fresh key instead of the one in DG14.")
    var wrongCAMKey = false
    @Flag(name: .customLong("tamper-card-security"), help: "Serve EF.CardSecurity with its signature changed.")
    var tamperCardSecurity = false
    @Option(
        name: .customLong("com-omit-dg"),
        help: ArgumentHelp("Clone: EF.COM does not list this data group (repeatable).", valueName: "N"))
    var comOmitDG: [Int] = []
    @Option(
        name: .customLong("missing-dg"),
        help: ArgumentHelp("Clone: this data group answers 6A82 (repeatable).", valueName: "N"))
    var missingDG: [Int] = []
    @Flag(
        name: .customLong("no-aa-key"),
        help: "Clone: no active authentication key (INTERNAL AUTHENTICATE answers 6D00).")
    var noAAKey = false
    @Flag(name: .customLong("wrong-aa-key"), help: "Clone: answer INTERNAL AUTHENTICATE with a key other than DG15's.")
    var wrongAAKey = false
    @Flag(name: .customLong("hide-cam"), help: "Clone: EF.CardAccess hides PACE-CAM and the chip refuses it.")
    var hideCAM = false
    @Option(
        name: .customLong("remove-after-apdus"),
        help: ArgumentHelp("Pull the card at the Nth APDU, re-insert it after a second.", valueName: "N"))
    var removeAfter: Int?
    @Flag(name: .customLong("log-apdus"), help: "Trace every APDU exchange on stderr.")
    var logAPDUs = false
    @Option(help: ArgumentHelp("Write an APDU trace (pcap) to FILE.", valueName: "FILE"))
    var trace: String?
    @Option(
        name: .customLong("quirk"),
        help: ArgumentHelp("Reproduce a real-chip quirk (repeatable; see Quirks).", valueName: "NAME"))
    var quirk: [String] = []

    func run() async throws {
        let (host, port) = try LabOutput.vpcdAddress(vpcd)
        var quirks = ChipQuirks()
        for name in quirk {
            do { try quirks.enable(name) } catch { throw ValidationError(error.message) }
        }
        if let tamperDG, !(1...16).contains(tamperDG) { throw ValidationError("--tamper-dg must be 1…16") }
        if (comOmitDG + missingDG).contains(where: { !(1...16).contains($0) }) {
            throw ValidationError("--com-omit-dg and --missing-dg must be 1…16")
        }
        let loaded: DocumentProfile
        do { loaded = try DocumentProfile.load(directory: profile) } catch {
            throw LabOutput.fail(error, status: 1)
        }
        var misbehaviour = Misbehaviour(
            tamperedDataGroup: tamperDG, maxShortLe: maxLe, rejectExtendedLength: noExtended,
            tamperedChipAuthenticationData: tamperCAM, wrongChipAuthenticationKey: wrongCAMKey,
            dataGroupsHiddenFromCOM: comOmitDG, missingDataGroups: missingDG, withoutActiveAuthenticationKey: noAAKey,
            wrongActiveAuthenticationKey: wrongAAKey, hiddenChipAuthenticationMapping: hideCAM)
        misbehaviour.tamperedCardSecurity = tamperCardSecurity
        let card = EmulatedPassport(profile: loaded, misbehaviour: misbehaviour, quirks: quirks)
        let hooks = try LabOutput.vpcdHooks(trace: trace, log: logAPDUs)
        let link = VirtualCardLink(
            card: card, host: host.isEmpty ? "127.0.0.1" : host, port: port, reconnects: true,
            onExchange: hooks.exchange, onEvent: hooks.event)
        if let removeAfter {
            await card.setCommandHook { index, _ in
                guard index == removeAfter else { return }
                Task {
                    await link.remove()
                    LabOutput.line("card removed after \(removeAfter) APDUs")
                    try? await Task.sleep(for: .seconds(1))
                    do {
                        try await link.insert(timeout: .seconds(10))
                        LabOutput.line("card inserted again")
                    } catch {
                        LabOutput.line("re-insert failed: \(error)")
                    }
                }
            }
        }
        let stop = LabSignals.install()
        do { try await link.start(timeout: .seconds(10)) } catch {
            throw LabOutput.fail(error, status: 2)
        }
        LabOutput.line("inserted \(loaded.parsedMRZ.documentNumber) into vpcd \(host):\(port)")
        await LabSignals.waitForStop(stop)
        await link.remove()
        hooks.writer?.close()
        LabOutput.line("removed; \(await card.commandCount) APDUs served")
    }
}

/// Unbuffered status lines on stdout (tests read them through a pipe).
enum LabOutput {
    static func line(_ text: String) { OpenFile.standardOutput.write((text + "\n")) }

    /// Splits `--vpcd HOST:PORT` (an empty host means 127.0.0.1 to the link).
    static func vpcdAddress(_ text: String) throws -> (host: String, port: Int) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 2, let port = Int(parts.last!), (1...65535).contains(port) else {
            throw ValidationError("--vpcd must be HOST:PORT")
        }
        return (parts.dropLast().joined(separator: ":"), port)
    }

    /// Prints "error: CODE: message" on stderr and returns the exit status to throw.
    static func fail(_ error: TesseraError, status: Int32) -> ExitCode {
        OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
        return ExitCode(status)
    }

    /// Hooks for a `VirtualCardLink`: APDUs to stderr (`log`) and to a pcap trace at `trace` (power on/off recorded
    /// as field on/off). Exits with status 1 when the trace file cannot be created.
    static func vpcdHooks(trace: String?, log: Bool) throws
        -> (exchange: VirtualCardLink.ExchangeHook?, event: VirtualCardLink.EventHook?, writer: APDUTraceWriter?)
    {
        var writer: APDUTraceWriter?
        if let trace {
            do throws(TesseraError) { writer = try APDUTraceWriter(path: trace) } catch { throw fail(error, status: 1) }
        }
        guard writer != nil || log else { return (nil, nil, nil) }
        let exchange: VirtualCardLink.ExchangeHook = { [writer] command, response, time in
            writer?.exchange(command: command, response: response, commandTime: time, responseTime: Date())
            if log { traceExchange(command, response, time) }
        }
        let traceWriter = writer
        let event: VirtualCardLink.EventHook = { event in
            switch event {
            case .powerOn, .reset: traceWriter?.fieldOn()
            case .powerOff, .disconnected: traceWriter?.fieldOff()
            case .connected, .atrRequested: break
            }
        }
        return (exchange, event, traceWriter)
    }

    /// One APDU exchange as two hex lines on stderr.
    @Sendable static func traceExchange(_ command: [UInt8], _ response: [UInt8], _ time: Date) {
        let stamp = String(printf: "%.3f", time.timeIntervalSince1970)
        let text = "\(stamp) > \(Hex.encode(command).uppercased())\n\(stamp) < \(Hex.encode(response).uppercased())\n"
        OpenFile.standardError.write(text)
    }
}

/// SIGINT/SIGTERM as an async stream (the default handlers are replaced while the command runs).
enum LabSignals {
    /// The stream and the dispatch sources feeding it (keep them alive while waiting).
    static func install() -> (AsyncStream<Int32>, [any DispatchSourceSignal]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { continuation.yield(sig) }
            source.resume()
            sources.append(source)
        }
        return (stream, sources)
    }

    /// Waits for SIGINT or SIGTERM (installed before the caller starts serving, so none is missed).
    static func waitForStop(_ installed: (AsyncStream<Int32>, [any DispatchSourceSignal])) async {
        for await _ in installed.0 { break }
        for task in installed.1 { task.cancel() }
    }
}
