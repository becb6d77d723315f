import FoundationEssentials
import PKCS11
import TesseraCore

/// The PKCS#11 tokens present, as a snapshot that requests read without waiting.
///
/// Enumerating every module is slow (a walk of every slot) and may block: OpenSC connects to the cards in the
/// readers, and waits for a reader that is busy. So no request enumerates: reading a snapshot older than `maxAge`
/// starts a refresh in the background (one at a time, on its own thread) and returns the snapshot at hand; a
/// refresh that blocks delays only the next snapshot. While the daemon presents a card in a reader
/// (`beginCardPresentation`), modules that talk to readers are not enumerated, so that they never open the reader
/// in which the daemon's own card is: their tokens stay as last seen.
final class PKCS11TokenList: Sendable {
    /// One enumeration's usable tokens.
    struct Snapshot: Sendable {
        let tokens: [PKCS11TokenAdapter]
        let takenAt: ContinuousClock.Instant
        /// Counts the snapshots (a refresh waited for is one with a higher generation).
        let generation: UInt64
    }

    private struct State {
        var snapshot: Snapshot
        var refreshing = false
        /// The running refresh asks modules that talk to readers.
        var refreshAsksReaders = false
        var presentations = 0
    }

    private let provider: PKCS11Provider
    private let makeAdapter: @Sendable (PKCS11Token) -> PKCS11TokenAdapter?
    private let maxAge: Duration
    private let state: Locked<State>

    /// `initial` is the enumeration made at start-up; `makeAdapter` keeps the usable tokens.
    init(
        provider: PKCS11Provider, initial: [PKCS11Token], maxAge: Duration = .seconds(1),
        makeAdapter: @escaping @Sendable (PKCS11Token) -> PKCS11TokenAdapter?
    ) {
        self.provider = provider
        self.makeAdapter = makeAdapter
        self.maxAge = maxAge
        state = Locked(
            State(snapshot: Snapshot(tokens: initial.compactMap(makeAdapter), takenAt: .now, generation: 0)))
    }

    /// The snapshot at hand; starts a background refresh when it is older than `maxAge`.
    func current() -> Snapshot {
        let snapshot = state.withLock { $0.snapshot }
        if ContinuousClock.now - snapshot.takenAt >= maxAge { startRefresh() }
        return snapshot
    }

    /// A snapshot taken after this call, waiting at most `limit` for it (else the one at hand): for a caller that
    /// looks for a token the snapshot lacks, or lists the tokens.
    func fresh(within limit: Duration) async -> Snapshot {
        // A refresh already running may have enumerated before a change: then the one after it counts.
        let (before, busy) = state.withLock { ($0.snapshot.generation, $0.refreshing) }
        let needed = before + (busy ? 2 : 1)
        startRefresh()
        let deadline = ContinuousClock.now + limit
        while true {
            let s = state.withLock { $0 }
            if s.snapshot.generation >= needed || ContinuousClock.now >= deadline { return s.snapshot }
            if !s.refreshing { startRefresh() }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// A card the daemon presents is about to enter a reader: from now on no refresh asks the modules that talk to
    /// readers, and a refresh asking them now is waited for (at most `limit`). Pair with `endCardPresentation`.
    func beginCardPresentation(waitingAtMost limit: Duration = .seconds(5)) async {
        guard provider.hasReaderModules else { return }
        state.withLock { $0.presentations += 1 }
        let deadline = ContinuousClock.now + limit
        while state.withLock({ $0.refreshing && $0.refreshAsksReaders }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The presented card has left its reader.
    func endCardPresentation() {
        guard provider.hasReaderModules else { return }
        state.withLock { $0.presentations -= 1 }
    }

    private func startRefresh() {
        let asksReaders = state.withLock { s -> Bool? in
            guard !s.refreshing else { return nil }
            s.refreshing = true
            s.refreshAsksReaders = s.presentations == 0
            return s.refreshAsksReaders
        }
        guard let asksReaders else { return }
        let provider = self.provider
        let makeAdapter = self.makeAdapter
        Task.detached { [state] in
            let tokens = await provider.tokensAsync(skippingReaderModules: !asksReaders).compactMap(makeAdapter)
            state.withLock { s in
                s.snapshot = Snapshot(tokens: tokens, takenAt: .now, generation: s.snapshot.generation + 1)
                s.refreshing = false
                s.refreshAsksReaders = false
            }
        }
    }
}
