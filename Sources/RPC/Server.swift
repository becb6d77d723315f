import Logging
import NIOCore
import NIOPosix
import Synchronization
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Handles the requests of one daemon. Implementations route by `request.method`.
public protocol RPCDispatcher: Sendable {
    func handle(_ request: RPCRequest, from connection: RPCConnection) async throws(TesseraError) -> JSONValue
    /// Called when a connection closes, while its in-flight requests may still run (so that long ones, e.g. a
    /// presentation, can end), and again once they have all ended. Must be idempotent.
    func connectionClosed(_ connection: RPCConnection) async
}

extension RPCDispatcher {
    public func connectionClosed(_ connection: RPCConnection) async {}
}

/// One connected client: its peer credentials and a way to push notifications to it.
public final class RPCConnection: Sendable, Hashable {
    public let id: UInt64
    public let peer: PeerCredentials
    private let outbox: Outbox
    /// Requests of this connection being handled (a batch counts once).
    let inFlight = Mutex(0)

    init(id: UInt64, peer: PeerCredentials, outbox: Outbox) {
        self.id = id; self.peer = peer; self.outbox = outbox
    }

    /// Queues a notification and returns at once, never waiting for the peer to read. When the peer lets
    /// more than the server's notification bound pile up, the connection is closed (counted as `closedSlow`).
    /// Dropped when the client has gone.
    public func notify(_ method: String, _ params: JSONValue) async {
        outbox.enqueue(Self.frame(RPCWire.notification(RPCNotification(method: method, params: params))))
    }

    /// Writes a response after the notifications queued before it, waiting while the peer does not read
    /// (bounded by the requests in flight).
    func send(_ message: JSONValue) async {
        let frame = Self.frame(message)
        await withCheckedContinuation { (written: CheckedContinuation<Void, Never>) in
            outbox.enqueueResponse(frame, written: written)
        }
    }

    private static func frame(_ message: JSONValue) -> ByteBuffer {
        var bytes = message.serialized()
        bytes.append(UInt8(ascii: "\n"))
        return ByteBuffer(bytes: bytes)
    }

    public static func == (a: RPCConnection, b: RPCConnection) -> Bool { a.id == b.id }
    public func hash(into h: inout Hasher) { h.combine(id) }
}

/// A connection's frames in the order they are to be written. Notifications are counted: past `limit` waiting,
/// the connection is closed. A response's sender waits until it is written (so responses are bounded by the
/// requests in flight), and a response never overtakes the notifications its request queued before it.
final class Outbox: Sendable {
    enum Frame: Sendable {
        case notification(ByteBuffer)
        case response(ByteBuffer, written: CheckedContinuation<Void, Never>)
    }

    private struct State { var queued = 0; var overflowed = false }
    private let state = Mutex(State())
    private let continuation: AsyncStream<Frame>.Continuation
    let frames: AsyncStream<Frame>
    private let limit: Int
    private let onOverflow: @Sendable () -> Void

    init(limit: Int, onOverflow: @escaping @Sendable () -> Void) {
        (frames, continuation) = AsyncStream.makeStream(of: Frame.self)
        self.limit = limit
        self.onOverflow = onOverflow
    }

    func enqueue(_ frame: ByteBuffer) {
        let queued: Bool? = state.withLock { s -> Bool? in
            if s.overflowed { return nil }
            if s.queued >= limit { s.overflowed = true; return false }
            s.queued += 1
            return true
        }
        switch queued {
        case true?: continuation.yield(.notification(frame))
        case false?: onOverflow(); finish()
        case nil: break
        }
    }

    func enqueueResponse(_ frame: ByteBuffer, written: CheckedContinuation<Void, Never>) {
        if case .terminated = continuation.yield(.response(frame, written: written)) { written.resume() }
    }

    /// Writes every frame in order until `finish()`; a failed write (peer gone) still releases its sender.
    func drain(into writer: NIOAsyncChannelOutboundWriter<ByteBuffer>) async {
        for await frame in frames {
            switch frame {
            case .notification(let bytes):
                try? await writer.write(bytes)
                state.withLock { $0.queued -= 1 }
            case .response(let bytes, let written):
                try? await writer.write(bytes)
                written.resume()
            }
        }
    }

    func finish() { continuation.finish() }
}

/// Connection counters of `RPCServer.statistics()`.
public struct RPCConnectionStatistics: Sendable {
    /// Connections open now.
    public var open: Int
    /// Connections accepted since start.
    public var accepted: Int
    /// Connections closed because their peer let more than the bound of notifications pile up.
    public var closedSlow: Int
    /// Requests answered `BUSY` because their connection had the maximum in flight.
    public var busy: Int
}

/// Where the server listens.
public enum RPCListenAddress: Sendable {
    /// Bind a new socket at `path`, with `mode` and optional group ownership.
    case path(String, mode: UInt32 = 0o660, group: UInt32? = nil)
    /// A listening socket inherited from systemd (LISTEN_FDS).
    case inheritedDescriptor(Int32)
}

/// The JSON-RPC 2.0 server: NDJSON frames over a Unix stream socket, many clients, concurrent requests.
public final class RPCServer: Sendable {
    public let maxFrameBytes: Int
    /// Requests one connection may have in flight; more are answered `BUSY`.
    public let maxRequestsInFlight: Int
    /// Notifications queued for one connection at most; past it the connection is closed.
    public let maxQueuedNotifications: Int
    private let dispatcher: any RPCDispatcher
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let state = Mutex(State())

    private struct State {
        var nextID: UInt64 = 1
        var listener: Channel?
        var connections: [UInt64: Channel] = [:]
        /// Open connections that can take notifications (for `broadcast`).
        var clients: [UInt64: RPCConnection] = [:]
        var shuttingDown = false
        var accepted = 0
        var closedSlow = 0
        var busy = 0
    }

    public init(
        dispatcher: any RPCDispatcher, logger: Logger, maxFrameBytes: Int = 1 << 20,
        maxRequestsInFlight: Int = 64, maxQueuedNotifications: Int = 1024,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) {
        self.dispatcher = dispatcher
        self.logger = logger
        self.maxFrameBytes = maxFrameBytes
        self.maxRequestsInFlight = maxRequestsInFlight
        self.maxQueuedNotifications = maxQueuedNotifications
        self.group = eventLoopGroup
    }

    /// Connection counters for `daemon.status`.
    public func statistics() -> RPCConnectionStatistics {
        state.withLock {
            RPCConnectionStatistics(
                open: $0.connections.count, accepted: $0.accepted,
                closedSlow: $0.closedSlow, busy: $0.busy)
        }
    }

    /// Binds and serves until `shutdown()`; returns once every connection has drained.
    /// `onListening` runs once the socket accepts connections (e.g. to notify systemd).
    public func run(on address: RPCListenAddress, onListening: @Sendable () -> Void = {}) async throws(TesseraError) {
        let maxFrame = maxFrameBytes
        let server = try await UnixListener.bind(address, group: group, allowRemoteHalfClosure: true) { pipeline in
            try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrame)))
        }
        state.withLock { $0.listener = server.channel }
        if state.withLock({ $0.shuttingDown }) { server.channel.close(promise: nil) }
        onListening()
        await UnixListener.accept(server, logger: logger) { connection, peer in await self.serve(connection, peer: peer)
        }
    }

    /// Stops accepting, lets in-flight requests finish and answers them, then closes connections.
    /// Sends a notification to every connected client (e.g. `tokens.changed`); clients that left are skipped.
    public func broadcast(_ method: String, _ params: JSONValue) async {
        let clients = state.withLock { Array($0.clients.values) }
        for client in clients { await client.notify(method, params) }
    }

    public func shutdown() {
        let channels: [Channel] = state.withLock { s in
            s.shuttingDown = true
            return (s.listener.map { [$0] } ?? []) + Array(s.connections.values)
        }
        for (i, c) in channels.enumerated() {
            // The listener closes fully; connections stop reading so in-flight requests can still be answered.
            c.close(mode: i == 0 ? .all : .input, promise: nil)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerCredentials) async {
        let channel = connection.channel
        let id: UInt64 = state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s.accepted += 1
            s.connections[id] = channel
            return id
        }
        if state.withLock({ $0.shuttingDown }) { channel.close(mode: .input, promise: nil) }
        logger.debug("client connected", metadata: ["conn": "\(id)", "uid": "\(peer.uid)", "pid": "\(peer.pid)"])
        var rpcConnection: RPCConnection?
        do {
            // The connection's tasks (and default actors they call) run on its event loop: reading a request,
            // handling it and writing the answer need no wake-up of another thread.
            let executor = EventLoopTaskExecutor(channel.eventLoop)
            try await withTaskExecutorPreference(executor) {
                try await connection.executeThenClose { inbound, outbound in
                    let outbox = Outbox(limit: self.maxQueuedNotifications) {
                        self.state.withLock { $0.closedSlow += 1 }
                        self.logger.warning(
                            "closing a connection that does not read its notifications",
                            metadata: [
                                "conn": "\(id)", "uid": "\(peer.uid)", "pid": "\(peer.pid)",
                                "queued": "\(self.maxQueuedNotifications)",
                            ])
                        channel.close(promise: nil)
                    }
                    let conn = RPCConnection(id: id, peer: peer, outbox: outbox)
                    self.state.withLock { $0.clients[id] = conn }
                    rpcConnection = conn
                    try await withThrowingDiscardingTaskGroup { connectionTasks in
                        // Frames reach the channel here, so whoever sends a notification never waits for the peer.
                        connectionTasks.addTask { await outbox.drain(into: outbound) }
                        defer { outbox.finish() }
                        // The requests run in a task of their own so that the peer going away can cancel them.
                        let requests = Task(executorPreference: executor) {
                            try await self.serveRequests(inbound, on: conn)
                        }
                        // The peer went away (closed, not just half-closed): its answers cannot be delivered, so its
                        // requests are cancelled ("the caller went away") and the close hooks run now, not after
                        // those requests end. At shutdown the requests are answered first.
                        let dispatcher = self.dispatcher
                        channel.closeFuture.whenComplete { _ in
                            if !self.state.withLock({ $0.shuttingDown }) { requests.cancel() }
                            Task { await dispatcher.connectionClosed(conn) }
                        }
                        try await withTaskCancellationHandler {
                            try await requests.value
                        } onCancel: {
                            requests.cancel()
                        }
                    }
                }
            }
        } catch {
            logger.debug("connection \(id) ended: \(error)")
        }
        if let rpcConnection { await dispatcher.connectionClosed(rpcConnection) }
        _ = state.withLock { $0.connections.removeValue(forKey: id) }
        _ = state.withLock { $0.clients.removeValue(forKey: id) }
        logger.debug("client disconnected", metadata: ["conn": "\(id)"])
    }

    /// Reads `conn`'s frames and runs each request as it arrives (at most `maxRequestsInFlight` at once); returns
    /// once the input has ended and every request has been answered.
    private func serveRequests(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>, on conn: RPCConnection)
        async throws
    {
        try await withThrowingDiscardingTaskGroup { group in
            do {
                for try await frame in inbound {
                    let bytes = Array(frame.readableBytesView)
                    let admitted = conn.inFlight.withLock { n in
                        guard n < self.maxRequestsInFlight else { return false }
                        n += 1
                        return true
                    }
                    guard admitted else {
                        // Answered before reading on: a peer that does not read its answers stalls only itself.
                        await self.refuseBusy(bytes, on: conn)
                        continue
                    }
                    group.addTask {
                        await self.process(bytes, on: conn)
                        conn.inFlight.withLock { $0 -= 1 }
                    }
                }
            } catch is FrameTooLargeError {
                await conn.send(
                    RPCWire.response(
                        id: nil,
                        error: TesseraError(
                            .frameTooLarge,
                            "frame exceeds \(self.maxFrameBytes) bytes; connection closed")))
            } catch let error as ChannelError where error == .inputClosed || error == .ioOnClosedChannel {
                // Shutdown closed our input: answer what is in flight, then close.
            }
        }
    }

    /// Answers a request that found its connection with the maximum in flight (`BUSY`, retryable).
    private func refuseBusy(_ frame: [UInt8], on conn: RPCConnection) async {
        state.withLock { $0.busy += 1 }
        let value = try? JSONValue.parse(frame)
        if let value, value["id"] == nil, value.objectValue != nil { return }  // a notification gets no answer
        await conn.send(
            RPCWire.response(
                id: value?["id"],
                error: TesseraError(
                    .busy,
                    "\(maxRequestsInFlight) requests of this connection are in flight; retry when one is answered")))
    }

    private func process(_ frame: [UInt8], on conn: RPCConnection) async {
        if frame.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
        let value: JSONValue
        do { value = try JSONValue.parse(frame) } catch {
            await conn.send(RPCWire.response(id: nil, error: error))
            return
        }
        if case .array(let batch) = value {
            guard !batch.isEmpty else {
                await conn.send(RPCWire.response(id: nil, error: TesseraError(.invalidRequest, "empty batch")))
                return
            }
            var responses: [JSONValue] = []
            for item in batch { if let r = await answer(item, on: conn) { responses.append(r) } }
            if !responses.isEmpty { await conn.send(.array(responses)) }
            return
        }
        if let r = await answer(value, on: conn) { await conn.send(r) }
    }

    private func answer(_ value: JSONValue, on conn: RPCConnection) async -> JSONValue? {
        let request: RPCRequest
        do { request = try RPCWire.parseRequest(value) } catch {
            return RPCWire.response(id: value["id"], error: error)
        }
        do {
            let result = try await dispatcher.handle(request, from: conn)
            return request.isNotification ? nil : RPCWire.response(id: request.id, result: result)
        } catch {
            if error.code == .internalError {
                logger.error("\(request.method) failed: \(error.message)")
            }
            return request.isNotification ? nil : RPCWire.response(id: request.id, error: error)
        }
    }
}

/// Runs jobs on one NIO event loop. Handlers that block run on it too, so they delay that loop's other connections:
/// blocking work belongs on its own threads (as hardware PKCS#11 sessions and PC/SC calls already are).
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        eventLoop.execute { job.runSynchronously(on: executor) }
    }
}

/// Socket-file housekeeping: replace a stale socket, refuse a live one.
enum SocketPath {
    static func prepare(_ path: String) throws(TesseraError) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else {
            throw TesseraError(.invalidInput, "\(path) exists and is not a socket; refusing to replace it")
        }
        if isServed(path) {
            throw TesseraError(.invalidInput, "another instance is already serving \(path)")
        }
        unlink(path)
    }

    /// Whether something accepts connections at `path`.
    static func isServed(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        guard let address = try? SocketAddress(unixDomainSocketPath: path) else { return false }
        return address.withSockAddr { sa, len in connect(fd, sa, socklen_t(len)) == 0 }
    }

    /// A socket bound at `path` with its final owner, group and mode, not yet listening (NIO listens).
    /// The file is created under a umask that leaves no bit beyond `mode` (beyond its owner bits while a
    /// `group` is still to be set), so it never exists with wider permissions than configured.
    static func bind(_ path: String, mode: UInt32, group: UInt32?) throws(TesseraError) -> Int32 {
        let address: SocketAddress
        do { address = try SocketAddress(unixDomainSocketPath: path) } catch {
            throw TesseraError(.invalidInput, "socket path \(path): \(error)")
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TesseraError(.internalError, "cannot create a socket: errno \(errno)") }
        let creationMode = group == nil ? mode : mode & 0o700
        let previous = umask(mode_t(~creationMode & 0o777))
        let rc = address.withSockAddr { sa, len in Glibc.bind(fd, sa, socklen_t(len)) }
        let bindErrno = errno
        umask(previous)
        guard rc == 0 else {
            close(fd)
            throw TesseraError(.internalError, "cannot bind \(path): errno \(bindErrno)")
        }
        Failpoint.hit("socket.bound")
        do { try setPermissions(path, mode: mode, group: group) } catch {
            close(fd)
            unlink(path)
            throw error
        }
        return fd
    }

    static func setPermissions(_ path: String, mode: UInt32, group: UInt32?) throws(TesseraError) {
        if let group, chown(path, UInt32.max, group) != 0 {
            throw TesseraError(.internalError, "cannot give \(path) to group \(group): errno \(errno)")
        }
        guard chmod(path, mode_t(mode)) == 0 else {
            throw TesseraError(.internalError, "cannot chmod \(path): errno \(errno)")
        }
    }
}
