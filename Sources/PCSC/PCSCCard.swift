import APDU
internal import CPCSCLite
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// What happens to the card when a connection ends or is re-established.
public enum PCSCDisposition: Sendable, Hashable {
    case leave, reset, unpower

    var dword: DWORD {
        switch self {
        case .leave: SCardConst.leaveCard
        case .reset: SCardConst.resetCard
        case .unpower: SCardConst.unpowerCard
        }
    }
}

/// A connection to the card in one reader; an `APDUTransport`.
///
/// Every card has its own SCard context and serial thread: calls on one card are serialised, calls on
/// different cards run in parallel. Errors: CARD_REMOVED (card or reader gone — never an empty success),
/// CARD_RESET (another client reset the card; call `reconnect()`), CARD_IN_USE, PCSC_UNAVAILABLE, CARD_ERROR.
public final class PCSCCard: APDUTransport, Sendable {
    public let reader: String
    public let shareMode: PCSCShareMode
    public let protocols: PCSCProtocols

    private struct Session {
        var ctx: SCARDCONTEXT?
        var card: SCARDHANDLE?
        var proto: DWORD = 0
        var closed = false
    }

    private struct Info {
        var atr: [UInt8]
        var activeProtocol: PCSCProtocol
    }

    private let worker: DedicatedThread
    /// Confined to `worker`.
    private let session: ThreadConfined<Session>
    private let info: Locked<Info>

    private init(
        reader: String, shareMode: PCSCShareMode, protocols: PCSCProtocols, worker: DedicatedThread,
        session: Session, atr: [UInt8]
    ) {
        self.reader = reader
        self.shareMode = shareMode
        self.protocols = protocols
        self.worker = worker
        self.session = ThreadConfined(session)
        self.info = Locked(Info(atr: atr, activeProtocol: PCSCProtocol(dword: UInt(session.proto))))
    }

    deinit {
        let session = self.session
        worker.enqueue {
            Self.close(session, disposition: SCardConst.leaveCard)
        }
    }

    /// The card's ATR as of the last connect/reconnect.
    public var atr: [UInt8] { info.current.atr }

    /// The protocol negotiated for this connection.
    public var activeProtocol: PCSCProtocol { info.current.activeProtocol }

    /// From the ATR's card capabilities (historical bytes); false when the ATR does not say.
    public var supportsExtendedLength: Bool { ATRInfo(atr)?.extendedLength ?? false }

    static func connect(reader: String, shareMode: PCSCShareMode, protocols: PCSCProtocols)
        async throws(TesseraError) -> PCSCCard
    {
        let worker = DedicatedThread(name: "tessera.pcsc.card")
        let (session, atr) = try await worker.run { () throws(TesseraError) -> (Session, [UInt8]) in
            try Self.open(reader: reader, shareMode: shareMode, protocols: protocols)
        }
        return PCSCCard(
            reader: reader, shareMode: shareMode, protocols: protocols, worker: worker,
            session: session, atr: atr)
    }

    private static func shareDword(_ mode: PCSCShareMode) -> DWORD {
        switch mode {
        case .shared: SCardConst.shareShared
        case .exclusive: SCardConst.shareExclusive
        case .direct: SCardConst.shareDirect
        }
    }

    /// New context + SCardConnect + SCardRV. Blocking.
    private static func open(reader: String, shareMode: PCSCShareMode, protocols: PCSCProtocols)
        throws(TesseraError) -> (Session, [UInt8])
    {
        let ctx = try SCard.establish()
        var card: SCARDHANDLE = 0
        var proto: DWORD = 0
        let rv = Int(SCardConnect(ctx, reader, shareDword(shareMode), DWORD(protocols.rawValue), &card, &proto))
        guard rv == SCardRV.success else {
            SCard.release(ctx)
            throw pcscError(rv, "SCardConnect(\(reader))", phase: .connect)
        }
        var session = Session(ctx: ctx, card: card, proto: proto)
        if shareMode == .direct { return (session, []) }
        switch status(card) {
        case .success(let st):
            return (session, st.atr)
        case .failure(let f):
            close(ThreadConfined(session), disposition: SCardConst.leaveCard)
            session.closed = true
            throw f.error(.connect)
        }
    }

    private static func close(_ session: ThreadConfined<Session>, disposition: DWORD) {
        if let card = session.value.card { _ = SCardDisconnect(card, disposition) }
        if let ctx = session.value.ctx { SCard.release(ctx) }
        session.value.card = nil
        session.value.ctx = nil
        session.value.closed = true
    }

    private struct CardStatus {
        var state: DWORD
        var proto: DWORD
        var atr: [UInt8]
    }

    private static func status(_ card: SCARDHANDLE) -> Result<CardStatus, SCardFailure> {
        var name = [CChar](repeating: 0, count: 4 * SCardConst.maxReaderName)
        var nameLen = DWORD(name.count)
        var state: DWORD = 0
        var proto: DWORD = 0
        var atr = [UInt8](repeating: 0, count: SCardConst.maxATRSize)
        var atrLen = DWORD(atr.count)
        let rv = Int(SCardStatus(card, &name, &nameLen, &state, &proto, &atr, &atrLen))
        guard rv == SCardRV.success else { return .failure(SCardFailure(rv, "SCardStatus")) }
        return .success(CardStatus(state: state, proto: proto, atr: Array(atr.prefix(Int(atrLen)))))
    }

    /// The open handle, or CARD_REMOVED when the connection was closed.
    private static func handle(_ session: ThreadConfined<Session>) throws(TesseraError) -> SCARDHANDLE {
        guard !session.value.closed, let card = session.value.card else {
            throw TesseraError(.cardRemoved, "card connection is closed", retryable: false)
        }
        return card
    }

    /// Sends one command APDU with the PCI of the active protocol and returns response data + SW1SW2.
    public func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let session = self.session
        let reader = self.reader
        return try await worker.run { () throws(TesseraError) -> [UInt8] in
            let card = try Self.handle(session)
            var response = [UInt8](repeating: 0, count: SCardConst.maxBufferExtended)
            var length = DWORD(response.count)
            let rv: Int
            switch session.value.proto {
            case SCardConst.protocolT0:
                rv = withUnsafePointer(to: g_rgSCardT0Pci) { pci in
                    Int(SCardTransmit(card, pci, command, DWORD(command.count), nil, &response, &length))
                }
            case SCardConst.protocolRaw:
                rv = withUnsafePointer(to: g_rgSCardRawPci) { pci in
                    Int(SCardTransmit(card, pci, command, DWORD(command.count), nil, &response, &length))
                }
            default:
                rv = withUnsafePointer(to: g_rgSCardT1Pci) { pci in
                    Int(SCardTransmit(card, pci, command, DWORD(command.count), nil, &response, &length))
                }
            }
            if rv != SCardRV.success && !Self.transportErrors.contains(rv) {
                throw pcscError(rv, "SCardTransmit", phase: .session)
            }
            if rv == SCardRV.success && length >= 2 { return Array(response.prefix(Int(length))) }
            // A transport failure, or vpcd's quirk of "succeeding" with an empty response after the virtual card
            // left: find out from the reader whether the card is gone before blaming the card.
            let cause = rv == SCardRV.success ? "empty response" : "SCardTransmit: \(pcscErrorText(rv))"
            if let removed = Self.confirmRemoval(session, reader: reader, cause: cause) { throw removed }
            if rv != SCardRV.success { throw pcscError(rv, "SCardTransmit", phase: .session) }
            throw TesseraError(.cardError, "empty response from the card in \(reader)")
        }
    }

    /// Transmit failures that a card removal can cause (vpcd reports NOT_TRANSACTED when its link drops).
    private static let transportErrors: Set<Int> = [
        SCardRV.notTransacted, SCardRV.commDataLost, SCardRV.unresponsiveCard, SCardRV.unpoweredCard,
        0x8010_0013,  // SCARD_F_COMM_ERROR
        0x8010_0014,  // SCARD_F_UNKNOWN_ERROR
    ]

    /// CARD_REMOVED (or another session error) when the card left or leaves within a short grace period
    /// (pcscd notices a removal on its next reader poll); nil when the card is still there.
    private static func confirmRemoval(_ session: ThreadConfined<Session>, reader: String, cause: String)
        -> TesseraError?
    {
        guard let card = session.value.card, let ctx = session.value.ctx else {
            return TesseraError(.cardRemoved, "card connection is closed", retryable: false)
        }
        switch status(card) {
        case .failure(let f):
            return f.error(.session)
        case .success(let st) where st.state & SCardConst.cardPresent == 0:
            return TesseraError(.cardRemoved, "card left \(reader) (\(cause))")
        case .success:
            break
        }
        let (rv0, now) = SCard.getStatusChange(
            ctx, [SCard.WaitEntry(name: reader, currentState: SCardConst.stateUnaware)],
            timeoutMs: 0)
        guard rv0 == SCardRV.success || rv0 == SCardRV.timeout, let before = now.first else {
            return pcscError(rv0, "SCardGetStatusChange", phase: .session)
        }
        if before.eventState & SCardConst.statePresent == 0 {
            return TesseraError(.cardRemoved, "card left \(reader) (\(cause))")
        }
        let (rv, after) = SCard.getStatusChange(
            ctx, [SCard.WaitEntry(name: reader, currentState: before.eventState & ~SCardConst.stateChanged)],
            timeoutMs: 1500)
        if rv == SCardRV.timeout { return nil }
        guard rv == SCardRV.success, let state = after.first else {
            return pcscError(rv, "SCardGetStatusChange", phase: .session)
        }
        let countBefore = (before.eventState >> 16) & 0xFFFF
        let countAfter = (state.eventState >> 16) & 0xFFFF
        if state.eventState & SCardConst.statePresent == 0 || countAfter != countBefore
            || state.eventState & SCardConst.stateUnknown != 0
        {
            return TesseraError(.cardRemoved, "card left \(reader) (\(cause))")
        }
        return nil
    }

    /// Runs `body` inside an exclusive PC/SC transaction (SCardBeginTransaction … SCardEndTransaction with
    /// SCARD_LEAVE_CARD). The transaction is always ended, also when `body` throws.
    nonisolated(nonsending) public func transaction<T>(
        _ body: (PCSCCard) async throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        try await beginTransaction()
        let result: T
        do {
            result = try await body(self)
        } catch {
            try? await endTransaction()
            throw error
        }
        try await endTransaction()
        return result
    }

    private func beginTransaction() async throws(TesseraError) {
        let session = self.session
        try await worker.run { () throws(TesseraError) in
            let card = try Self.handle(session)
            let rv = Int(SCardBeginTransaction(card))
            guard rv == SCardRV.success else { throw pcscError(rv, "SCardBeginTransaction", phase: .session) }
        }
    }

    private func endTransaction() async throws(TesseraError) {
        let session = self.session
        try await worker.run { () throws(TesseraError) in
            let card = try Self.handle(session)
            let rv = Int(SCardEndTransaction(card, SCardConst.leaveCard))
            guard rv == SCardRV.success else { throw pcscError(rv, "SCardEndTransaction", phase: .session) }
        }
    }

    /// Re-establishes the connection (after CARD_RESET, or after the card was removed and inserted again,
    /// or after pcscd restarted). Falls back to a fresh context + connect when the old handle is dead.
    /// Updates `atr` and `activeProtocol`. Throws NO_CARD when the reader is empty, NO_READER when it is gone.
    public func reconnect(initialization: PCSCDisposition = .leave) async throws(TesseraError) {
        let session = self.session
        let info = self.info
        let reader = self.reader
        let shareMode = self.shareMode
        let protocols = self.protocols
        try await worker.run { () throws(TesseraError) in
            if !session.value.closed, let card = session.value.card {
                var proto: DWORD = 0
                let rv = Int(
                    SCardReconnect(
                        card, Self.shareDword(shareMode), DWORD(protocols.rawValue),
                        initialization.dword, &proto))
                if rv == SCardRV.success, case .success(let st) = Self.status(card) {
                    session.value.proto = proto
                    info.withLock { $0 = Info(atr: st.atr, activeProtocol: PCSCProtocol(dword: UInt(proto))) }
                    return
                }
                if rv == SCardRV.noSmartcard { throw pcscError(rv, "SCardReconnect", phase: .connect) }
            }
            Self.close(session, disposition: SCardConst.leaveCard)
            let (fresh, atr) = try Self.open(reader: reader, shareMode: shareMode, protocols: protocols)
            session.value = fresh
            info.withLock { $0 = Info(atr: atr, activeProtocol: PCSCProtocol(dword: UInt(fresh.proto))) }
        }
    }

    /// Ends the connection and releases its context. Later calls throw CARD_REMOVED ("connection is closed").
    public func disconnect(disposition: PCSCDisposition = .leave) async {
        let session = self.session
        try? await worker.run { () throws(TesseraError) in
            Self.close(session, disposition: disposition.dword)
        }
    }

    /// Whether the card is still present in the reader (SCardStatus).
    public func isPresent() async -> Bool {
        let session = self.session
        let r = try? await worker.run { () throws(TesseraError) -> Bool in
            guard !session.value.closed, let card = session.value.card else { return false }
            guard case .success(let st) = Self.status(card) else { return false }
            return st.state & SCardConst.cardPresent != 0
        }
        return r ?? false
    }
}
