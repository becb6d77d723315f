import APDU
import FoundationEssentials
import TesseraCore

/// Status bytes of target-mode answers (NXP UM0701-02 §7.1, error codes).
enum PN532Status {
    static let ok: UInt8 = 0x00
    /// The target has been released by the initiator (here: the external reader switched its field off).
    static let released: UInt8 = 0x29
    /// Command not acceptable in the current context.
    static let notAcceptable: UInt8 = 0x27
}

/// What the emulated PN532 is doing as a target (card emulation by its host).
struct TargetState: Sendable {
    enum Phase: Sendable { case off, armed, active, released }
    var phase: Phase = .off
    /// TgInitAsTarget parameters: mode, SENS_RES as reported (MSB first), NFCID1 (the PN532 fixes byte 0 to 08),
    /// SEL_RES, historical bytes of the ATS.
    var mode: UInt8 = 0
    var atqa: [UInt8] = []
    var uid: [UInt8] = []
    var sak: UInt8 = 0
    var historical: [UInt8] = []
    /// The target command (TgInitAsTarget 0x8C or TgGetData 0x86) waiting for the RF side.
    var waiting: UInt8?
    /// A command APDU from the external reader that no TgGetData has fetched yet.
    var inbound: [UInt8]?
    var responseWaiter: (id: UInt64, continuation: CheckedContinuation<Result<[UInt8], TesseraError>, Never>)?
    var nextWaiterID: UInt64 = 0
    var fieldOn = false
}

extension PN532Emulator {
    /// A software PN532 with no card in its field (for target mode, where the host emulates the card).
    public static func withoutCard(link: String? = nil, onEvent: EventHook? = nil) throws(TesseraError) -> PN532Emulator
    {
        let emulator = try PN532Emulator(card: NoCard(), link: link, onEvent: onEvent)
        emulator.state.withLock { $0.cardInField = false }
        return emulator
    }

    /// The reader on the RF side of target mode.
    public var externalReader: PN532ExternalReader { PN532ExternalReader(emulator: self) }

    /// TgInitAsTarget: mode, MIFARE params (SENS_RES 2, NFCID1t 3, SEL_RES 1), FeliCa params (18), NFCID3t (10),
    /// LEN Gt + Gt, LEN Tk + Tk. The answer waits until the external reader activates the target.
    func initAsTarget(_ p: [UInt8]) -> [UInt8]? {
        guard p.count >= 36 else { return [PN532Status.notAcceptable] }
        let gtLength = Int(p[35])
        let tkAt = 36 + gtLength
        let tkLength = tkAt < p.count ? Int(p[tkAt]) : 0
        let historical = tkAt + 1 + tkLength <= p.count ? Array(p[(tkAt + 1)..<(tkAt + 1 + tkLength)]) : []
        state.withLock { s in
            s.target.phase = .armed
            s.target.mode = p[0]
            s.target.atqa = [p[2], p[1]]
            s.target.uid = [0x08] + p[3..<6]
            s.target.sak = p[6]
            s.target.historical = historical
            s.target.waiting = 0x8C
            s.target.inbound = nil
        }
        return nil
    }

    /// TgGetData: the next command APDU from the external reader (waits for one).
    func getData() -> [UInt8]? {
        state.withLock { s -> [UInt8]? in
            switch s.target.phase {
            case .active:
                if let command = s.target.inbound {
                    s.target.inbound = nil
                    return [PN532Status.ok] + command
                }
                s.target.waiting = 0x86
                return nil
            case .released: return [PN532Status.released]
            case .off, .armed: return [PN532Status.notAcceptable]
            }
        }
    }

    /// TgSetData: the host's response APDU goes to the waiting external reader.
    func setData(_ response: [UInt8]) -> [UInt8] {
        let (status, waiter) = state.withLock {
            s -> (UInt8, CheckedContinuation<Result<[UInt8], TesseraError>, Never>?) in
            switch s.target.phase {
            case .active:
                defer { s.target.responseWaiter = nil }
                return (PN532Status.ok, s.target.responseWaiter?.continuation)
            case .released: return (PN532Status.released, nil)
            case .off, .armed: return (PN532Status.notAcceptable, nil)
            }
        }
        waiter?.resume(returning: .success(response))
        return [status]
    }

    /// TgGetTargetStatus: 01 activated, 02 released, 00 free; 106 kbps.
    func targetStatus() -> [UInt8] {
        switch state.withLock({ $0.target.phase }) {
        case .active: return [0x01, 0x00]
        case .released: return [0x02, 0x00]
        case .off, .armed: return [0x00, 0x00]
        }
    }

    /// InRelease in target mode: the emulation stops; a reader waiting for an answer loses the card.
    func releaseTarget() {
        let waiter = state.withLock { s -> CheckedContinuation<Result<[UInt8], TesseraError>, Never>? in
            guard s.target.phase != .off else { return nil }
            s.target.phase = .off
            s.target.waiting = nil
            s.target.inbound = nil
            defer { s.target.responseWaiter = nil }
            return s.target.responseWaiter?.continuation
        }
        waiter?.resume(returning: .failure(TesseraError(.cardRemoved, "the emulated card was released by its host")))
    }

    /// A new host frame or an ACK aborts a target command that waits for the RF side.
    func abortWaitingTargetCommand() {
        state.withLock { s in
            if s.target.waiting == 0x8C, s.target.phase == .armed { s.target.phase = .off }
            s.target.waiting = nil
        }
    }
}

/// The reader in the field of a software PN532 in target mode: activates the target its host emulates
/// (`nfc_target_init`) and exchanges APDUs with it, as a phone or a desk reader would.
///
/// `activate` switches the field on and waits until the host has armed target mode (TgInitAsTarget), then
/// completes the activation (the PN532 answers RATS itself in ISO 14443-4 PICC mode). `transmit` hands a
/// command APDU to the host's next TgGetData and waits for its TgSetData. `removeField` switches the field
/// off: a waiting TgGetData, and any later TgGetData or TgSetData until the next TgInitAsTarget, fail with
/// status 0x29 (target released), which libnfc reports as NFC_ETGRELEASED.
public struct PN532ExternalReader: APDUTransport {
    /// What the reader saw when it activated the target.
    public struct Activation: Sendable, Equatable {
        /// NFCID1 (4 bytes, the first fixed to 08 by the PN532).
        public var uid: [UInt8]
        /// SENS_RES, MSB first (as readers report it).
        public var atqa: [UInt8]
        public var sak: UInt8
        /// The ATS with its length byte: the PN532's interface bytes and the host's historical bytes.
        public var ats: [UInt8]
    }

    let emulator: PN532Emulator
    /// How long `transmit` waits for the host's answer (a reader's frame waiting time, generously).
    public var responseTimeout: Duration = .seconds(5)

    /// Short APDUs only: the PN532 buffers at most 262 bytes of a chained command, and a host answers through one
    /// TgSetData frame.
    public var supportsExtendedLength: Bool { false }

    /// Switches the field on and activates the emulated target. NO_CARD when the host does not arm target mode
    /// within `timeout`; UNSUPPORTED_PROTOCOL when it armed it without ISO 14443-4 PICC emulation.
    @discardableResult
    public func activate(timeout: Duration = .seconds(5)) async throws(TesseraError) -> Activation {
        let fieldWasOff = emulator.state.withLock { s -> Bool in
            defer { s.target.fieldOn = true }
            return !s.target.fieldOn
        }
        if fieldWasOff { emulator.onEvent?(.fieldOn) }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while true {
            let armed = emulator.state.withLock { s -> Result<Activation, TesseraError>? in
                guard s.target.phase == .armed, s.target.waiting == 0x8C else { return nil }
                guard s.target.mode & 0x04 != 0, s.parameters & 0x20 != 0 else {
                    return .failure(
                        TesseraError(
                            .unsupportedProtocol,
                            "the host armed target mode without ISO 14443-4 PICC emulation (mode \(s.target.mode), "
                                + "parameters \(s.parameters)); raw target mode is not emulated"))
                }
                s.target.phase = .active
                s.target.waiting = nil
                s.target.inbound = nil
                let ats = [0x75, 0x77, 0x81, 0x02] + s.target.historical
                return .success(
                    Activation(
                        uid: s.target.uid, atqa: s.target.atqa, sak: s.target.sak,
                        ats: [UInt8(ats.count + 1)] + ats))
            }
            switch armed {
            case .success(let activation):
                // Mode: 106 kbps, ISO 14443-4 PICC, MIFARE framing; the initiator command was RATS.
                emulator.respond(to: 0x8C, with: [0x08, 0xE0, 0x80])
                emulator.onEvent?(
                    .activated(
                        uid: activation.uid, atqa: activation.atqa, sak: activation.sak,
                        ats: activation.ats))
                return activation
            case .failure(let error):
                throw error
            case nil:
                if ContinuousClock.now >= deadline {
                    throw TesseraError(
                        .noCard,
                        "no emulated card answered: the host did not arm target mode "
                            + "(TgInitAsTarget) within \(timeout)")
                }
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
    }

    /// Sends a command APDU to the activated target and returns its response. CARD_REMOVED when the target is not
    /// activated, was released by its host, the field went off before the answer, or no answer came in time.
    public func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        guard command.count <= 262 else {
            throw TesseraError(.invalidInput, "a \(command.count)-byte command exceeds the PN532's 262-byte buffer")
        }
        let sent = Date()
        let emulator = self.emulator
        let timeout = responseTimeout
        let result: Result<[UInt8], TesseraError> = await withCheckedContinuation { continuation in
            let start = emulator.state.withLock { s -> (id: UInt64?, deliverNow: Bool, error: TesseraError?) in
                guard s.target.phase == .active else {
                    return (nil, false, TesseraError(.cardRemoved, "no activated target in the field"))
                }
                guard s.target.responseWaiter == nil, s.target.inbound == nil else {
                    return (nil, false, TesseraError(.internalError, "one APDU at a time on the external reader"))
                }
                s.target.nextWaiterID += 1
                let id = s.target.nextWaiterID
                s.target.responseWaiter = (id, continuation)
                if s.target.waiting == 0x86 {
                    s.target.waiting = nil
                    return (id, true, nil)
                }
                s.target.inbound = command
                return (id, false, nil)
            }
            if let error = start.error {
                continuation.resume(returning: .failure(error))
                return
            }
            if start.deliverNow { emulator.respond(to: 0x86, with: [PN532Status.ok] + command) }
            guard let id = start.id else { return }
            Task {
                try? await Task.sleep(for: timeout)
                let expired = emulator.state.withLock {
                    s -> CheckedContinuation<Result<[UInt8], TesseraError>, Never>? in
                    guard let waiter = s.target.responseWaiter, waiter.id == id else { return nil }
                    s.target.responseWaiter = nil
                    s.target.inbound = nil
                    return waiter.continuation
                }
                expired?.resume(
                    returning: .failure(
                        TesseraError(
                            .cardRemoved, "the emulated card did not answer within \(timeout)")))
            }
        }
        let response = try result.get()
        emulator.onEvent?(.exchange(command: command, response: response, commandTime: sent, responseTime: Date()))
        guard response.count >= 2 else {
            throw TesseraError(.malformedData, "the emulated card answered \(response.count) bytes (no status word)")
        }
        return response
    }

    /// Switches the field off: the target loses power; an APDU waiting for its answer fails with CARD_REMOVED.
    public func removeField() {
        let (wasOn, abortGetData, waiter) = emulator.state.withLock { s in
            let wasOn = s.target.fieldOn
            s.target.fieldOn = false
            if s.target.phase == .active { s.target.phase = .released }
            let getData = s.target.waiting == 0x86
            if getData { s.target.waiting = nil }
            s.target.inbound = nil
            defer { s.target.responseWaiter = nil }
            return (wasOn, getData, s.target.responseWaiter?.continuation)
        }
        if abortGetData { emulator.respond(to: 0x86, with: [PN532Status.released]) }
        waiter?.resume(
            returning: .failure(
                TesseraError(
                    .cardRemoved, "the reader switched its field off before the card answered")))
        if wasOn { emulator.onEvent?(.fieldOff) }
    }

    /// Whether the host's target is activated and in the field.
    public var isActive: Bool { emulator.state.withLock { $0.target.phase == .active } }
}

/// The empty field of a PN532 used only in target mode.
struct NoCard: VirtualCard {
    var atr: [UInt8] { get async { [] } }
    func powerOn() async {}
    func powerOff() async {}
    func reset() async {}
    func process(_ command: [UInt8]) async -> [UInt8] { [0x6F, 0x00] }
}
