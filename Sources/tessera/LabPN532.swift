import APDU
import ArgumentParser
import Emulation
import FoundationEssentials
import ICAO
import MDoc
import MRZ
import NFC
import PN532Emulator
import TesseraCore
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab pn532`: a software PN532 on a pseudo-terminal with the emulated passport in its field.
struct LabPN532: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pn532",
        abstract: "Run a software PN532 (UART) on a pty with an emulated passport, or a reader, in its field.",
        discussion: """
            Creates a pseudo-terminal that behaves like a PN532 board on a serial port and makes PATH a symlink to its slave side. libnfc's pn532_uart driver (and so nfc-list, tesserad --nfc-device) opens it:
              LIBNFC_DEFAULT_DEVICE=pn532_uart:PATH nfc-list
              tesserad --nfc-device pn532_uart:PATH ...
            The card is an ISO 14443-4 type A target (UID 08 54 53 52, SAK 20) answering with the passport from --profile (see `tessera lab make-profile`). Runs until SIGINT/SIGTERM.

            PIV IN THE FIELD (--piv-state FILE, instead of --profile): the emulated PIV card of that state file, e.g. a badge from `tessera lab make-badge` for `access.check` over libnfc.

            MDOC IN THE FIELD (--mdoc DIR, instead of --profile)
            The card is an ISO/IEC 18013-5 mdoc (the Type 4 Tag with the static Handover Select, then the mdoc application) presenting a `tessera lab make-mdoc` directory as `tessera lab emulate-mdoc` does: requested elements released without a consent step, deviceSignature by DIR/device-key.pem; with --reader-root only to a reader whose readerAuth that root issued. libnfc carries short APDUs only, so the reader chains its ENVELOPEs and collects the response with GET RESPONSE.

            --remove-after-apdus N: after N answered APDUs the card leaves the field once (the next APDU gets no answer); it is back at the reader's next poll. --trace FILE writes a pcap (ISO 14443 link type) that `tessera lab trace FILE` and Wireshark read.

            READER IN THE FIELD (target mode, instead of --profile)
            With --reader-mrz, --reader-can or --reader-apdu the field holds a reader instead of a card. When the program on the pty emulates a card (libnfc nfc_target_init, e.g. `tessera lab emulate` or tesserad's lab.emulate), the reader activates it once and either reads it as an e-passport (BAC or PACE with the MRZ or CAN, then DG1), sends the given APDUs, or (--reader-mdoc) retrieves an mDL from an mdoc holder such as tesserad's mdoc.present (readerAuth with --reader-auth-key/--reader-auth-cert, verified against --iaca), printing `reader: ...` lines (`reader: mdoc status S verdict V elements NS/ID,...`); then it switches its field off and stays idle until SIGINT/SIGTERM.

            EXAMPLES
              tessera lab pn532 --pty /tmp/pn532 --profile /tmp/anna --trace /tmp/t.pcap
              tessera lab pn532 --pty /tmp/pn532 --reader-mrz "$MRZ" &
              tessera lab emulate --device pn532_uart:/tmp/pn532 --profile /tmp/anna
              tessera lab pn532 --pty /tmp/pn532 --mdoc /tmp/mdl
              tessera lab pn532 --pty /tmp/pn532 --piv-state /tmp/alice.json
              tessera lab pn532 --pty /tmp/pn532 --reader-mdoc --reader-auth-key r.pem --reader-auth-cert r-chain.pem --iaca iaca.pem
            """)

    @Option(help: ArgumentHelp("Symlink to create for the pty slave (use as pn532_uart:PATH).", valueName: "PATH"))
    var pty: String
    @Option(help: ArgumentHelp("Document profile directory (tessera lab make-profile).", valueName: "DIR"))
    var profile: String?
    @Option(
        help: ArgumentHelp(
            "An mdoc in the field instead of a passport: a `tessera lab make-mdoc` directory.", valueName: "DIR"))
    var mdoc: String?
    @Option(
        name: .customLong("piv-state"),
        help: ArgumentHelp(
            "A PIV card in the field instead of a passport: an emulated card's state file (`tessera lab emulate-piv`, `tessera lab make-badge`).",
            valueName: "FILE"))
    var pivState: String?
    @Option(
        name: .customLong("reader-root"),
        help: ArgumentHelp(
            "With --mdoc: release only to a reader whose readerAuth chain validates to this root (PEM/DER; repeatable).",
            valueName: "CERT"))
    var readerRoot: [String] = []
    @Option(
        name: .customLong("reader-mrz"),
        help: ArgumentHelp("Reader in the field: read the emulated passport with this MRZ.", valueName: "TEXT"))
    var readerMRZ: String?
    @Option(
        name: .customLong("reader-can"),
        help: ArgumentHelp("Reader in the field: read the emulated passport with this CAN.", valueName: "N"))
    var readerCAN: String?
    @Option(
        name: .customLong("reader-apdu"),
        help: ArgumentHelp("Reader in the field: send this APDU (hex; repeatable).", valueName: "HEX"))
    var readerAPDUs: [String] = []
    @Flag(
        name: .customLong("reader-mdoc"),
        help: "Reader in the field: retrieve the emulated mdoc's mDL (ISO/IEC 18013-5 NFC engagement and retrieval).")
    var readerMDoc = false
    @Option(
        name: .customLong("reader-auth-key"),
        help: ArgumentHelp("With --reader-mdoc: sign the request (readerAuth) with this key (PEM).", valueName: "FILE"))
    var readerAuthKey: String?
    @Option(
        name: .customLong("reader-auth-cert"),
        help: ArgumentHelp("With --reader-auth-key: its certificate chain (PEM, leaf first).", valueName: "FILE"))
    var readerAuthCert: String?
    @Option(
        name: .customLong("iaca"),
        help: ArgumentHelp("With --reader-mdoc: verify the response against this IACA (PEM/DER).", valueName: "CERT"))
    var iaca: [String] = []
    @Option(
        name: .customLong("remove-after-apdus"),
        help: ArgumentHelp("Drop the target once after N APDUs.", valueName: "N"))
    var removeAfter: Int?
    @Option(help: ArgumentHelp("Write an APDU trace (pcap) to FILE.", valueName: "FILE"))
    var trace: String?
    @Flag(name: .customLong("log-apdus"), help: "Trace every APDU exchange on stderr.")
    var logAPDUs = false

    private var readerMode: Bool { readerMRZ != nil || readerCAN != nil || !readerAPDUs.isEmpty || readerMDoc }

    func validate() throws {
        guard [profile != nil, mdoc != nil, pivState != nil, readerMode].filter({ $0 }).count == 1 else {
            throw ValidationError(
                "give --profile, --mdoc or --piv-state (a card in the field) or a reader (--reader-mrz, --reader-can, --reader-apdu, --reader-mdoc)"
            )
        }
        if (readerAuthKey != nil) != (readerAuthCert != nil) {
            throw ValidationError("--reader-auth-key and --reader-auth-cert go together")
        }
        if let removeAfter, removeAfter < 0 { throw ValidationError("--remove-after-apdus must be ≥ 0") }
    }

    func run() async throws {
        guard profile != nil || mdoc != nil || pivState != nil else { return try await runReader() }
        let card: any VirtualCard
        let writer: APDUTraceWriter?
        do {
            if let profile {
                card = EmulatedPassport(profile: try DocumentProfile.load(directory: profile))
            } else if let pivState {
                card = try EmulatedPIVCard.open(stateFile: pivState)
            } else {
                card = MDocCard(holder: try LabEmulateMDoc.holder(directory: mdoc ?? "", readerRoots: readerRoot))
            }
            writer = try trace.map { path throws(TesseraError) in try APDUTraceWriter(path: path) }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let log = logAPDUs
        let emulator: PN532Emulator
        do {
            emulator = try PN532Emulator(card: card, options: .init(removeAfterAPDUs: removeAfter), link: pty) {
                event in
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

    /// The software PN532 in target mode with a reader in its field that acts once.
    private func runReader() async throws {
        var password: AccessPassword?
        var apdus: [[UInt8]] = []
        var mdocReader: MDocLabReader?
        do throws(TesseraError) {
            if readerMDoc {
                var auth: ReaderAuthKey?
                if let readerAuthKey, let readerAuthCert {
                    let chain = try MDocFiles.certificates(readerAuthCert).map(\.der)
                    auth = try ReaderAuthKey(privateKey: try MDocFiles.read(readerAuthKey), chain: chain)
                }
                var anchors: [ParsedCertificate] = []
                for path in iaca { anchors += try MDocFiles.certificates(path) }
                mdocReader = MDocLabReader(readerAuth: auth, iacas: anchors)
            }
            if let readerMRZ { password = .mrz(mrzInformation: try MRZ.parse(readerMRZ).mrzInformation) }
            if let readerCAN { password = .can(readerCAN) }
            for text in readerAPDUs {
                guard let bytes = Hex.decode(text.filter { !$0.isWhitespace }), bytes.count >= 4 else {
                    throw TesseraError.invalidInput("--reader-apdu takes a hex APDU of at least 4 bytes")
                }
                apdus.append(bytes)
            }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let writer: APDUTraceWriter?
        let emulator: PN532Emulator
        let log = logAPDUs
        do {
            writer = try trace.map { path throws(TesseraError) in try APDUTraceWriter(path: path) }
            emulator = try PN532Emulator.withoutCard(link: pty) { LabPN532.record($0, writer: writer, log: log) }
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let stop = LabSignals.install()
        emulator.start()
        LabOutput.line("pn532 ready at \(emulator.connstring) (\(emulator.slavePath)), reader in the field")
        let reader = emulator.externalReader
        let session = Task { [password, apdus, mdocReader] in
            await Self.actOnce(reader, password: password, apdus: apdus, mdoc: mdocReader)
        }
        await LabSignals.waitForStop(stop)
        session.cancel()
        emulator.stop()
        writer?.close()
    }

    /// Waits for an emulated card, then reads it or sends the APDUs, and switches the field off.
    private static func actOnce(
        _ reader: PN532ExternalReader, password: AccessPassword?, apdus: [[UInt8]], mdoc: MDocLabReader?
    ) async {
        var activation: PN532ExternalReader.Activation?
        while activation == nil && !Task.isCancelled {
            activation = try? await reader.activate(timeout: .seconds(1))
        }
        guard let activation else { return }
        LabOutput.line(
            "reader: activated UID \(Hex.encode(activation.uid).uppercased()) ATS \(Hex.encode(activation.ats).uppercased())"
        )
        do throws(TesseraError) {
            for apdu in apdus {
                let response = try await reader.transmit(apdu)
                LabOutput.line("reader: > \(Hex.encode(apdu).uppercased())")
                LabOutput.line("reader: < \(Hex.encode(response).uppercased())")
            }
            if let password {
                let (channel, used) = try await establishAccess(transport: reader, password: password)
                let dg1 = try await ElementaryFileReader(transport: channel).readFile(fid: LDSFile.dataGroup(1).fileID)
                let number = (try? DG1(parsing: dg1).parsedMRZ().documentNumber) ?? "?"
                LabOutput.line("reader: \(used == .pace ? "PACE" : "BAC") DG1 \(dg1.count) bytes, document \(number)")
            }
            if let mdoc { LabOutput.line("reader: " + (try await mdoc.read(reader))) }
        } catch {
            LabOutput.line("reader: error \(error.code.rawValue): \(error.message)")
        }
        reader.removeField()
        LabOutput.line("reader: done")
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

/// The field reader's mdoc retrieval (`--reader-mdoc`): the default mDL elements, readerAuth when configured, the
/// response verified against the given IACAs.
struct MDocLabReader: Sendable {
    var readerAuth: ReaderAuthKey?
    var iacas: [ParsedCertificate]

    /// One retrieval; a line `mdoc status S verdict V elements ns/id,…` (`verdict -` when no document came back).
    func read<T: APDUTransport>(_ transport: T) async throws(TesseraError) -> String {
        var elements: [String: [String]] = [:]
        for element in MDL.defaultElements { elements[MDL.namespace, default: []].append(element) }
        let retrieval = try await MDocNFCReader(transport: transport).retrieve(
            elements: elements, readerAuth: readerAuth.map { ($0.chain, $0.algorithm, $0.signer) })
        let results = MDocVerifier.verify(
            response: retrieval.response,
            session: .init(transcript: retrieval.transcript, eReaderKey: retrieval.eReaderKey),
            iacas: iacas, now: Date())
        let released = results.flatMap { $0.elements.map { "\($0.namespace)/\($0.identifier)" } }
        let verdict =
            results.first.map {
                "\($0.verdict.rawValue)" + ($0.reasons.isEmpty ? "" : " \($0.reasons.map(\.rawValue))")
            } ?? "-"
        return "mdoc status \(retrieval.response.status) verdict \(verdict) elements \(released.joined(separator: ","))"
    }
}
