import NIOCore
import Synchronization
import TesseraCore

/// Bounds the connections open at once across the sockets that share it: `maxConnections` in all and
/// `maxConnectionsPerUid` for one peer uid, so one local user cannot take every descriptor nor starve another.
public final class ConnectionGate: Sendable {
    public let maxConnections: Int
    public let maxConnectionsPerUid: Int
    private let state = Locked(State())

    private struct State {
        var open = 0
        var perUid: [UInt32: Int] = [:]
        var refused = 0
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

    public init(maxConnections: Int = 256, maxConnectionsPerUid: Int = 32) {
        self.maxConnections = maxConnections
        self.maxConnectionsPerUid = maxConnectionsPerUid
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

    /// Connections open now and refused since start.
    public func statistics() -> (open: Int, refused: Int) { state.withLock { ($0.open, $0.refused) } }

    private func release(uid: UInt32) {
        state.withLock { s in
            s.open -= 1
            let left = s.perUid[uid, default: 1] - 1
            s.perUid[uid] = left > 0 ? left : nil
        }
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
