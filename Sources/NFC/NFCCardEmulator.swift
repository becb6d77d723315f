import APDU
internal import CNFC
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// What an emulated card tells a reader during ISO 14443-A activation.
public struct NFCCardIdentity: Sendable, Equatable {
    /// NFCID1: 4 bytes starting with 08 (a random UID; PN53x chips emulate no other kind).
    public var uid: [UInt8]
    /// SENS_RES, MSB first as readers report it.
    public var atqa: [UInt8]
    /// SEL_RES; bit 0x20 (ISO/IEC 14443-4) is required for APDUs.
    public var sak: UInt8
    /// Historical bytes of the ATS (the chip chooses the ATS interface bytes).
    public var historicalBytes: [UInt8]

    public init(
        uid: [UInt8] = [0x08, 0x54, 0x53, 0x52], atqa: [UInt8] = [0x00, 0x04], sak: UInt8 = 0x20,
        historicalBytes: [UInt8] = []
    ) {
        self.uid = uid; self.atqa = atqa; self.sak = sak; self.historicalBytes = historicalBytes
    }

    /// The ATS recorded in traces (TL, T0 with TA/TB/TC as a PN532 sends them, historical bytes).
    var ats: [UInt8] {
        let body: [UInt8] = [0x75, 0x77, 0x81, 0x02] + historicalBytes
        return [UInt8(body.count + 1)] + body
    }

    func validate() throws(TesseraError) {
        guard uid.count == 4, uid[0] == 0x08 else {
            throw TesseraError(.invalidInput, "an emulated UID is 4 bytes starting with 08 (PN53x target mode)")
        }
        guard atqa.count == 2 else { throw TesseraError(.invalidInput, "ATQA is 2 bytes") }
        guard sak & 0x20 != 0 else { throw TesseraError(.invalidInput, "SAK must announce ISO/IEC 14443-4 (bit 0x20)") }
        guard historicalBytes.count <= 15 else { throw TesseraError(.invalidInput, "at most 15 historical bytes") }
    }
}

/// One APDU exchange of an emulated card.
public struct NFCEmulatedExchange: Sendable, Equatable {
    public var command: [UInt8]
    /// What the card answered (sent to the reader unless `delivered` is false).
    public var response: [UInt8]
    public var commandTime: Date
    public var responseTime: Date
    /// False when the reader had left (field off) before the response could be sent.
    public var delivered: Bool
}

/// Progress of a card emulation session, for live logs.
public enum NFCEmulationEvent: Sendable, Equatable {
    /// Target mode is armed; waiting for a reader to activate the card.
    case waiting(Date)
    /// A reader activated the card (ISO 14443-4).
    case activated(Date)
    case exchange(NFCEmulatedExchange)
    /// The reader released the card or switched its field off; `pendingCommand` is an APDU left unanswered.
    case fieldLost(Date, pendingCommand: [UInt8]?, reason: String)
}

/// How a card emulation session ended and what it served.
public struct NFCEmulationSummary: Sendable, Equatable {
    public enum EndReason: String, Sendable {
        /// `stop()` or task cancellation.
        case stopped
        /// The duration given to `run` elapsed.
        case duration
    }
    public var reason: EndReason
    /// APDU exchanges whose response reached the reader.
    public var exchanges: Int
    /// Reader activations served.
    public var activations: Int
}

/// Card emulation with a libnfc device in target mode: `nfc_target_init` with an ISO 14443-A target (ISO 14443-4
/// PICC emulation, the chip answers RATS), then `nfc_target_receive_bytes` → the `VirtualCard` →
/// `nfc_target_send_bytes`, again for every reader activation until stopped.
///
/// Every libnfc call runs on the device's thread. Stopping: while waiting for a reader, `nfc_abort_command`
/// ends `nfc_target_init` at once; while a reader is attached, the receive loop wakes every `pollInterval`
/// (libnfc 1.8 reads an unset status byte when TgGetData is aborted, so it is never aborted) and the device is
/// idled (InRelease). The price of that poll: a command reaching the chip in the microseconds between a timed-out
/// TgGetData and the next is dropped by libnfc, and the reader sees no answer. Responses longer than a PN532 frame
/// (263 bytes) are replaced by 6700 so readers step down.
public final class NFCCardEmulator: Sendable {
    public let device: NFCDevice
    public let card: any VirtualCard
    public let identity: NFCCardIdentity
    public let trace: APDUTraceWriter?
    public let pollInterval: Duration

    private enum Phase { case idle, arming, serving, finished }
    private struct RunState {
        var phase: Phase = .idle
        var stop: NFCEmulationSummary.EndReason?
    }
    private let state = Locked(RunState())

    /// Longest response one TgSetData carries.
    public static let maximumResponseLength = 263

    public init(
        device: NFCDevice, card: any VirtualCard, identity: NFCCardIdentity = NFCCardIdentity(),
        trace: APDUTraceWriter? = nil, pollInterval: Duration = .seconds(1)
    ) throws(TesseraError) {
        try identity.validate()
        self.device = device; self.card = card; self.identity = identity; self.trace = trace
        self.pollInterval = pollInterval
    }

    /// Ends `run` (idempotent): at once while waiting for a reader, within `pollInterval` while one is attached.
    public func stop() { requestStop(.stopped) }

    /// Serves readers until `stop()`, task cancellation or `duration`. Throws when the device fails
    /// (NO_READER, UNSUPPORTED_PROTOCOL for a device without target mode) or `run` was already used.
    public func run(
        for duration: Duration? = nil,
        onEvent: @escaping @Sendable (NFCEmulationEvent) -> Void = { _ in }
    ) async throws(TesseraError)
        -> NFCEmulationSummary
    {
        let started = state.withLock { s -> Bool in
            guard s.phase == .idle else { return false }
            s.phase = .serving
            return true
        }
        guard started else { throw TesseraError(.invalidInput, "an NFCCardEmulator runs once") }
        let deadline = duration.map { ContinuousClock.now.advanced(by: $0) }
        let pump = Task.detached { [self] in await abortPump(deadline: deadline) }
        defer { pump.cancel() }
        let outcome: Result<NFCEmulationSummary, TesseraError> = await withTaskCancellationHandler {
            var counts = (exchanges: 0, activations: 0)
            do throws(TesseraError) {
                try await serve(onEvent: onEvent, counts: &counts)
            } catch {
                await finish()
                return .failure(error)
            }
            await finish()
            return .success(
                NFCEmulationSummary(
                    reason: state.withLock { $0.stop } ?? .stopped,
                    exchanges: counts.exchanges, activations: counts.activations))
        } onCancel: {
            self.stop()
        }
        return try outcome.get()
    }

    private func requestStop(_ reason: NFCEmulationSummary.EndReason) {
        state.withLock { s in
            if s.stop == nil { s.stop = reason }
            if s.phase == .arming { device.abortBlockingCommand() }
        }
    }

    private var stopRequested: Bool { state.withLock { $0.stop != nil } }

    /// Repeats the abort while `nfc_target_init` waits (an abort landing just before libnfc starts waiting is
    /// lost) and enforces the deadline.
    private func abortPump(deadline: ContinuousClock.Instant?) async {
        while !Task.isCancelled {
            if let deadline, ContinuousClock.now >= deadline { requestStop(.duration) }
            if stopRequested { requestStop(.stopped) }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    private func serve(
        onEvent: @Sendable (NFCEmulationEvent) -> Void,
        counts: inout (exchanges: Int, activations: Int)
    ) async throws(TesseraError) {
        while !stopRequested {
            onEvent(.waiting(Date()))
            guard try await armAndWait() else { continue }
            counts.activations += 1
            trace?.fieldOn()
            trace?.activationA(uid: identity.uid, atqa: identity.atqa, sak: identity.sak, ats: identity.ats)
            await card.powerOn()
            onEvent(.activated(Date()))
            var lost: (pending: [UInt8]?, reason: String)?
            while lost == nil && !stopRequested {
                switch try await receive() {
                case .timeout: continue
                case .released(let reason): lost = (nil, reason)
                case .command(let command):
                    let commandTime = Date()
                    var response = await card.process(command)
                    if response.count > Self.maximumResponseLength { response = [0x67, 0x00] }
                    let outcome = try await send(response)
                    let exchange = NFCEmulatedExchange(
                        command: command, response: response, commandTime: commandTime,
                        responseTime: Date(), delivered: outcome == nil)
                    trace?.exchange(
                        command: command, response: exchange.delivered ? response : [],
                        commandTime: commandTime, responseTime: exchange.responseTime)
                    onEvent(.exchange(exchange))
                    if let reason = outcome { lost = (command, reason) } else { counts.exchanges += 1 }
                }
            }
            trace?.fieldOff()
            await card.powerOff()
            if let lost { onEvent(.fieldLost(Date(), pendingCommand: lost.pending, reason: lost.reason)) }
        }
    }

    /// `nfc_target_init`; true when a reader activated the card, false when aborted by `stop()`.
    private func armAndWait() async throws(TesseraError) -> Bool {
        let identity = self.identity
        let state = self.state
        let connstring = device.connstring
        return try await device.onDevice { pointer throws(TesseraError) -> Bool in
            let proceed = state.withLock { s -> Bool in
                guard s.stop == nil else { return false }
                s.phase = .arming
                return true
            }
            guard proceed else { return false }
            var target = nfc_target()
            target.nm = nfc_modulation(nmt: NMT_ISO14443A, nbr: NBR_UNDEFINED)
            withUnsafeMutableBytes(of: &target.nti.nai.abtAtqa) { $0.copyBytes(from: identity.atqa) }
            withUnsafeMutableBytes(of: &target.nti.nai.abtUid) { $0.copyBytes(from: identity.uid) }
            target.nti.nai.szUidLen = identity.uid.count
            target.nti.nai.btSak = identity.sak
            let ats = Array(identity.ats.dropFirst())
            withUnsafeMutableBytes(of: &target.nti.nai.abtAts) { $0.copyBytes(from: ats) }
            target.nti.nai.szAtsLen = ats.count
            var rx = [UInt8](repeating: 0, count: 264)
            // Timeout 0 waits without limit; libnfc 1.8 reports its own timeout here as success (after idling).
            let result = nfc_target_init(pointer, &target, &rx, rx.count, 0)
            let stopped = state.withLock { s -> Bool in
                s.phase = .serving
                return s.stop != nil
            }
            if stopped { return false }
            if result >= 0 { return true }
            let reason = NFCDevice.lastError(pointer)
            switch result {
            case NFC_EDEVNOTSUPP, NFC_ENOTIMPL:
                throw TesseraError(.unsupportedProtocol, "\(connstring) cannot emulate an ISO 14443-A card: \(reason)")
            case NFC_EINVARG:
                throw TesseraError(.invalidInput, "\(connstring) rejected the emulated target: \(reason)")
            default:
                throw TesseraError(.noReader, "\(connstring) failed to enter target mode: \(reason)")
            }
        }
    }

    private enum Received: Sendable {
        case command([UInt8])
        /// Nothing came and a stop was requested.
        case timeout
        case released(String)
    }

    private func receive() async throws(TesseraError) -> Received {
        let milliseconds = Int32(
            clamping: pollInterval.components.seconds * 1000
                + pollInterval.components.attoseconds / 1_000_000_000_000_000)
        let connstring = device.connstring
        let state = self.state
        return try await device.onDevice { pointer throws(TesseraError) -> Received in
            var rx = [UInt8](repeating: 0, count: 264)
            // The poll repeats here, not in the caller: after a timeout the chip's TgGetData is still pending and
            // libnfc discards its answer when it sends the next command, so a command arriving between the two is
            // lost. Re-sending at once keeps that window to microseconds instead of two thread hops.
            while true {
                let n = nfc_target_receive_bytes(pointer, &rx, rx.count, max(milliseconds, 1))
                if n > 0 { return .command(Array(rx.prefix(Int(n)))) }
                switch n {
                case 0, NFC_ETIMEOUT:
                    if state.withLock({ $0.stop != nil }) { return .timeout }
                case NFC_ETGRELEASED: return .released("the reader released the card or switched its field off")
                case NFC_ERFTRANS: return .released("RF error: \(NFCDevice.lastError(pointer))")
                default:
                    throw TesseraError(
                        .noReader, "\(connstring) failed receiving in target mode: \(NFCDevice.lastError(pointer))")
                }
            }
        }
    }

    /// `nfc_target_send_bytes`; nil when sent, else why the reader did not get it.
    private func send(_ response: [UInt8]) async throws(TesseraError) -> String? {
        let connstring = device.connstring
        return try await device.onDevice { pointer throws(TesseraError) -> String? in
            let n = nfc_target_send_bytes(pointer, response, response.count, 5000)
            if n >= 0 { return nil }
            switch n {
            case NFC_ETGRELEASED: return "the reader switched its field off before the response was sent"
            case NFC_ERFTRANS, NFC_ETIMEOUT: return "RF error sending the response: \(NFCDevice.lastError(pointer))"
            default:
                throw TesseraError(
                    .noReader, "\(connstring) failed sending in target mode: \(NFCDevice.lastError(pointer))")
            }
        }
    }

    /// Leaves target mode (InRelease, PowerDown) so the device is usable afterwards.
    private func finish() async {
        state.withLock { $0.phase = .finished }
        _ = try? await device.onDevice { pointer throws(TesseraError) in
            _ = nfc_idle(pointer)
        }
    }
}
