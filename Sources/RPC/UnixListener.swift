import Logging
import NIOCore
import NIOPosix
import TesseraCore

/// The one listener of the daemon's Unix sockets (JSON-RPC and the SSH agent): binds `RPCListenAddress` (a new
/// path through `SocketPath.bind`, with its final mode from the first instant, or an inherited descriptor), reads
/// each connection's peer credentials at accept time, admits it through the `ConnectionGate`, and installs the
/// protocol's frame decoder.
enum UnixListener {
    /// A refused connection is nil.
    typealias Listener<Connection: Sendable> = NIOAsyncChannel<Connection?, Never>

    /// `configure` installs the protocol's handlers on a new connection's pipeline, on its event loop and before
    /// it reads anything, and returns what `accept` hands to `serve`. A connection the gate admits holds its place
    /// until it is closed; one it refuses gets `refusal(error)` (when not nil) and is closed, reading nothing. With
    /// `waitForPlace`, a connection over the gate's bounds waits, unread, for a place (`ConnectionGate.admitInTurn`).
    static func bind<Connection: Sendable>(
        _ address: RPCListenAddress, group: MultiThreadedEventLoopGroup, allowRemoteHalfClosure: Bool,
        gate: ConnectionGate, waitForPlace: Bool = false, refusal: @escaping @Sendable (TesseraError) -> ByteBuffer?,
        configure: @escaping @Sendable (any Channel, PeerCredentials) throws -> Connection
    )
        async throws(TesseraError) -> Listener<Connection>
    {
        do {
            // Names this listener to the gate for the connections that wait for a place.
            let tag = ListenerTag()
            let bootstrap = ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 128)
                .childChannelOption(.allowRemoteHalfClosure, value: allowRemoteHalfClosure)
            let initializer: @Sendable (Channel) -> EventLoopFuture<Connection?> = { channel in
                channel.eventLoop.makeFutureWithTask {
                    let peer = try await PeerCredentials.of(channel)
                    let ticket: ConnectionGate.Ticket
                    do throws(TesseraError) {
                        if waitForPlace {
                            ticket = try await gate.admitInTurn(uid: peer.uid, listener: ObjectIdentifier(tag))
                        } else {
                            ticket = try gate.admit(uid: peer.uid)
                        }
                    } catch {
                        let frame = refusal(error)
                        try await channel.eventLoop.submit {
                            try channel.pipeline.syncOperations.addHandler(RefusedConnectionHandler(refusal: frame))
                        }.get()
                        return nil
                    }
                    channel.closeFuture.whenComplete { _ in ticket.release() }
                    return try await channel.eventLoop.submit { try configure(channel, peer) }.get()
                }
            }
            let listener: Listener<Connection>
            switch address {
            case .path(let path, let mode, let gid):
                try SocketPath.prepare(path)
                let fd = try SocketPath.bind(path, mode: mode, group: gid)
                listener = try await bootstrap.bind(NIOBSDSocket.Handle(fd), childChannelInitializer: initializer)
            case .inheritedDescriptor(let fd):
                listener = try await bootstrap.bind(NIOBSDSocket.Handle(fd), childChannelInitializer: initializer)
            }
            if waitForPlace {
                listener.channel.closeFuture.whenComplete { _ in gate.endWaits(listener: ObjectIdentifier(tag)) }
            }
            return listener
        } catch let e as TesseraError {
            throw e
        } catch {
            throw TesseraError(.internalError, "cannot listen: \(error)")
        }
    }

    /// Serves every accepted connection with `serve` until the listener closes.
    static func accept<Connection: Sendable>(
        _ listener: Listener<Connection>, logger: Logger,
        serve: @escaping @Sendable (Connection) async -> Void
    ) async {
        do {
            try await listener.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in inbound {
                        guard let connection else { continue }
                        group.addTask { await serve(connection) }
                    }
                }
            }
        } catch {
            logger.warning("listener ended: \(error)")
        }
    }
}

/// The identity of one listener for `ConnectionGate.admitInTurn` / `endWaits`.
private final class ListenerTag: Sendable {}
