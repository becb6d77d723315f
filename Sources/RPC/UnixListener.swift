import Logging
import NIOCore
import NIOPosix
import TesseraCore

/// The one listener of the daemon's Unix sockets (JSON-RPC and the SSH agent): binds `RPCListenAddress` (a new
/// path through `SocketPath.bind`, with its final mode from the first instant, or an inherited descriptor), reads
/// each connection's peer credentials at accept time, and installs the protocol's frame decoder.
enum UnixListener {
    typealias Connection = NIOAsyncChannel<ByteBuffer, ByteBuffer>
    typealias Listener = NIOAsyncChannel<(Connection, PeerCredentials), Never>

    /// `addDecoder` installs the frame decoder on a new connection's pipeline (on its event loop).
    static func bind(
        _ address: RPCListenAddress, group: MultiThreadedEventLoopGroup, allowRemoteHalfClosure: Bool,
        addDecoder: @escaping @Sendable (ChannelPipeline.SynchronousOperations) throws -> Void
    )
        async throws(TesseraError) -> Listener
    {
        do {
            let bootstrap = ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 128)
                .childChannelOption(.allowRemoteHalfClosure, value: allowRemoteHalfClosure)
            let initializer: @Sendable (Channel) -> EventLoopFuture<(Connection, PeerCredentials)> = { channel in
                channel.eventLoop.makeFutureWithTask {
                    let peer = try await PeerCredentials.of(channel)
                    let wrapped = try await channel.eventLoop.submit {
                        try addDecoder(channel.pipeline.syncOperations)
                        return try Connection(wrappingChannelSynchronously: channel)
                    }.get()
                    return (wrapped, peer)
                }
            }
            switch address {
            case .path(let path, let mode, let gid):
                try SocketPath.prepare(path)
                let fd = try SocketPath.bind(path, mode: mode, group: gid)
                return try await bootstrap.bind(NIOBSDSocket.Handle(fd), childChannelInitializer: initializer)
            case .inheritedDescriptor(let fd):
                return try await bootstrap.bind(NIOBSDSocket.Handle(fd), childChannelInitializer: initializer)
            }
        } catch let e as TesseraError {
            throw e
        } catch {
            throw TesseraError(.internalError, "cannot listen: \(error)")
        }
    }

    /// Serves every accepted connection with `serve` until the listener closes.
    static func accept(
        _ listener: Listener, logger: Logger,
        serve: @escaping @Sendable (Connection, PeerCredentials) async -> Void
    ) async {
        do {
            try await listener.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await (connection, peer) in inbound {
                        group.addTask { await serve(connection, peer) }
                    }
                }
            }
        } catch {
            logger.warning("listener ended: \(error)")
        }
    }
}
