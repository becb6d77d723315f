internal import CPCSCLite
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// A connection to the PC/SC resource manager (pcscd).
///
/// The SCard context is established lazily on first use. When pcscd is gone, calls throw PCSC_UNAVAILABLE
/// and the next call establishes a fresh context, so a long-lived `PCSCContext` recovers by itself when
/// pcscd comes back. Blocking PC/SC calls run on dedicated threads, never on the cooperative pool.
public final class PCSCContext: Sendable {
    private let worker = DedicatedThread(name: "tessera.pcsc.context")
    /// Confined to `worker`.
    private let handle = ThreadConfined<SCARDCONTEXT?>(nil)

    public init() {}

    deinit {
        let handle = self.handle
        worker.enqueue {
            if let ctx = handle.value { SCard.release(ctx) }
            handle.value = nil
        }
    }

    /// Runs `body` with an established context on the context thread; drops the context when pcscd is gone.
    private func withContext<T: Sendable>(
        _ body: @escaping @Sendable (SCARDCONTEXT) -> Result<T, SCardFailure>
    ) async throws(TesseraError) -> T {
        let handle = self.handle
        return try await worker.run { () throws(TesseraError) -> T in
            // One retry: a context that outlived a pcscd restart reports INVALID_HANDLE or NO_SERVICE once.
            for attempt in 0..<2 {
                let ctx: SCARDCONTEXT
                if let existing = handle.value {
                    ctx = existing
                } else {
                    ctx = try SCard.establish()
                    handle.value = ctx
                }
                switch body(ctx) {
                case .success(let value):
                    return value
                case .failure(let failure):
                    let stale = isServiceGone(failure.rv) || failure.rv == SCardRV.invalidHandle
                    if stale {
                        SCard.release(ctx)
                        handle.value = nil
                        if attempt == 0 { continue }
                    }
                    throw failure.error(.context)
                }
            }
            throw TesseraError(.pcscUnavailable, "PC/SC context could not be re-established — " + pcscdAdvice)
        }
    }

    /// All readers with their card state. Empty when pcscd has no reader; PCSC_UNAVAILABLE when pcscd is not running.
    public func listReaders() async throws(TesseraError) -> [PCSCReaderState] {
        try await withContext { ctx in SCard.snapshot(ctx) }
    }

    /// Waits until the readers differ from `known` (reader added/removed, card inserted/removed, sharing changed)
    /// or `timeout` passes, then returns the current readers. Uses SCardGetStatusChange with the PnP
    /// notification pseudo-reader (no polling). Cancelling the task cancels the wait (throws CANCELLED).
    public func waitForChange(known: [PCSCReaderState], timeout: Duration) async throws(TesseraError)
        -> [PCSCReaderState]
    {
        let current = try await listReaders()
        if current != known { return current }
        try await blockingWait(known: known, timeout: timeout)
        if Task.isCancelled { throw TesseraError(.cancelled, "waiting for reader changes was cancelled") }
        return try await listReaders()
    }

    /// One SCardGetStatusChange on a private context and thread, so SCardCancel can interrupt it.
    private func blockingWait(known: [PCSCReaderState], timeout: Duration) async throws(TesseraError) {
        let waiter = WaitCancellation()
        let worker = DedicatedThread(name: "tessera.pcsc.wait")
        var entries = known.map { SCard.WaitEntry(name: $0.name, currentState: SCard.currentState(for: $0)) }
        // pcsc-lite keeps the reader count in the upper 16 bits of the PnP pseudo-reader's state.
        entries.append(SCard.WaitEntry(name: SCardConst.pnpReaderName, currentState: DWORD(known.count) << 16))
        let timeoutMs = Self.milliseconds(timeout)
        let waitEntries = entries
        let result: Result<Void, TesseraError> = await withTaskCancellationHandler {
            do throws(TesseraError) {
                try await worker.run { () throws(TesseraError) in
                    let ctx = try SCard.establish()
                    defer { waiter.finish(); SCard.release(ctx) }
                    guard waiter.begin(ctx) else { return }
                    let (rv, _) = SCard.getStatusChange(ctx, waitEntries, timeoutMs: timeoutMs)
                    switch rv {
                    case SCardRV.success, SCardRV.timeout, SCardRV.cancelled, SCardRV.unknownReader:
                        return
                    default:
                        throw pcscError(rv, "SCardGetStatusChange", phase: .context)
                    }
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        } onCancel: {
            waiter.cancel()
        }
        try result.get()
    }

    static func milliseconds(_ d: Duration) -> DWORD {
        let (seconds, attoseconds) = d.components
        if seconds < 0 { return 0 }
        let ms = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        if ms >= Double(SCardConst.infinite - 1) { return SCardConst.infinite }
        return DWORD(ms.rounded(.up))
    }

    /// Connects to the card in `reader`. Each card gets its own SCard context and thread, so a slow card never
    /// blocks other readers. Throws NO_READER, NO_CARD, CARD_IN_USE (held exclusively elsewhere) or PCSC_UNAVAILABLE.
    public func connect(reader: String, shareMode: PCSCShareMode = .shared, protocols: PCSCProtocols = .any)
        async throws(TesseraError) -> PCSCCard
    {
        try await PCSCCard.connect(reader: reader, shareMode: shareMode, protocols: protocols)
    }

    /// Reader and card events, starting with `readerAdded` for every reader present now.
    /// Built on `waitForChange`; while pcscd is unavailable it retries every `retryInterval`.
    /// The stream ends when the consuming task is cancelled.
    public func events(retryInterval: Duration = .seconds(1)) -> AsyncStream<PCSCEvent> {
        AsyncStream<PCSCEvent> { (continuation: AsyncStream<PCSCEvent>.Continuation) in
            let task = Task { [self] in
                var known: [PCSCReaderState] = []
                var available = true
                var first = true
                while !Task.isCancelled {
                    do throws(TesseraError) {
                        var next =
                            first
                            ? try await listReaders() : try await waitForChange(known: known, timeout: .seconds(60))
                        first = false
                        if PCSCEvent.unsettled(from: known, to: next) {
                            // One of the two looks fell between pcscd writing a card's state and counting the
                            // event; a second look tells a swap (the count moves on) from a torn first look.
                            try? await Task.sleep(for: .milliseconds(20))
                            next = try await listReaders()
                        }
                        if !available {
                            available = true
                            continuation.yield(.serviceAvailable)
                        }
                        for event in PCSCEvent.changes(from: known, to: next) { continuation.yield(event) }
                        known = next
                    } catch {
                        if error.code == .cancelled || Task.isCancelled { break }
                        if error.code == .pcscUnavailable {
                            first = true
                            if available {
                                for event in PCSCEvent.changes(from: known, to: []) { continuation.yield(event) }
                                known = []
                                available = false
                                continuation.yield(.serviceUnavailable)
                            }
                        }
                        try? await Task.sleep(for: retryInterval)
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

extension PCSCEvent {
    /// The events that turn reader list `old` into `new`.
    public static func changes(from old: [PCSCReaderState], to new: [PCSCReaderState]) -> [PCSCEvent] {
        var events: [PCSCEvent] = []
        let newByName = Dictionary(new.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let oldByName = Dictionary(old.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        for o in old where newByName[o.name] == nil {
            if o.cardPresent { events.append(.cardRemoved(reader: o.name)) }
            events.append(.readerRemoved(name: o.name))
        }
        for n in new {
            guard let o = oldByName[n.name] else {
                events.append(.readerAdded(n))
                continue
            }
            switch (o.cardPresent, n.cardPresent) {
            case (false, true):
                events.append(.cardInserted(n))
            case (true, false):
                events.append(.cardRemoved(reader: n.name))
            case (true, true) where countDelta(o, n) >= 2:
                // Removed and re-inserted between two looks. A new ATR alone is not a swap: a reset or an
                // on-demand power-up of the same card changes it, while pcscd counts every insertion.
                events.append(.cardRemoved(reader: n.name))
                events.append(.cardInserted(n))
            default:
                break
            }
        }
        return events
    }

    /// Whether a card present in both looks has an odd count difference. pcscd stores a card's state before
    /// it counts the insertion or removal, so a look taken in between is torn: either `old` missed the count
    /// of the insertion it already showed (same card), or `new` shows a re-inserted card not yet counted
    /// (a swap). Only a further look can tell; `changes` treats a difference of one as the same card.
    public static func unsettled(from old: [PCSCReaderState], to new: [PCSCReaderState]) -> Bool {
        let oldByName = Dictionary(old.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        return new.contains { n in
            guard let o = oldByName[n.name], o.cardPresent, n.cardPresent else { return false }
            return countDelta(o, n) % 2 == 1
        }
    }

    /// Insertions and removals counted between two looks (pcscd's counter is 16 bits and wraps).
    private static func countDelta(_ old: PCSCReaderState, _ new: PCSCReaderState) -> Int {
        (new.eventCount - old.eventCount) & 0xFFFF
    }
}

/// Hands a waiting SCard context to a cancellation handler; re-sends SCardCancel until the wait has ended,
/// closing the window between "about to wait" and "waiting" in which pcsc-lite ignores SCardCancel.
final class WaitCancellation: Sendable {
    private struct State {
        var ctx: SCARDCONTEXT?
        var cancelled = false
        var finished = false
    }
    private let state = Locked(State())

    /// Registers the context; false when already cancelled (then do not wait).
    func begin(_ ctx: SCARDCONTEXT) -> Bool {
        state.withLock { s in
            s.ctx = ctx
            return !s.cancelled
        }
    }

    func finish() {
        state.withLock { s in
            s.finished = true
            s.ctx = nil
        }
    }

    func cancel() {
        state.withLock { $0.cancelled = true }
        DedicatedThread.detach(name: "tessera.pcsc.cancel") { [self] in
            var delayMs: UInt32 = 5
            for _ in 0..<40 {
                let (ctx, finished) = state.withLock { ($0.ctx, $0.finished) }
                if finished { return }
                if let ctx { _ = SCardCancel(ctx) }
                usleep(delayMs * 1000)
                delayMs = min(delayMs * 2, 250)
            }
        }
    }
}

/// State confined to one `DedicatedThread` (never touched elsewhere, hence unchecked).
final class ThreadConfined<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}
