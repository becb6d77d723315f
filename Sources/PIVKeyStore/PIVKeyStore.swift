import APDU
import CredentialStore
import FoundationEssentials
import KeyStores
import Logging
import PCSC
import PIV
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// PIV smart cards over PC/SC (NIST SP 800-73-4) as a passkey key store (backend "piv").
///
/// A monitor task follows readers and cards with SCardGetStatusChange (`PCSCContext.events`, no polling): a card
/// that answers SELECT of the PIV application becomes a token as soon as it is inserted and disappears when it
/// is removed; every change is announced on `changes`. When pcscd is not running the store has no tokens,
/// `status()` says PCSC_UNAVAILABLE, and it recovers by itself when pcscd appears. Start-up never waits for pcscd.
public final class PIVKeyStore: KeyStore {
    private let slots: PIVSlotStore
    private let managementKey: PIVManagementKey?
    private let logger: Logger
    private let context: PCSCContext
    private let retryInterval: Duration
    private let onCommand: (@Sendable (CommandAPDU) -> Void)?
    private let state = Locked(State())
    private let changeStream: AsyncStream<Void>
    private let changeContinuation: AsyncStream<Void>.Continuation

    private struct State {
        var started = false
        var monitor: Task<Void, Never>?
        /// nil until the first look at pcscd.
        var available: Bool?
        var readers: [String: PCSCReaderState] = [:]
        var tokens: [String: PIVToken] = [:]  // by reader
        /// Readers whose card could not be probed yet (busy, transient error): probed again on demand.
        var retryProbe: [String: ContinuousClock.Instant] = [:]
    }

    /// - Parameters:
    ///   - managementKey: the card management key for creating/deleting keys; nil = key creation is refused
    ///     (MANAGEMENT_KEY_REQUIRED). Whether the factory default key is acceptable is the caller's decision.
    ///   - onCommand: sees every command APDU the store sends (APDU counting in tests and benchmarks).
    public init(
        slots: PIVSlotStore, managementKey: PIVManagementKey?, logger: Logger,
        retryInterval: Duration = .seconds(1), onCommand: (@Sendable (CommandAPDU) -> Void)? = nil
    ) {
        self.slots = slots
        self.managementKey = managementKey
        self.logger = logger
        self.context = PCSCContext()
        self.retryInterval = retryInterval
        self.onCommand = onCommand
        (changeStream, changeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    deinit {
        state.withLock { $0.monitor?.cancel() }
        changeContinuation.finish()
    }

    /// Starts watching readers and cards (idempotent). Returns at once.
    public func start() {
        let begin = state.withLock { s -> Bool in
            if s.started { return false }
            s.started = true
            return true
        }
        guard begin else { return }
        let events = context.events(retryInterval: retryInterval)
        let task = Task { [weak self] in
            for await event in events {
                guard let self else { return }
                await self.handle(event)
            }
        }
        state.withLock { $0.monitor = task }
        // The event stream says nothing while pcscd runs without readers: ask once for the initial status.
        Task { [weak self] in
            guard let self else { return }
            var available: Bool?
            do throws(TesseraError) { _ = try await self.context.listReaders(); available = true } catch {
                if error.code == .pcscUnavailable { available = false }
            }
            self.state.withLock { if $0.available == nil { $0.available = available } }
        }
    }

    /// Stops watching and disconnects every card.
    public func close() async {
        let (task, tokens) = state.withLock { s in
            defer { s.tokens = [:]; s.monitor = nil }
            return (s.monitor, Array(s.tokens.values))
        }
        task?.cancel()
        for t in tokens { await t.session.markGone() }
        changeContinuation.finish()
    }

    /// Fires (coalesced) whenever the set of PIV tokens or pcscd's availability changes.
    public var changes: AsyncStream<Void> { changeStream }

    nonisolated(nonsending) public func tokens() async -> [any KeyStoreToken] {
        await probePending()
        return state.withLock { s in s.tokens.values.sorted { $0.reader < $1.reader } }
    }

    /// The PIV token with `id`, if its card is present.
    func token(id: String) async -> PIVToken? {
        await tokens().compactMap { $0 as? PIVToken }.first { $0.id == id }
    }

    /// `{status: "OK"|"PCSC_UNAVAILABLE"|"STARTING", readers: [{name, cardPresent, piv}]}` for `tokens.list`.
    public func status() -> JSONValue {
        state.withLock { s in
            let status: String =
                switch s.available {
                case true?: "OK"
                case false?: TesseraError.Code.pcscUnavailable.rawValue
                case nil: "STARTING"
                }
            let readers: [JSONValue] = s.readers.values.sorted { $0.name < $1.name }.map { r in
                [
                    "name": .string(r.name), "cardPresent": .bool(r.cardPresent),
                    "piv": .bool(s.tokens[r.name] != nil),
                ]
            }
            return ["status": .string(status), "readers": .array(readers)]
        }
    }

    /// Changes the PIN of a present card (CHANGE REFERENCE DATA; a wrong old PIN costs one try).
    public func changePIN(tokenId: String, old: PINAttempt, new: String) async throws(TesseraError) {
        _ = try PIV.paddedPIN(old.pin)
        _ = try PIV.paddedPIN(new)
        guard let token = await token(id: tokenId) else {
            throw TesseraError(.tokenNotPresent, "PIV card \(tokenId) is not present")
        }
        try await token.changePIN(old: old, new: new)
    }

    /// The PIN state of a present card from an empty VERIFY (no try spent).
    public func pinStatus(tokenId: String) async throws(TesseraError) -> PIVPINStatus {
        guard let token = await token(id: tokenId) else {
            throw TesseraError(.tokenNotPresent, "PIV card \(tokenId) is not present")
        }
        return try await token.pinStatus()
    }

    // MARK: monitor

    private func handle(_ event: PCSCEvent) async {
        switch event {
        case .serviceAvailable:
            state.withLock { $0.available = true }
            logger.info("PIV: pcscd is available")
        case .serviceUnavailable:
            let gone = state.withLock { s in
                defer { s.tokens = [:]; s.readers = [:]; s.retryProbe = [:]; s.available = false }
                return Array(s.tokens.values)
            }
            for t in gone { await t.session.markGone() }
            logger.notice("PIV: pcscd is not running (PCSC_UNAVAILABLE); waiting for it")
        case .readerAdded(let r):
            state.withLock {
                $0.readers[r.name] = r; $0.available = true
            }
            if r.cardPresent { await probe(r) }
        case .cardInserted(let r):
            state.withLock { $0.readers[r.name] = r }
            await probe(r)
        case .cardRemoved(let reader):
            state.withLock { $0.readers[reader]?.cardPresent = false }
            await forget(reader: reader)
        case .readerRemoved(let name):
            state.withLock { _ = $0.readers.removeValue(forKey: name) }
            await forget(reader: name)
        }
        changeContinuation.yield()
    }

    private func forget(reader: String) async {
        let token = state.withLock { s in
            s.retryProbe[reader] = nil
            return s.tokens.removeValue(forKey: reader)
        }
        if let token {
            await token.session.markGone()
            logger.info("PIV card removed", metadata: ["token": "\(token.id)", "reader": "\(reader)"])
        }
    }

    /// Connects to a new card, selects PIV and reads its identity and PIN status (one transaction).
    private func probe(_ reader: PCSCReaderState) async {
        let name = reader.name
        let onCommand = self.onCommand
        do {
            let card = try await context.connect(reader: name, shareMode: .shared)
            let (identity, pin) = try await card.transaction {
                (c: PCSCCard) async throws(TesseraError) -> (PIVCardIdentity, PIVPINStatus?) in
                let app = PIVApplication(transport: c, onCommand: onCommand)
                try await app.select()
                return (try await app.identity(), try? await app.pinStatus())
            }
            guard let id = PIVToken.tokenID(for: identity) else {
                logger.warning("PIV card in \(name) has neither CHUID nor serial number; not used")
                await card.disconnect()
                state.withLock { $0.retryProbe[name] = nil }
                return
            }
            let session = PIVCardSession(reader: name, identity: identity, card: card, onCommand: onCommand)
            let token = PIVToken(
                id: id, reader: name, identity: identity, session: session, slots: slots,
                managementKey: managementKey, pinStatus: pin, logger: logger)
            let old = state.withLock { s in
                s.retryProbe[name] = nil
                defer { s.tokens[name] = token }
                return s.tokens[name]
            }
            await old?.session.markGone()
            logger.info("PIV card found", metadata: ["token": "\(id)", "reader": "\(name)"])
        } catch {
            if error.code == .unsupportedProtocol {
                logger.debug("card in \(name) has no PIV application")
                state.withLock { $0.retryProbe[name] = nil }
            } else {
                logger.info("PIV: cannot probe the card in \(name) yet: \(error)")
                state.withLock { $0.retryProbe[name] = ContinuousClock.now }
            }
        }
    }

    /// Probes again cards whose first probe failed for a passing reason, at most once per `retryInterval`.
    nonisolated(nonsending) private func probePending() async {
        let now = ContinuousClock.now
        let due: [PCSCReaderState] = state.withLock { s in
            s.retryProbe.compactMap { name, at in
                guard now - at >= retryInterval, let r = s.readers[name], r.cardPresent else { return nil }
                return r
            }
        }
        for r in due { await probe(r) }
        if !due.isEmpty { changeContinuation.yield() }
    }
}
