import APDU
import Emulation
import FoundationEssentials
import ICAO
import NFC
import PN532Emulator
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// ICAO Doc 9303 Part 3 TD3 specimen (document L898902C3, born 740812, expires 120415).
private let specimenMRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"

/// Card emulation through libnfc's real pn532_uart driver in target mode (nfc_target_init, receive/send bytes)
/// against the software PN532, whose RF side is an external reader driven by the test.
@Suite("card emulation through libnfc target mode", .serialized)
struct CardEmulationTests {
    /// A software PN532 without a card, libnfc's device on it, and an emulator serving `card` in the background.
    struct Rig {
        /// How long a test waits for libnfc to arm target mode: a wait, not a measure (a loaded CI machine once took
        /// more than the emulator's default 5 s to open the pty device and send TgInitAsTarget).
        static let activationTimeout: Duration = .seconds(30)

        let pn532: PN532Emulator
        let device: NFCDevice
        let emulator: NFCCardEmulator
        let session: Task<Result<NFCEmulationSummary, TesseraError>, Never>
        let events: Locked<[NFCEmulationEvent]>
        var reader: PN532ExternalReader { pn532.externalReader }

        static func start(
            card: any VirtualCard, trace: APDUTraceWriter? = nil, duration: Duration? = nil,
            pollInterval: Duration = .milliseconds(300)
        ) async throws -> Rig {
            let pn532 = try PN532Emulator.withoutCard()
            pn532.start()
            let device = try await NFCDevice.open(pn532.connstring, context: try NFCContext.shared())
            let emulator = try NFCCardEmulator(
                device: device, card: card,
                identity: NFCCardIdentity(uid: [0x08, 0x12, 0x34, 0x56], historicalBytes: [0x80]),
                trace: trace, pollInterval: pollInterval)
            let events = Locked<[NFCEmulationEvent]>([])
            let session = Task { () -> Result<NFCEmulationSummary, TesseraError> in
                do throws(TesseraError) {
                    return .success(
                        try await emulator.run(for: duration) { event in events.withLock { $0.append(event) } })
                } catch {
                    return .failure(error)
                }
            }
            return Rig(pn532: pn532, device: device, emulator: emulator, session: session, events: events)
        }

        func finish() async throws -> NFCEmulationSummary {
            emulator.stop()
            let summary = try await session.value.get()
            await device.close()
            pn532.stop()
            return summary
        }
    }

    func readPassport(
        access: AccessOptions, expected: AccessProtocol,
        password: (DocumentProfile) -> AccessPassword
    ) async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let profile = try DocumentProfile.make(
            directory: directory + "/profile", mrz: specimenMRZ, can: "123456",
            access: access)
        // A long poll: each poll that times out leaves a short window in which libnfc drops an arriving command
        // (see NFCCardEmulator.receive); a loaded CI machine can pause the reader side past a short one.
        let rig = try await Rig.start(card: EmulatedPassport(profile: profile), pollInterval: .seconds(1))
        let activation = try await rig.reader.activate(timeout: Rig.activationTimeout)
        #expect(activation.uid == [0x08, 0x12, 0x34, 0x56])
        #expect(activation.sak == 0x20 && activation.atqa == [0x00, 0x04])
        #expect(activation.ats.last == 0x80, "historical bytes given to nfc_target_init reach the ATS")
        let (channel, used) = try await establishAccess(transport: rig.reader, password: password(profile))
        #expect(used == expected)
        let reader = ElementaryFileReader(transport: channel)
        #expect(
            try await reader.readFile(fid: LDSFile.dataGroup(1).fileID)
                == profile.applicationFiles[LDSFile.dataGroup(1).fileID])
        #expect(try await reader.readFile(fid: LDSFile.sod.fileID) == profile.sod)
        #expect(
            try await reader.readFile(fid: LDSFile.dataGroup(2).fileID)
                == profile.applicationFiles[LDSFile.dataGroup(2).fileID])
        let apdus = await reader.statistics.apduCount
        rig.reader.removeField()
        let summary = try await rig.finish()
        #expect(summary.activations == 1)
        #expect(summary.exchanges >= apdus, "every APDU went through libnfc: \(summary.exchanges) vs \(apdus)")
        #expect(summary.reason == .stopped)
        // What libnfc's nfc_target_init / receive / send asked of the chip.
        let commands = rig.pn532.receivedCommands
        for code: UInt8 in [0x12, 0x8C, 0x86, 0x8E] { #expect(commands.contains(code), "PN532 command \(code)") }
    }

    @Test("PACE (ECDH GM P-256, AES-128) with the CAN, then DG1, EF.SOD and DG2 read from the emulated card")
    func pace() async throws {
        try await readPassport(
            access: .init(bac: false, pace: [try PACEOption(parsing: "ecdh-gm-p256-aes128")]),
            expected: .pace
        ) { _ in .can("123456") }
    }

    @Test("BAC, then DG1, EF.SOD and DG2 read from the emulated card")
    func bac() async throws {
        try await readPassport(access: .init(bac: true), expected: .bac) { .mrz(mrzInformation: $0.mrzInformation) }
    }

    @Test("a scripted card answers by its rules through libnfc; unmatched commands get 6D00")
    func scripted() async throws {
        let card = try ScriptedCard(
            script: """
                # select the test applet
                00A4 0400 07 A0000002471001 => 9000
                00B0 *                      => 0102030405 9000
                """)
        let rig = try await Rig.start(card: card)
        try await rig.reader.activate(timeout: Rig.activationTimeout)
        #expect(
            try await rig.reader.transmit([0x00, 0xA4, 0x04, 0x00, 0x07, 0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01]) == [
                0x90, 0x00,
            ])
        #expect(try await rig.reader.transmit([0x00, 0xB0, 0x00, 0x10, 0x05]) == [1, 2, 3, 4, 5, 0x90, 0x00])
        #expect(try await rig.reader.transmit([0x00, 0xCA, 0x00, 0x00, 0x00]) == [0x6D, 0x00])
        let summary = try await rig.finish()
        #expect(summary.exchanges == 3)
        #expect(
            rig.events.current.contains {
                if case .activated = $0 { return true }; return false
            })
    }

    @Test("script syntax errors name the line")
    func scriptErrors() {
        #expect(throws: TesseraError.self) { try ScriptedCard(script: "00A4 => 90") }
        do {
            _ = try ScriptedCard(script: "# ok\n00A4 => 9000\n00B0 9000\n")
            Issue.record("expected INVALID_INPUT")
        } catch {
            #expect(error.code == .invalidInput && error.message.contains("line 3"), "\(error)")
        }
    }

    @Test(
        "the field removed while the card computes: the reader gets CARD_REMOVED, the emulator reports the lost APDU and serves the next activation"
    )
    func fieldRemovedMidExchange() async throws {
        let slow = SlowCard(delay: .milliseconds(400))
        let rig = try await Rig.start(card: slow)
        try await rig.reader.activate(timeout: Rig.activationTimeout)
        #expect(try await rig.reader.transmit([0x00, 0x01, 0x00, 0x00]) == [0x90, 0x00])
        let reader = rig.reader
        async let answer = reader.transmit([0x00, 0x02, 0x00, 0x00])
        try await Task.sleep(for: .milliseconds(150))
        reader.removeField()
        do {
            _ = try await answer
            Issue.record("the reader left: no answer expected")
        } catch let error as TesseraError {
            #expect(error.code == .cardRemoved, "\(error)")
        }
        // The emulator re-arms; a new activation is served.
        try await rig.reader.activate(timeout: Rig.activationTimeout)
        #expect(try await rig.reader.transmit([0x00, 0x03, 0x00, 0x00]) == [0x90, 0x00])
        let summary = try await rig.finish()
        #expect(summary.activations == 2)
        #expect(summary.exchanges == 2, "the lost response does not count")
        let lost = rig.events.current.compactMap { event -> ([UInt8]?, String)? in
            if case .fieldLost(_, let pending, let reason) = event { return (pending, reason) }
            return nil
        }
        #expect(lost.count == 1)
        #expect(lost.first?.0 == [0x00, 0x02, 0x00, 0x00], "the unanswered APDU is named")
        #expect(lost.first?.1.contains("field off") == true, "\(lost)")
    }

    @Test(
        "stop() ends a session waiting for a reader at once, and one with a reader attached within the poll interval; duration ends it too"
    )
    func stopping() async throws {
        let idle = try await Rig.start(card: SlowCard(delay: .zero))
        try await Task.sleep(for: .milliseconds(200))
        var clock = ContinuousClock.now
        #expect(try await idle.finish().reason == .stopped)
        #expect(ContinuousClock.now - clock < .milliseconds(700))

        let attached = try await Rig.start(card: SlowCard(delay: .zero), pollInterval: .milliseconds(300))
        try await attached.reader.activate()
        _ = try await attached.reader.transmit([0x00, 0x01, 0x00, 0x00])
        clock = ContinuousClock.now
        let summary = try await attached.finish()
        #expect(summary.reason == .stopped && summary.exchanges == 1)
        #expect(ContinuousClock.now - clock < .milliseconds(1500))
        #expect(!attached.reader.isActive, "InRelease ended the emulation")

        let timed = try await Rig.start(card: SlowCard(delay: .zero), duration: .milliseconds(300))
        #expect(try await timed.session.value.get().reason == .duration)
        _ = try await timed.finish()
    }

    @Test("a non-08 UID is INVALID_INPUT before libnfc is touched")
    func identityValidation() async throws {
        let pn532 = try PN532Emulator.withoutCard()
        pn532.start()
        defer { pn532.stop() }
        let device = try await NFCDevice.open(pn532.connstring, context: try NFCContext.shared())
        #expect(throws: TesseraError.self) {
            _ = try NFCCardEmulator(
                device: device, card: SlowCard(delay: .zero), identity: .init(uid: [0x04, 1, 2, 3]))
        }
        await device.close()
    }

    @Test("the emulator's trace is pcap that tshark decodes as ISO 7816 APDUs")
    func trace() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let writer = try APDUTraceWriter(path: dir + "/emulated.pcap")
        let card = try ScriptedCard(script: "00A4 * => 9000\n00B0 * => CAFE 9000\n")
        let rig = try await Rig.start(card: card, trace: writer)
        try await rig.reader.activate(timeout: Rig.activationTimeout)
        _ = try await rig.reader.transmit([0x00, 0xA4, 0x04, 0x0C, 0x07, 0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01])
        _ = try await rig.reader.transmit([0x00, 0xB0, 0x00, 0x00, 0x02])
        rig.reader.removeField()
        _ = try await rig.finish()
        writer.close()

        let records = try APDUTraceReader.parse(
            [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/emulated.pcap")))
        ).records
        #expect(records.compactMap(\.apdu).contains([0xCA, 0xFE, 0x90, 0x00]))
        #expect(
            records.contains {
                $0.kind == .toReader && $0.data == [0x08, 0x12, 0x34, 0x56, 0x08 ^ 0x12 ^ 0x34 ^ 0x56]
            }, "UID in the anticollision")
        #expect(records.first?.kind == .fieldOn && records.last?.kind == .fieldOff)

        let config = dir + "/wireshark"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try APDUTraceWriter.wiresharkDecodeAs.write(
            toFile: config + "/decode_as_entries", atomically: true, encoding: .utf8)
        let fields = try await run(
            "/usr/bin/tshark",
            [
                "-r", dir + "/emulated.pcap", "-Y", "iso7816.apdu.ins",
                "-T", "fields", "-e", "iso7816.apdu.ins", "-e", "iso7816.apdu.body",
            ],
            environment: ["WIRESHARK_CONFIG_DIR": config])
        #expect(fields.status == 0, "\(fields.output)")
        #expect(fields.output.contains("0xa4") && fields.output.contains("0xb0"), "\(fields.output)")
        #expect(fields.output.contains("a0000002471001"), "\(fields.output)")
    }
}

/// Answers 9000 to everything after `delay` (a card that computes).
struct SlowCard: VirtualCard {
    let delay: Duration
    var atr: [UInt8] { get async { [0x3B, 0x80, 0x80, 0x01, 0x01] } }
    func powerOn() async {}
    func powerOff() async {}
    func reset() async {}
    func process(_ command: [UInt8]) async -> [UInt8] {
        if delay > .zero { try? await Task.sleep(for: delay) }
        return [0x90, 0x00]
    }
}
