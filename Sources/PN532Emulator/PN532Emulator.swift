import APDU
internal import CSystemShims
import Dispatch
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// A software PN532 speaking the UART frame protocol on a pseudo-terminal, with an emulated card behind it.
///
/// libnfc's real `pn532_uart` driver opens the slave side (`pn532_uart:<slavePath>`). The emulator answers the
/// commands libnfc uses (Diagnose, GetFirmwareVersion, GetGeneralStatus, Read/WriteRegister, SetParameters,
/// SAMConfiguration, RFConfiguration, PowerDown, InListPassiveTarget at 106 kbps type A, InDataExchange,
/// InCommunicateThru, InDeselect, InRelease) and presents one ISO 14443-4 type A card whose APDUs go to the
/// `VirtualCard`. Responses up to 263 bytes travel in one (extended) frame, so no MI chaining is needed.
///
/// Target mode (card emulation by the host, `nfc_target_init`): TgInitAsTarget, TgGetData, TgSetData and
/// TgGetTargetStatus with the ISO 14443-4 PICC emulation libnfc enables (SetParameters fISO14443-4_PICC, mode
/// bit PICC only). The RF side is then an external reader driven through `externalReader`; see
/// `PN532ExternalReader`. A host command sent while TgInitAsTarget or TgGetData waits for the RF side, or an
/// ACK frame, aborts the waiting command (as libnfc's abort and timeout paths expect).
public final class PN532Emulator: Sendable {
    /// What the card tells the reader during activation, and test knobs.
    public struct Options: Sendable {
        /// NFCID1 (4, 7 or 10 bytes). ICAO chips use random 4-byte UIDs starting with 08.
        public var uid: [UInt8]
        /// SENS_RES as the PN532 reports it (two bytes).
        public var atqa: [UInt8]
        /// SEL_RES; bit 6 (0x20) = ISO/IEC 14443-4 compliant.
        public var sak: UInt8
        /// Answer to select including its length byte TL.
        public var ats: [UInt8]
        /// After this many answered APDUs the card leaves the field once (the next APDU times out); it is back
        /// at the reader's next poll (InListPassiveTarget). nil = never.
        public var removeAfterAPDUs: Int?

        public init(
            uid: [UInt8] = [0x08, 0x54, 0x53, 0x52], atqa: [UInt8] = [0x00, 0x04], sak: UInt8 = 0x20,
            ats: [UInt8] = [0x05, 0x78, 0x80, 0x70, 0x02], removeAfterAPDUs: Int? = nil
        ) {
            self.uid = uid; self.atqa = atqa; self.sak = sak; self.ats = ats; self.removeAfterAPDUs = removeAfterAPDUs
        }
    }

    /// Something that happened on the emulated reader, for traces and logs.
    public enum Event: Sendable {
        case fieldOn
        case fieldOff
        /// The card was selected and activated (ISO 14443-4).
        case activated(uid: [UInt8], atqa: [UInt8], sak: UInt8, ats: [UInt8])
        /// One APDU exchange; `response` is empty when the card had left the field.
        case exchange(command: [UInt8], response: [UInt8], commandTime: Date, responseTime: Date)
        case cardRemoved
        case released
    }

    public typealias EventHook = @Sendable (Event) -> Void

    /// Path of the pseudo-terminal slave (`/dev/pts/N`).
    public let slavePath: String
    /// The symlink created by `init(link:)`, if any.
    public let linkPath: String?
    /// `pn532_uart:<path>` for libnfc.
    public var connstring: String { "pn532_uart:" + (linkPath ?? slavePath) }

    private let masterFD: Int32
    private let slaveFD: Int32
    private let card: any VirtualCard
    let state: Locked<State>
    private let writeLock = Locked(())
    private let cardExecutor = ScheduledTaskExecutor(DedicatedThread(name: "tessera.pn532.card"))
    let onEvent: EventHook?

    struct State {
        var options: Options
        var running = false
        var stopped = false
        var apdusAnswered = 0
        var cardInField = true
        var removalDone = false
        var activeTarget = false
        var field = false
        var cardPowered = false
        var registers: [UInt16: UInt8] = [:]
        var lastFrame: [UInt8] = []
        var commandLog: [UInt8] = []
        /// SetParameters flags (bit 2 fAutomaticATR_RES, bit 5 fISO14443-4_PICC).
        var parameters: UInt8 = 0
        var target = TargetState()
    }

    /// Opens a pseudo-terminal. With `link`, a symlink at that path points to the slave (replacing a stale link).
    public init(
        card: any VirtualCard, options: Options = Options(), link: String? = nil,
        onEvent: EventHook? = nil
    ) throws(TesseraError) {
        var master: Int32 = -1, slave: Int32 = -1
        var name = [CChar](repeating: 0, count: 256)
        let rc = tessera_pty_open(&master, &slave, &name, UInt(name.count))
        guard rc == 0 else {
            throw TesseraError(.internalError, "cannot open a pseudo-terminal: \(String(cString: strerror(-rc)))")
        }
        masterFD = master
        slaveFD = slave
        slavePath = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.card = card
        self.onEvent = onEvent
        state = Locked(State(options: options))
        if let link {
            if let existing = try? FileManager.default.destinationOfSymbolicLink(atPath: link), !existing.isEmpty {
                try? FileManager.default.removeItem(atPath: link)
            }
            do {
                try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: slavePath)
            } catch {
                close(master); close(slave)
                throw TesseraError(
                    .invalidInput, "cannot create the pty link \(link): \(TesseraError.reason(of: error))")
            }
        }
        linkPath = link
    }

    deinit {
        if let linkPath { try? FileManager.default.removeItem(atPath: linkPath) }
        close(masterFD)
        close(slaveFD)
    }

    /// Starts serving on a dedicated thread.
    public func start() {
        let begin = state.withLock { s -> Bool in
            guard !s.running && !s.stopped else { return false }
            s.running = true
            return true
        }
        if begin { DedicatedThread.detach(name: "pn532-emulator") { [self] in serve() } }
    }

    /// Stops serving (within about 100 ms) and removes the symlink.
    public func stop() {
        state.withLock {
            $0.running = false; $0.stopped = true
        }
        if let linkPath { try? FileManager.default.removeItem(atPath: linkPath) }
    }

    /// Puts the card into or takes it out of the field (a removal is seen by the reader as target loss).
    public func setCardInField(_ present: Bool) {
        let removed = state.withLock { s -> Bool in
            let was = s.cardInField
            s.cardInField = present
            if !present { s.activeTarget = false }
            return was && !present
        }
        if removed { onEvent?(.cardRemoved) }
    }

    /// Changes the knobs (e.g. re-arms `removeAfterAPDUs`) for subsequent activations and exchanges.
    public func update(_ body: @Sendable (inout Options) -> Void) {
        state.withLock { s in
            body(&s.options)
            s.removalDone = false
            s.apdusAnswered = 0
        }
    }

    /// Number of APDUs the card answered so far.
    public var answeredAPDUs: Int { state.withLock { $0.apdusAnswered } }

    /// PN532 command codes received so far, in order (for tests and diagnostics).
    public var receivedCommands: [UInt8] { state.withLock { $0.commandLog } }

    // MARK: - Serving

    private func serve() {
        var parser = PN532Frame.Parser()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while state.withLock({ $0.running }) {
            var pfd = pollfd(fd: masterFD, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready <= 0 { continue }
            let n = read(masterFD, &buffer, buffer.count)
            if n <= 0 {
                if n < 0 && errno != EAGAIN && errno != EINTR { usleep(50_000) }
                continue
            }
            for event in parser.feed(Array(buffer[0..<n])) {
                switch event {
                case .information(let payload):
                    guard payload.count >= 2, payload[0] == PN532Frame.hostToPN532 else { continue }
                    abortWaitingTargetCommand()
                    send(PN532Frame.ack)
                    if let response = handle(code: payload[1], params: Array(payload.dropFirst(2))) {
                        respond(to: payload[1], with: response)
                    }
                case .nack:
                    send(state.withLock { $0.lastFrame })
                case .ack:
                    abortWaitingTargetCommand()
                case .corrupt:
                    continue
                }
            }
        }
    }

    /// Sends the response frame of command `code` (from the serving thread or, for target-mode commands that
    /// waited for the RF side, from the external reader's).
    func respond(to code: UInt8, with response: [UInt8]) {
        let frame = PN532Frame.encode([PN532Frame.pn532ToHost, code &+ 1] + response)
        state.withLock { $0.lastFrame = frame }
        send(frame)
    }

    private func send(_ bytes: [UInt8]) {
        writeLock.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { write(masterFD, $0.baseAddress, $0.count) }
                if n <= 0 {
                    if errno == EINTR || errno == EAGAIN { usleep(1000); continue }
                    return
                }
                offset += n
            }
        }
    }

    /// Answers one command (`code` = PN532 command code); returns the response bytes after TFI and code+1, or nil
    /// when the answer waits for the RF side (target mode).
    private func handle(code: UInt8, params: [UInt8]) -> [UInt8]? {
        state.withLock { $0.commandLog.append(code) }
        switch code {
        case 0x00:  // Diagnose
            guard let test = params.first else { return [] }
            switch test {
            case 0x00: return params  // communication line test: echo
            case 0x06:  // ISO 14443-4 card presence
                return [state.withLock { $0.activeTarget && $0.cardInField } ? 0x00 : 0x01]
            default: return [0x00]
            }
        case 0x02: return [0x32, 0x01, 0x06, 0x07]  // GetFirmwareVersion: PN532 v1.6, ISO A/B + 18092
        case 0x04:  // GetGeneralStatus
            let (field, active) = state.withLock { ($0.field, $0.activeTarget) }
            return [0x00, field ? 0x01 : 0x00] + (active ? [0x01, 0x01, 0x00, 0x00, 0x00] : [0x00]) + [0x00]
        case 0x06:  // ReadRegister
            var out: [UInt8] = []
            var i = 0
            while i + 1 < params.count {
                let address = UInt16(params[i]) << 8 | UInt16(params[i + 1])
                out.append(state.withLock { $0.registers[address] ?? 0x00 })
                i += 2
            }
            return out
        case 0x08:  // WriteRegister
            var i = 0
            while i + 2 < params.count {
                let address = UInt16(params[i]) << 8 | UInt16(params[i + 1])
                let value = params[i + 2]
                state.withLock { $0.registers[address] = value }
                i += 3
            }
            return []
        case 0x12:  // SetParameters
            state.withLock { $0.parameters = params.first ?? 0 }
            return []
        case 0x14: return []  // SAMConfiguration
        case 0x16:  // PowerDown
            powerOffCard()
            return [0x00]
        case 0x32:  // RFConfiguration
            if params.first == 0x01, params.count >= 2 { setField(params[1] & 0x01 != 0) }
            return []
        case 0x4A: return listPassiveTarget(params)
        case 0x40: return dataExchange(params)
        case 0x42:  // InCommunicateThru: libnfc's ISO-DEP presence check sends R(NAK); answer R(ACK)
            let active = state.withLock { $0.activeTarget && $0.cardInField }
            if active, params.count == 1, params[0] & 0xF6 == 0xB2 { return [0x00, 0xA2 | (params[0] & 0x01)] }
            return [0x01]
        case 0x44:  // InDeselect
            state.withLock { $0.activeTarget = false }
            return [0x00]
        case 0x52:  // InRelease (in target mode: stops the emulation)
            state.withLock { $0.activeTarget = false }
            releaseTarget()
            onEvent?(.released)
            return [0x00]
        case 0x8C: return initAsTarget(params)
        case 0x86: return getData()
        case 0x8E: return setData(params)
        case 0x8A: return targetStatus()
        case 0x88, 0x90, 0x92, 0x94: return [0x27]  // raw target mode (no PICC emulation) is not emulated
        case 0x56, 0x46, 0x4E, 0x50, 0x60: return [0x01]  // DEP / PSL / select / autopoll: nothing answers
        default: return [0x27]  // "command not acceptable in this context"
        }
    }

    private func setField(_ on: Bool) {
        let changed = state.withLock { s -> Bool in
            defer { s.field = on }
            if !on { s.activeTarget = false }
            return s.field != on
        }
        guard changed else { return }
        onEvent?(on ? .fieldOn : .fieldOff)
        if !on { powerOffCard() }
    }

    private func powerOffCard() {
        let wasPowered = state.withLock { s -> Bool in
            defer { s.cardPowered = false; s.activeTarget = false }
            return s.cardPowered
        }
        if wasPowered { blocking { [card] in await card.powerOff() } }
    }

    private func listPassiveTarget(_ params: [UInt8]) -> [UInt8] {
        guard params.count >= 2 else { return [0x00] }
        let baudAndType = params[1]
        let (ready, options, wasPowered, fieldWasOn) = state.withLock { s in
            // A card removed by `removeAfterAPDUs` is back at the next poll.
            if s.removalDone && !s.cardInField && s.options.removeAfterAPDUs != nil { s.cardInField = true }
            let r = (s.cardInField, s.options, s.cardPowered, s.field)
            if s.cardInField && baudAndType == 0x00 {
                s.activeTarget = true
                s.cardPowered = true
                s.field = true
            }
            return r
        }
        guard baudAndType == 0x00, ready else { return [0x00] }
        if !fieldWasOn { onEvent?(.fieldOn) }
        if wasPowered {
            blocking { [card] in await card.reset() }
        } else {
            blocking { [card] in await card.powerOn() }
        }
        onEvent?(.activated(uid: options.uid, atqa: options.atqa, sak: options.sak, ats: options.ats))
        return [0x01, 0x01] + options.atqa + [options.sak, UInt8(options.uid.count)] + options.uid + options.ats
    }

    private func dataExchange(_ params: [UInt8]) -> [UInt8] {
        guard params.count >= 2 else { return [0x27] }
        let command = Array(params.dropFirst())
        let started = Date()
        let (deliver, removedNow) = state.withLock { s -> (Bool, Bool) in
            guard s.activeTarget && s.cardInField else { return (false, false) }
            if let limit = s.options.removeAfterAPDUs, !s.removalDone, s.apdusAnswered >= limit {
                s.removalDone = true
                s.cardInField = false
                s.activeTarget = false
                return (false, true)
            }
            return (true, false)
        }
        if removedNow {
            onEvent?(.cardRemoved)
            powerOffCard()
        }
        guard deliver else {
            onEvent?(.exchange(command: command, response: [], commandTime: started, responseTime: Date()))
            return [0x01]  // timeout: the target does not answer
        }
        let response = blocking { [card] in await card.process(command) }
        state.withLock { $0.apdusAnswered += 1 }
        onEvent?(.exchange(command: command, response: response, commandTime: started, responseTime: Date()))
        guard response.count <= 263 else { return [0x0E] }  // would need MI chaining: internal buffer overflow
        return [0x00] + response
    }

    /// Runs async card code from the emulator thread (which is not part of the cooperative pool). The card runs on
    /// the emulator's own executor, so a saturated cooperative pool cannot delay an answer past libnfc's timeouts.
    private func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let semaphore = DispatchSemaphore(value: 0)
        let box = Locked<T?>(nil)
        Task(executorPreference: cardExecutor) {
            let value = await body()
            box.withLock { $0 = value }
            semaphore.signal()
        }
        semaphore.wait()
        return box.withLock { $0! }
    }
}
