import Logging
import NIOCore
import NIOPosix
import TesseraCore
import TesseraRuntime

/// Answers the binary frames of one protocol (e.g. the SSH agent's) one connection at a time, in order.
public protocol FrameHandler: Sendable {
    /// The reply body to one frame body (the server adds the length prefix).
    func handle(_ frame: [UInt8], connectionID: UInt64, peer: PeerCredentials) async -> [UInt8]
    /// Called once when a connection closes.
    func closed(connectionID: UInt64) async
}

/// A Unix-socket server for uint32-length-prefixed frames (the SSH agent wire format). Requests on a connection are
/// answered in order; a frame longer than `maxFrameBytes` closes the connection without an answer.
/// Handlers run on the connection's event loop and must not block it.
public final class LengthPrefixedServer: Sendable {
    public let maxFrameBytes: Int
    /// Bounds the connections open at once (shared with the daemon's other sockets); one over the bounds waits,
    /// unread, for a place (the agent protocol has no "busy"), and one past the gate's waiting bound is closed.
    public let gate: ConnectionGate
    private let handler: any FrameHandler
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let state = Locked(State())

    private struct State {
        var nextID: UInt64 = 1
        var listener: Channel?
        var connections: [UInt64: Channel] = [:]
        var shuttingDown = false
    }

    public init(
        handler: any FrameHandler, logger: Logger, maxFrameBytes: Int, gate: ConnectionGate = ConnectionGate(),
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) {
        self.gate = gate
        self.handler = handler
        self.logger = logger
        self.maxFrameBytes = maxFrameBytes
        self.group = eventLoopGroup
    }

    /// Binds and serves until `shutdown()`.
    public func run(on address: RPCListenAddress, onListening: @Sendable () -> Void = {}) async throws(TesseraError) {
        let maxFrame = maxFrameBytes
        let server = try await UnixListener.bind(
            address, group: group, allowRemoteHalfClosure: false, gate: gate, waitForPlace: true,
            refusal: Self.refusalFrame
        ) { channel, peer in
            let id: UInt64 = self.state.withLock { s in
                defer { s.nextID += 1 }
                return s.nextID
            }
            let handler = FrameConnectionHandler(id: id, peer: peer, logger: self.logger, maxFrameBytes: maxFrame)
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(ByteToMessageHandler(LengthPrefixDecoder(maxFrameBytes: maxFrame)))
            try pipeline.addHandler(handler)
            let shuttingDown = self.state.withLock { s in
                s.connections[id] = channel
                return s.shuttingDown
            }
            if shuttingDown { channel.close(promise: nil) }
            return FrameConnection(
                id: id, peer: peer, channel: channel, inbox: handler.inbox,
                handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
        }
        state.withLock { $0.listener = server.channel }
        if state.withLock({ $0.shuttingDown }) { server.channel.close(promise: nil) }
        onListening()
        await UnixListener.accept(server, logger: logger) { connection in await self.serve(connection) }
    }

    /// A connection refused by the gate is closed without a word (the agent protocol has no such error).
    static func refusalFrame(_: TesseraError) -> ByteBuffer? { nil }

    /// Stops accepting and closes every connection.
    public func shutdown() {
        let channels: [Channel] = state.withLock { s in
            s.shuttingDown = true
            return (s.listener.map { [$0] } ?? []) + Array(s.connections.values)
        }
        for c in channels { c.close(promise: nil) }
    }

    /// Answers the connection's frames one at a time, in order, on its event loop, until its input ends.
    private func serve(_ connection: FrameConnection) async {
        let eventLoop = connection.channel.eventLoop
        await withTaskExecutorPreference(ScheduledTaskExecutor(eventLoop)) {
            while case .frame(let frame) = await connection.inbox.next() {
                // The frames left when the connection closed (the decoder hands over all it holds then) are
                // dropped: their replies could not be written.
                if connection.inbox.isClosed { continue }
                let reply = await handler.handle(frame, connectionID: connection.id, peer: connection.peer)
                let handler = connection.handler
                eventLoop.runOnLoop { handler.value.reply(reply) }
            }
        }
        try? await connection.channel.closeFuture.get()
        await handler.closed(connectionID: connection.id)
        _ = state.withLock { $0.connections.removeValue(forKey: connection.id) }
    }
}

/// What the accept loop serves: one connection and the way to its channel handler.
struct FrameConnection: Sendable {
    let id: UInt64
    let peer: PeerCredentials
    let channel: any Channel
    let inbox: FrameInbox
    let handler: NIOLoopBound<FrameConnectionHandler>
}

/// One connection of a `LengthPrefixedServer`, on its event loop (every method here runs there): frames go to the
/// connection's task through `inbox`, at most `maxUnanswered` unanswered before reading pauses (`InboxHandler`).
/// An oversized frame closes the connection unanswered.
final class FrameConnectionHandler: InboxHandler {
    static let maxUnanswered = 4
    private let id: UInt64
    private let peer: PeerCredentials
    private let logger: Logger
    private let maxFrameBytes: Int

    init(id: UInt64, peer: PeerCredentials, logger: Logger, maxFrameBytes: Int) {
        self.id = id
        self.peer = peer
        self.logger = logger
        self.maxFrameBytes = maxFrameBytes
        super.init(maxOutstanding: Self.maxUnanswered, cancelRequestsOnEnd: false)
    }

    override func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is FrameTooLargeError {
            logger.notice("frame over \(maxFrameBytes) bytes from pid \(peer.pid); connection \(id) closed")
        } else {
            logger.debug("connection \(id) ended: \(error)")
        }
        context.close(promise: nil)
    }

    /// Writes the reply to the oldest unanswered frame, with its length prefix.
    func reply(_ body: [UInt8]) {
        guard let context, !ended else { return }
        var out = context.channel.allocator.buffer(capacity: 4 + body.count)
        out.writeInteger(UInt32(body.count))
        out.writeBytes(body)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { _ in handler.value.settled() }
    }
}

/// Splits the stream into frames of a big-endian uint32 length and that many bytes.
struct LengthPrefixDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    let maxFrameBytes: Int

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
        guard Int(length) <= maxFrameBytes else { throw FrameTooLargeError(limit: maxFrameBytes) }
        guard buffer.readableBytes >= 4 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        context.fireChannelRead(Self.wrapInboundOut(buffer.readSlice(length: Int(length))!))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData  // a truncated last frame is dropped with the connection
    }
}
