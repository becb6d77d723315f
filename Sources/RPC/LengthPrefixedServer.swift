import Logging
import NIOCore
import NIOPosix
import Synchronization
import TesseraCore

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
    private let handler: any FrameHandler
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let state = Mutex(State())

    private struct State {
        var nextID: UInt64 = 1
        var listener: Channel?
        var connections: [UInt64: Channel] = [:]
        var shuttingDown = false
    }

    public init(
        handler: any FrameHandler, logger: Logger, maxFrameBytes: Int,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) {
        self.handler = handler
        self.logger = logger
        self.maxFrameBytes = maxFrameBytes
        self.group = eventLoopGroup
    }

    /// Binds and serves until `shutdown()`.
    public func run(on address: RPCListenAddress, onListening: @Sendable () -> Void = {}) async throws(TesseraError) {
        let maxFrame = maxFrameBytes
        let server = try await UnixListener.bind(address, group: group, allowRemoteHalfClosure: false) { pipeline in
            try pipeline.addHandler(ByteToMessageHandler(LengthPrefixDecoder(maxFrameBytes: maxFrame)))
        }
        state.withLock { $0.listener = server.channel }
        if state.withLock({ $0.shuttingDown }) { server.channel.close(promise: nil) }
        onListening()
        await UnixListener.accept(server, logger: logger) { connection, peer in await self.serve(connection, peer: peer)
        }
    }

    /// Stops accepting and closes every connection.
    public func shutdown() {
        let channels: [Channel] = state.withLock { s in
            s.shuttingDown = true
            return (s.listener.map { [$0] } ?? []) + Array(s.connections.values)
        }
        for c in channels { c.close(promise: nil) }
    }

    private func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerCredentials) async {
        let channel = connection.channel
        let id: UInt64 = state.withLock { s in
            defer { s.nextID += 1 }
            s.connections[s.nextID] = channel
            return s.nextID
        }
        if state.withLock({ $0.shuttingDown }) { channel.close(promise: nil) }
        do {
            try await withTaskExecutorPreference(EventLoopTaskExecutor(channel.eventLoop)) {
                try await connection.executeThenClose { inbound, outbound in
                    for try await frame in inbound {
                        let reply = await self.handler.handle(
                            Array(frame.readableBytesView), connectionID: id, peer: peer)
                        var out = channel.allocator.buffer(capacity: 4 + reply.count)
                        out.writeInteger(UInt32(reply.count))
                        out.writeBytes(reply)
                        try await outbound.write(out)
                    }
                }
            }
        } catch is FrameTooLargeError {
            logger.notice("frame over \(maxFrameBytes) bytes from pid \(peer.pid); connection \(id) closed")
        } catch {
            logger.debug("connection \(id) ended: \(error)")
        }
        await handler.closed(connectionID: id)
        _ = state.withLock { $0.connections.removeValue(forKey: id) }
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
