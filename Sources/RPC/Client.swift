import NIOCore
import NIOPosix
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A JSON-RPC client for the daemon's socket: concurrent calls multiplexed by id, notifications as a stream.
public final class RPCClient: Sendable {
    private let channel: Channel
    private let state: Locked<State>
    /// Server notifications (progress, events) in arrival order. Ends when the connection closes.
    public let notifications: AsyncStream<RPCNotification>

    private struct State {
        var nextID = 1
        var pending: [Int: CheckedContinuation<JSONValue, any Error>] = [:]
        var closedError: TesseraError?
    }

    private init(channel: Channel, notifications: AsyncStream<RPCNotification>) {
        self.channel = channel
        self.state = Locked(State())
        self.notifications = notifications
    }

    /// Connects to the daemon at `path`. Throws DAEMON_UNAVAILABLE when nothing listens there.
    public static func connect(
        path: String, maxFrameBytes: Int = 64 << 20,
        group: MultiThreadedEventLoopGroup = .singleton
    ) async throws(TesseraError) -> RPCClient {
        let (stream, continuation) = AsyncStream.makeStream(
            of: RPCNotification.self, bufferingPolicy: .bufferingNewest(4096))
        let handler = ClientHandler(notifications: continuation)
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        try ch.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrameBytes)))
                        try ch.pipeline.syncOperations.addHandler(handler)
                    }
                }
                .connect(unixDomainSocketPath: path).get()
        } catch let error as IOError {
            throw TesseraError(
                .daemonUnavailable, unreachableMessage(path: path, errno: error.errnoCode),
                details: ["errno": .number(Double(error.errnoCode))])
        } catch {
            throw TesseraError(.daemonUnavailable, unreachableMessage(path: path, errno: nil))
        }
        let client = RPCClient(channel: channel, notifications: stream)
        handler.attach(client)
        return client
    }

    /// What a user reads when tesserad cannot be reached at `path`: the reason in words and what to do.
    public static func unreachableMessage(path: String, errno: Int32?) -> String {
        let start =
            "Start it (\(DaemonHints.start(socket: path))) or give its socket with --socket PATH or TESSERA_SOCKET; tessera doctor checks the set-up"
        switch errno {
        case ENOENT?:
            return "cannot reach tesserad at \(path): no such socket — is tesserad running? \(start)"
        case ECONNREFUSED?:
            return
                "cannot reach tesserad at \(path): nothing listens on it (tesserad stopped and left its socket?) — \(start)"
        case EACCES?, EPERM?:
            return
                "cannot reach tesserad at \(path): permission denied — \(DaemonHints.permissionDenied(socket: path)); tessera doctor says which"
        case ENOTDIR?:
            return
                "cannot reach tesserad at \(path): a part of the path is not a directory — give the socket with --socket PATH"
        case let code?:
            return "cannot reach tesserad at \(path) (errno \(code)) — \(start)"
        case nil:
            return "cannot reach tesserad at \(path): not a usable socket path — give the socket with --socket PATH"
        }
    }

    /// Calls `method` and returns its result; a JSON-RPC error is thrown as the daemon's `TesseraError`.
    public func call(_ method: String, _ params: JSONValue = .object([:])) async throws(TesseraError) -> JSONValue {
        do {
            return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<JSONValue, any Error>) in
                let id: Int? = state.withLock { s in
                    if let e = s.closedError { cont.resume(throwing: e); return nil }
                    let id = s.nextID
                    s.nextID += 1
                    s.pending[id] = cont
                    return id
                }
                guard let id else { return }
                var bytes = RPCWire.request(id: .number(Double(id)), method: method, params: params).serialized()
                bytes.append(UInt8(ascii: "\n"))
                let channel = self.channel
                channel.writeAndFlush(ByteBuffer(bytes: bytes)).whenFailure { [weak self] error in
                    // The daemon may have answered the connection before closing it (FRAME_TOO_LARGE while the
                    // request was still being written): once the connection is closed, that answer, when it came,
                    // has already ended the call.
                    guard let self else { return }
                    channel.close(promise: nil)
                    channel.closeFuture.whenComplete { _ in
                        self.fail(id: id, TesseraError(.daemonUnavailable, "write failed: \(error)"))
                    }
                }
            }
        } catch let e as TesseraError {
            throw e
        } catch {
            throw TesseraError(.internalError, "\(error)")
        }
    }

    /// Sends raw bytes as they are (for tests of framing and malformed input).
    @_spi(Testing)
    public func sendRaw(_ bytes: [UInt8]) async throws(TesseraError) {
        do { try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get() } catch {
            throw TesseraError(.daemonUnavailable, "write failed: \(error)")
        }
    }

    /// Shuts the sending half of the connection (end of file for the daemon) and keeps reading (for tests of
    /// half-closed connections).
    @_spi(Testing)
    public func closeOutput() async {
        try? await channel.close(mode: .output).get()
    }

    public func close() async {
        try? await channel.close().get()
    }

    /// Completes once the connection is closed (by either side).
    public func waitClosed() async {
        try? await channel.closeFuture.get()
    }

    /// Completes the pending call with this response's id; false when no call is waiting for it.
    fileprivate func resolve(_ message: JSONValue) -> Bool {
        guard let id = message["id"]?.intValue else { return false }
        guard let cont = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return false }
        if let error = message["error"] {
            cont.resume(throwing: RPCWire.decodeError(error))
        } else {
            cont.resume(returning: message["result"] ?? .null)
        }
        return true
    }

    private func fail(id: Int, _ error: TesseraError) {
        state.withLock { $0.pending.removeValue(forKey: id) }?.resume(throwing: error)
    }

    fileprivate func closed(with error: TesseraError) {
        let pending = state.withLock { s -> [CheckedContinuation<JSONValue, any Error>] in
            s.closedError = error
            defer { s.pending = [:] }
            return Array(s.pending.values)
        }
        for p in pending { p.resume(throwing: error) }
    }
}

/// Routes inbound frames to pending calls or the notification stream. Event-loop confined.
private final class ClientHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    private let notifications: AsyncStream<RPCNotification>.Continuation
    private let client = Locked<RPCClient?>(nil)
    /// Responses without an id (e.g. FRAME_TOO_LARGE, PARSE_ERROR) are surfaced as notifications named `rpc.error`.
    init(notifications: AsyncStream<RPCNotification>.Continuation) { self.notifications = notifications }

    func attach(_ c: RPCClient) { client.withLock { $0 = c } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard let message = try? JSONValue.parse(frame.readableBytesView) else { return }
        let items = message.arrayValue ?? [message]
        for item in items {
            if let method = item["method"]?.stringValue, item["id"] == nil {
                notifications.yield(RPCNotification(method: method, params: item["params"] ?? .null))
            } else if client.withLock({ $0 })?.resolve(item) != true, let error = item["error"] {
                notifications.yield(RPCNotification(method: "rpc.error", params: error))
                // The daemon answered the connection, not a call (FRAME_TOO_LARGE), and closes it: the calls
                // waiting end with its error rather than "connection closed".
                let decoded = RPCWire.decodeError(error)
                if decoded.code == .frameTooLarge { client.withLock { $0 }?.closed(with: decoded) }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        client.withLock { $0 }?.closed(with: TesseraError(.daemonUnavailable, "connection to tesserad closed"))
        notifications.finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
