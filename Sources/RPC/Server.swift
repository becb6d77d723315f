import Logging
import NIOCore
import NIOPosix
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// Handles the requests of one daemon. Implementations route by `request.method`.
public protocol RPCDispatcher: Sendable {
    func handle(_ request: RPCRequest, from connection: RPCConnection) async throws(TesseraError) -> JSONValue
    /// Called when a connection closes, while its in-flight requests may still run (so that long ones, e.g. a
    /// presentation, can end), and again once they have all ended. Must be idempotent.
    func connectionClosed(_ connection: RPCConnection) async
    /// The answer to a request of a method the dispatcher answers straight from the frame (no `JSONValue` tree either
    /// way), or nil to leave it to `handle`, which must then give the same answer. Default: nil. It runs on the
    /// caller's executor (`nonisolated(nonsending)`, as the calls of the assertion path below it): no executor switch
    /// per call.
    nonisolated(nonsending) func answerDirectly(_ request: DirectRequest, from connection: RPCConnection) async
        -> DirectAnswer?
    /// Whether `request`, answered directly, is short enough (one token signing, no prompt) to run in its
    /// connection's task rather than a task of its own; frames of the connection wait meanwhile. Default: false.
    func answersInline(_ request: DirectRequest) -> Bool
}

extension RPCDispatcher {
    public func connectionClosed(_ connection: RPCConnection) async {}
    nonisolated(nonsending) public func answerDirectly(_ request: DirectRequest, from connection: RPCConnection) async
        -> DirectAnswer?
    {
        nil
    }
    public func answersInline(_ request: DirectRequest) -> Bool { false }
}

/// One connected client: its peer credentials and a way to push notifications to it.
public final class RPCConnection: Sendable, Hashable {
    public let id: UInt64
    public let peer: PeerCredentials
    private let channel: any Channel
    private let notificationLimit: Int
    private let notifications = Locked(Notifications())
    private let onOverflow: @Sendable () -> Void
    /// Request frames from the channel handler to the connection's task.
    let inbox: FrameInbox
    private let handler: NIOLoopBound<RPCConnectionHandler>

    private struct Notifications {
        /// Queued and not yet handed to the channel (a response hands them over first: it never overtakes them).
        var pending: [ByteBuffer] = []
        /// Queued and not yet written; past the limit the connection is closed.
        var unwritten = 0
        var overflowed = false
        var handOverScheduled = false
    }

    /// On `channel`'s event loop, with the handler that feeds `inbox`.
    init(
        id: UInt64, peer: PeerCredentials, channel: any Channel, handler: RPCConnectionHandler,
        notificationLimit: Int, onOverflow: @escaping @Sendable () -> Void
    ) {
        self.id = id; self.peer = peer; self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.inbox = handler.inbox
        self.notificationLimit = notificationLimit
        self.onOverflow = onOverflow
    }

    /// Queues a notification and returns at once, never waiting for the peer to read. When the peer lets
    /// more than the server's notification bound pile up, the connection is closed (counted as `closedSlow`).
    /// Dropped when the client has gone. A response is written after every notification queued before it.
    public func notify(_ method: String, _ params: JSONValue) async {
        let frame = Self.frame(RPCWire.notification(RPCNotification(method: method, params: params)))
        enum Admission { case queued(scheduleHandOver: Bool), overflow, dropped }
        let admission: Admission = notifications.withLock { n in
            if n.overflowed { return .dropped }
            guard n.unwritten < notificationLimit else {
                n.overflowed = true
                n.pending = []
                return .overflow
            }
            n.unwritten += 1
            n.pending.append(frame)
            defer { n.handOverScheduled = true }
            return .queued(scheduleHandOver: !n.handOverScheduled)
        }
        switch admission {
        case .overflow: onOverflow()
        case .dropped: break
        case .queued(let scheduleHandOver):
            if channel.eventLoop.inEventLoop {
                handOverNotifications()
            } else if scheduleHandOver {
                channel.eventLoop.execute { self.handOverNotifications() }
            }
        }
    }

    /// Hands a request's answer frame (nil: none) to the channel handler, to be written after the notifications
    /// queued before it.
    func answered(_ frame: ByteBuffer?) {
        // On the loop (the inline answers) without `runOnLoop`, whose escaping closure is allocated either way.
        let handler = self.handler
        if channel.eventLoop.inEventLoop {
            handler.value.answered(frame)
        } else {
            channel.eventLoop.execute { handler.value.answered(frame) }
        }
    }

    /// Completes once the connection is closed.
    var closed: EventLoopFuture<Void> { channel.closeFuture }

    var eventLoop: any EventLoop { channel.eventLoop }

    /// Hands the queued notifications to the channel (on its event loop; before every response).
    func handOverNotifications() {
        let frames: [ByteBuffer] = notifications.withLock { n in
            n.handOverScheduled = false
            defer { n.pending = [] }
            return n.pending
        }
        for frame in frames {
            channel.writeAndFlush(frame).whenComplete { _ in self.notifications.withLock { $0.unwritten -= 1 } }
        }
    }

    static func frame(_ message: JSONValue) -> ByteBuffer {
        var bytes = message.serialized()
        bytes.append(UInt8(ascii: "\n"))
        return ByteBuffer(bytes: bytes)
    }

    public static func == (a: RPCConnection, b: RPCConnection) -> Bool { a.id == b.id }
    public func hash(into h: inout Hasher) { h.combine(id) }
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
    /// Connections refused (on any socket sharing the gate) because the daemon or their uid had the maximum open.
    public var refused: Int
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
    /// Methods whose requests may be longer than `maxFrameBytes` (images), and their limit.
    public let largeFrames: LargeFrames?
    /// Requests one connection may have in flight; more are answered `BUSY`.
    public let maxRequestsInFlight: Int
    /// Notifications queued for one connection at most; past it the connection is closed.
    public let maxQueuedNotifications: Int
    /// Bounds the connections open at once (shared with the daemon's other sockets); a refused one is answered
    /// BUSY and closed.
    public let gate: ConnectionGate
    private let dispatcher: any RPCDispatcher
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let state = Locked(State())

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
        maxRequestsInFlight: Int = 64, maxQueuedNotifications: Int = 1024, gate: ConnectionGate = ConnectionGate(),
        largeFrames: LargeFrames? = nil, eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) {
        self.largeFrames = largeFrames
        self.gate = gate
        self.dispatcher = dispatcher
        self.logger = logger
        self.maxFrameBytes = maxFrameBytes
        self.maxRequestsInFlight = maxRequestsInFlight
        self.maxQueuedNotifications = maxQueuedNotifications
        self.group = eventLoopGroup
    }

    /// Connection counters for `daemon.status`.
    public func statistics() -> RPCConnectionStatistics {
        let refused = gate.statistics().refused
        return state.withLock {
            RPCConnectionStatistics(
                open: $0.connections.count, accepted: $0.accepted,
                closedSlow: $0.closedSlow, busy: $0.busy, refused: refused)
        }
    }

    /// Binds and serves until `shutdown()`; returns once every connection has drained.
    /// `onListening` runs once the socket accepts connections (e.g. to notify systemd).
    public func run(on address: RPCListenAddress, onListening: @Sendable () -> Void = {}) async throws(TesseraError) {
        let maxFrame = maxFrameBytes
        let large = largeFrames
        let server = try await UnixListener.bind(
            address, group: group, allowRemoteHalfClosure: true, gate: gate,
            refusal: Self.refusalFrame
        ) { channel, peer in
            let handler = RPCConnectionHandler(server: self, inbox: FrameInbox())
            let connection = self.connection(on: channel, peer: peer, handler: handler)
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrame, large: large)))
            try pipeline.addHandler(handler)
            self.register(connection, channel: channel)
            return connection
        }
        state.withLock { $0.listener = server.channel }
        if state.withLock({ $0.shuttingDown }) { server.channel.close(promise: nil) }
        onListening()
        await UnixListener.accept(server, logger: logger) { connection in await self.serve(connection) }
    }

    /// Stops accepting, lets in-flight requests finish and answers them, then closes connections.
    /// Sends a notification to every connected client (e.g. `tokens.changed`); clients that left are skipped.
    public func broadcast(_ method: String, _ params: JSONValue) async {
        let clients = state.withLock { Array($0.clients.values) }
        for client in clients { await client.notify(method, params) }
    }

    public func shutdown() {
        let (listener, connections): (Channel?, [Channel]) = state.withLock { s in
            s.shuttingDown = true
            return (s.listener, Array(s.connections.values))
        }
        // The listener closes fully; connections stop reading so in-flight requests can still be answered.
        listener?.close(promise: nil)
        for c in connections { Self.closeInput(c) }
    }

    /// A new connection's identity and notification path (on its event loop, before it reads anything).
    private func connection(on channel: any Channel, peer: PeerCredentials, handler: RPCConnectionHandler)
        -> RPCConnection
    {
        let id: UInt64 = state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
        let limit = maxQueuedNotifications
        let connection = RPCConnection(
            id: id, peer: peer, channel: channel, handler: handler, notificationLimit: limit
        ) {
            self.state.withLock { $0.closedSlow += 1 }
            self.logger.warning(
                "closing a connection that does not read its notifications",
                metadata: ["conn": "\(id)", "uid": "\(peer.uid)", "pid": "\(peer.pid)", "queued": "\(limit)"])
            channel.close(promise: nil)
        }
        handler.connection = connection
        return connection
    }

    private func register(_ connection: RPCConnection, channel: any Channel) {
        let shuttingDown = state.withLock { s in
            s.accepted += 1
            s.connections[connection.id] = channel
            s.clients[connection.id] = connection
            return s.shuttingDown
        }
        if shuttingDown { Self.closeInput(channel) }
    }

    /// Stops a connection's reading, on its event loop. NIO may close the input of an active channel only: one still
    /// being set up (accepted, not yet registered) has it closed by its handler once it is active (`channelActive`
    /// sees the shutdown).
    static func closeInput(_ channel: any Channel) {
        channel.eventLoop.execute {
            if channel.isActive { channel.close(mode: .input, promise: nil) }
        }
    }

    private func serve(_ connection: RPCConnection) async {
        let id = connection.id, peer = connection.peer
        logger.debug("client connected", metadata: ["conn": "\(id)", "uid": "\(peer.uid)", "pid": "\(peer.pid)"])
        // The requests run on the connection's event loop, as child tasks of this one: cancelling the server's task
        // cancels them, as the peer closing the connection does. A request the dispatcher answers directly and
        // inline (`answersInline`) runs in this task instead, when no other request of the connection is in flight:
        // frames that come meanwhile wait in the inbox until it is answered.
        let running = Locked(0)
        await withTaskExecutorPreference(ScheduledTaskExecutor(connection.eventLoop)) {
            await withDiscardingTaskGroup { requests in
                while true {
                    switch await connection.inbox.next() {
                    case .frame(let bytes):
                        let direct = DirectRequest(scanning: bytes)
                        if let direct, dispatcher.answersInline(direct), running.withLock({ $0 == 0 }) {
                            connection.answered(await answerFrame(bytes, direct: direct, on: connection))
                            continue
                        }
                        running.withLock { $0 += 1 }
                        requests.addTask {
                            connection.answered(await self.answerFrame(bytes, direct: direct, on: connection))
                            running.withLock { $0 -= 1 }
                        }
                    case .closed(let cancelRequests):
                        if cancelRequests { requests.cancelAll() }
                        return
                    }
                }
            }
        }
        try? await connection.closed.get()
        await dispatcher.connectionClosed(connection)
        state.withLock { s in
            s.connections[id] = nil
            s.clients[id] = nil
        }
        logger.debug("client disconnected", metadata: ["conn": "\(id)"])
    }

    var isShuttingDown: Bool { state.withLock { $0.shuttingDown } }

    /// The peer closed `connection` (or the server did): its close hooks run now, while its requests may still run.
    func connectionWentAway(_ connection: RPCConnection) {
        let dispatcher = self.dispatcher
        Task { await dispatcher.connectionClosed(connection) }
    }

    func countBusy() { state.withLock { $0.busy += 1 } }

    func logDebug(_ message: String) { logger.debug("\(message)") }

    /// What a connection refused by the gate is told before it is closed: an error response without an id.
    static func refusalFrame(_ error: TesseraError) -> ByteBuffer? {
        RPCConnection.frame(RPCWire.response(id: nil, error: error))
    }

    /// The answer to a frame that found its connection with the maximum in flight (`BUSY`, retryable); nil for a
    /// notification.
    static func busyAnswer(to frame: [UInt8], limit: Int) -> JSONValue? {
        let value = try? JSONValue.parse(frame)
        if let value, value["id"] == nil, value.objectValue != nil { return nil }
        return RPCWire.response(
            id: value?["id"],
            error: TesseraError(
                .busy, "\(limit) requests of this connection are in flight; retry when one is answered"))
    }

    /// The answer frame to one frame (`direct`: the frame as scanned): directly when the dispatcher answers its method
    /// so, else through `answer`.
    nonisolated(nonsending) func answerFrame(_ frame: [UInt8], direct: DirectRequest?, on conn: RPCConnection) async
        -> ByteBuffer?
    {
        if let request = direct, var answer = await dispatcher.answerDirectly(request, from: conn) {
            if let error = answer.error, error.code == .internalError {
                logger.error("\(String(decoding: answer.method, as: UTF8.self)) failed: \(error.message)")
            }
            return answer.finish()
        }
        return await answer(frame: frame, on: conn).map(RPCConnection.frame)
    }

    /// The answer to one frame (a request or a batch); nil when nothing is to be sent back.
    func answer(frame: [UInt8], on conn: RPCConnection) async -> JSONValue? {
        if frame.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return nil }
        let value: JSONValue
        do { value = try JSONValue.parse(frame) } catch {
            return RPCWire.response(id: nil, error: error)
        }
        if case .array(let batch) = value {
            guard !batch.isEmpty else {
                return RPCWire.response(id: nil, error: TesseraError(.invalidRequest, "empty batch"))
            }
            var responses: [JSONValue] = []
            for item in batch { if let r = await answer(item, on: conn) { responses.append(r) } }
            return responses.isEmpty ? nil : .array(responses)
        }
        return await answer(value, on: conn)
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

extension ScheduledTaskExecutor {
    /// Runs jobs on one NIO event loop. Handlers that block run on it too, so they delay that loop's other
    /// connections: blocking work belongs on its own threads (as hardware PKCS#11 sessions and PC/SC calls already
    /// are).
    convenience init(_ eventLoop: any EventLoop) {
        self.init { job in eventLoop.execute(job) }
    }
}

/// The daemon's socket files on the way out.
public enum SocketFiles {
    /// Removes the socket at `path` unless something serves it (another instance took the path over).
    public static func removeIfStale(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFSOCK, !SocketPath.isServed(path) else { return }
        unlink(path)
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
