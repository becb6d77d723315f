import NIOCore
import Synchronization
import TesseraCore

/// Bounds the connections open at once across the sockets that share it: `maxConnections` in all and
/// `maxConnectionsPerUid` for one peer uid, so one local user cannot take every descriptor nor starve another.
/// A socket whose clients cannot be told "busy" (the SSH agent's) has its connections over a bound wait in turn
/// (`admitInTurn`), unread, until a place frees: at most `maxWaitingPerUid` of one uid (the listen backlog's size)
/// and `maxConnections` in all.
public final class ConnectionGate: Sendable {
    public let maxConnections: Int
    public let maxConnectionsPerUid: Int
    public let maxWaitingPerUid: Int
    private let state = Locked(State())

    private struct State {
        var open = 0
        var perUid: [UInt32: Int] = [:]
        var refused = 0
        /// Oldest first.
        var waiting: [Waiter] = []
        /// Listeners closed: their connections no longer wait.
        var endedListeners: Set<ObjectIdentifier> = []
    }

    private struct Waiter {
        let listener: ObjectIdentifier
        let uid: UInt32
        let continuation: CheckedContinuation<Ticket?, Never>
    }

    /// A place taken by one connection; `release` (idempotent) gives it back.
    public final class Ticket: Sendable {
        private let gate: ConnectionGate
        private let uid: UInt32
        private let released = Atomic(false)

        fileprivate init(gate: ConnectionGate, uid: UInt32) {
            self.gate = gate
            self.uid = uid
        }

        public func release() {
            guard !released.exchange(true, ordering: .relaxed) else { return }
            gate.release(uid: uid)
        }
    }

    public init(maxConnections: Int = 256, maxConnectionsPerUid: Int = 32, maxWaitingPerUid: Int = 128) {
        self.maxConnections = maxConnections
        self.maxConnectionsPerUid = maxConnectionsPerUid
        self.maxWaitingPerUid = maxWaitingPerUid
    }

    /// A place for a new connection of `uid`; BUSY (retryable) when either bound is reached.
    public func admit(uid: UInt32) throws(TesseraError) -> Ticket {
        let refusal: String? = state.withLock { s in
            let mine = s.perUid[uid, default: 0]
            let reason: String?
            if mine >= maxConnectionsPerUid {
                reason = "uid \(uid) has \(mine) connections open, the most one uid may have; retry when one closes"
            } else if s.open >= maxConnections {
                reason = "the daemon has \(s.open) connections open, the most it takes; retry when one closes"
            } else {
                reason = nil
            }
            if reason != nil {
                s.refused += 1
            } else {
                s.open += 1
                s.perUid[uid] = mine + 1
            }
            return reason
        }
        if let refusal { throw TesseraError(.busy, refusal) }
        return Ticket(gate: self, uid: uid)
    }

    /// A place for a new connection of `uid` accepted by `listener`, waiting in turn (after the uid's earlier
    /// waiters) while a bound is reached. BUSY (retryable) when `maxWaitingPerUid` connections of `uid`, or
    /// `maxConnections` in all, already wait, or when the listener ends first (`endWaits`).
    public func admitInTurn(uid: UInt32, listener: ObjectIdentifier) async throws(TesseraError) -> Ticket {
        let ticket: Ticket? = await withCheckedContinuation { continuation in
            let outcome: Ticket?? = state.withLock { s in
                let mine = s.perUid[uid, default: 0]
                let queued = s.waiting.lazy.filter { $0.uid == uid }.count
                if s.endedListeners.contains(listener) {
                    s.refused += 1
                    return .some(nil)
                }
                if queued == 0, mine < maxConnectionsPerUid, s.open < maxConnections {
                    s.open += 1
                    s.perUid[uid] = mine + 1
                    return .some(Ticket(gate: self, uid: uid))
                }
                if queued >= maxWaitingPerUid || s.waiting.count >= maxConnections {
                    s.refused += 1
                    return .some(nil)
                }
                s.waiting.append(Waiter(listener: listener, uid: uid, continuation: continuation))
                return nil
            }
            if let outcome { continuation.resume(returning: outcome) }
        }
        guard let ticket else {
            throw TesseraError(
                .busy,
                """
                no place for a connection of uid \(uid): at most \(maxWaitingPerUid) of one uid and \(maxConnections) in \
                all wait for one, and none once the socket has closed
                """)
        }
        return ticket
    }

    /// Ends the waits of `listener`'s connections unanswered (BUSY), now and later: it has closed.
    public func endWaits(listener: ObjectIdentifier) {
        let ended: [Waiter] = state.withLock { s in
            s.endedListeners.insert(listener)
            let ended = s.waiting.filter { $0.listener == listener }
            s.waiting.removeAll { $0.listener == listener }
            s.refused += ended.count
            return ended
        }
        for waiter in ended { waiter.continuation.resume(returning: nil) }
    }

    /// Connections open now and refused since start.
    public func statistics() -> (open: Int, refused: Int) { state.withLock { ($0.open, $0.refused) } }

    private func release(uid: UInt32) {
        let admitted: [(CheckedContinuation<Ticket?, Never>, Ticket)] = state.withLock { s in
            s.open -= 1
            let left = s.perUid[uid, default: 1] - 1
            s.perUid[uid] = left > 0 ? left : nil
            // The oldest waiters whose uid now has room take the free places.
            var admitted: [(CheckedContinuation<Ticket?, Never>, Ticket)] = []
            var index = 0
            while index < s.waiting.count, s.open < maxConnections {
                let w = s.waiting[index]
                let theirs = s.perUid[w.uid, default: 0]
                guard theirs < maxConnectionsPerUid else {
                    index += 1
                    continue
                }
                s.waiting.remove(at: index)
                s.open += 1
                s.perUid[w.uid] = theirs + 1
                admitted.append((w.continuation, Ticket(gate: self, uid: w.uid)))
            }
            return admitted
        }
        for (continuation, ticket) in admitted { continuation.resume(returning: ticket) }
    }
}

/// Installed instead of the protocol's handlers on a connection the gate refused: writes `refusal` (if the
/// protocol has a way to say why) and closes, reading nothing.
final class RefusedConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let refusal: ByteBuffer?
    private var refused = false

    init(refusal: ByteBuffer?) { self.refusal = refusal }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { refuse(context) }
    }

    func channelActive(context: ChannelHandlerContext) { refuse(context) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    private func refuse(_ context: ChannelHandlerContext) {
        guard !refused else { return }
        refused = true
        guard let refusal else {
            context.close(promise: nil)
            return
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(refusal)).whenComplete { _ in channel.close(promise: nil) }
    }
}
