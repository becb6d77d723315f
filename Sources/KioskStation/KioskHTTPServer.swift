import NIOCore
import NIOHTTP1
import NIOPosix
import TesseraCore

/// The station's web server (swift-nio HTTP/1.1): the page and its assets from the binary, the views as
/// server-sent events (`GET /events`), the page's actions (`POST /api/action`), the as-typed MRZ check
/// (`POST /api/check`), camera frames for the MRZ reader (`POST /api/mrz`), the message catalogues
/// (`GET /catalogues.json`) and drawings (`GET /drawings/NAME.svg`). Nothing is loaded from the network. Loopback
/// only; every request but the exchange of the printed URL's secret needs the session cookie (`KioskAccess`).
/// Bounded: `KioskLimits`.
public final class KioskHTTPServer: Sendable {
    private let channel: Channel
    /// The port it listens on (the one asked for, or the one the system chose for 0).
    public let port: Int

    private init(channel: Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Listens on the loopback address `host` at `port` (0: any free port) and serves `bridge` to the browser that
    /// exchanges `access`'s secret. Another address is refused (INVALID_INPUT).
    public static func start(
        host: String, port: Int, bridge: KioskBridge, access: KioskAccess, limits: KioskLimits = KioskLimits(),
        group: MultiThreadedEventLoopGroup = .singleton
    ) async throws(TesseraError) -> KioskHTTPServer {
        guard KioskRoutes.isLoopback(host) else {
            throw TesseraError(
                .invalidInput,
                "the kiosk listens on a loopback address only (127.0.0.1, [::1] or localhost), not \(host)",
                details: ["field": "listen"])
        }
        let routes = KioskRoutes(bridge: bridge, access: access, limits: limits, host: host, port: port)
        do {
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 64)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(
                    .writeBufferWaterMark,
                    value: .init(low: limits.eventBufferBytes / 2, high: limits.eventBufferBytes)
                )
                .childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(limits.eventBufferBytes))
                .childChannelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        try ch.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                        try ch.pipeline.syncOperations.addHandler(KioskHTTPHandler(routes: routes))
                    }
                }
                .bind(host: host, port: port).get()
            let bound = channel.localAddress?.port ?? port
            routes.boundPort.withLock { $0 = bound }
            return KioskHTTPServer(channel: channel, port: bound)
        } catch {
            throw TesseraError(
                .invalidInput, "cannot listen on \(host):\(port): \(error)", details: ["field": "listen"])
        }
    }

    /// Stops listening.
    public func close() async {
        try? await channel.close().get()
    }

    /// Completes when the listener closes.
    public func waitClosed() async {
        try? await channel.closeFuture.get()
    }
}

/// The server's bounds: connections, how long a request may take to arrive, bodies, an unread event stream.
public struct KioskLimits: Sendable {
    /// Open connections at most. Past it, a new connection closes the oldest one that has not shown the session
    /// cookie, preferring those open longer than `evictionGrace` (whose request had time to arrive); itself only
    /// when all others have shown it. Idle sockets cannot lock the browser out.
    public var connections = 8
    public var evictionGrace: TimeAmount = .seconds(2)
    public var headerTimeout: TimeAmount = .seconds(10)
    public var bodyTimeout: TimeAmount = .seconds(30)
    /// `POST /api/action` while the page shows the camera (`{images: [...]}`), and otherwise.
    public var imageBodyBytes = 4 << 20
    public var actionBodyBytes = 64 << 10
    /// `POST /api/check` (an MRZ as typed).
    public var checkBodyBytes = 8 << 10
    /// What may wait unsent for one connection (the socket's send buffer, and again as NIO's high watermark): an
    /// event stream whose reader falls that far behind is closed.
    public var eventBufferBytes = 256 << 10

    public init() {}
}

/// What the handler of each connection shares: the bridge, the access rule, the bounds, the open connections and
/// the host names a request may carry.
final class KioskRoutes: Sendable {
    let bridge: KioskBridge
    let access: KioskAccess
    let limits: KioskLimits
    let host: String
    let boundPort: Locked<Int>
    /// Open connections in the order they came, with when and whether each has shown the session cookie.
    private let open = Locked<[(id: ObjectIdentifier, channel: Channel, since: NIODeadline, admitted: Bool)]>([])

    init(bridge: KioskBridge, access: KioskAccess, limits: KioskLimits, host: String, port: Int) {
        self.bridge = bridge
        self.access = access
        self.limits = limits
        self.host = host
        self.boundPort = Locked(port)
    }

    /// A new connection: past the bound, the oldest connection without the cookie goes (one past the grace
    /// first), else this one.
    func opened(_ channel: Channel) {
        let now = NIODeadline.now()
        let evicted: Channel? = open.withLock { open in
            guard open.count >= limits.connections else {
                open.append((ObjectIdentifier(channel), channel, now, false))
                return nil
            }
            let waiting = open.indices.filter { !open[$0].admitted }
            guard let i = waiting.first(where: { open[$0].since + limits.evictionGrace <= now }) ?? waiting.first
            else { return channel }
            open.append((ObjectIdentifier(channel), channel, now, false))
            return open.remove(at: i).channel
        }
        evicted?.close(promise: nil)
    }

    func admitted(_ channel: Channel) {
        open.withLock { open in
            if let i = open.firstIndex(where: { $0.id == ObjectIdentifier(channel) }) { open[i].admitted = true }
        }
    }

    func closed(_ channel: Channel) {
        open.withLock { $0.removeAll { $0.id == ObjectIdentifier(channel) } }
    }

    /// The largest body a request to `path` may carry now.
    func bodyLimit(_ method: HTTPMethod, _ path: String) -> Int {
        switch (method, path) {
        case (.POST, "/api/action"): return bridge.acceptsImages ? limits.imageBodyBytes : limits.actionBodyBytes
        case (.POST, "/api/check"): return limits.checkBodyBytes
        // One camera frame; the bridge refuses it unless the page asks for the MRZ.
        case (.POST, "/api/mrz"): return limits.imageBodyBytes
        default: return 0
        }
    }

    /// A loopback listener answers only requests addressed to a loopback name (no DNS rebinding from a web page),
    /// and a POST only from its own origin (no cross-site requests).
    func allowed(_ head: HTTPRequestHead) -> Bool {
        let port = boundPort.withLock { $0 }
        let hostHeader = head.headers.first(name: "host") ?? ""
        if KioskRoutes.isLoopback(host) {
            let names = ["127.0.0.1:\(port)", "localhost:\(port)", "[::1]:\(port)"]
            guard names.contains(hostHeader.lowercased()) else { return false }
        }
        if head.method == .POST, let origin = head.headers.first(name: "origin") {
            return origin.lowercased() == "http://\(hostHeader.lowercased())"
        }
        return true
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// One HTTP connection. Event-loop confined; replies are written from tasks through the (thread-safe) channel.
final class KioskHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let routes: KioskRoutes
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var bodyLimit = 0
    /// Answered (or being closed): whatever else the peer sends is dropped.
    private var answered = false
    private var stream = false
    private var deadline: Scheduled<Void>?

    init(routes: KioskRoutes) { self.routes = routes }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        channel.closeFuture.whenComplete { [routes] _ in routes.closed(channel) }
        deadline = context.eventLoop.scheduleTask(in: routes.limits.headerTimeout) { channel.close(promise: nil) }
        routes.opened(channel)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // An event stream whose reader stopped reading is closed, not queued.
        if stream, !context.channel.isWritable { context.close(promise: nil) }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            deadline?.cancel()
            deadline = nil
            if let refusal = admit(h, context.channel) {
                answered = true
                return refusal()
            }
            head = h
            body = []
            let channel = context.channel
            deadline = context.eventLoop.scheduleTask(in: routes.limits.bodyTimeout) { channel.close(promise: nil) }
        case .body(let buffer):
            guard body.count + buffer.readableBytes <= bodyLimit else {
                answered = true
                return Self.reply(context.channel, .payloadTooLarge, "text/plain", Array("too large\n".utf8))
            }
            body.append(contentsOf: buffer.readableBytesView)
        case .end:
            deadline?.cancel()
            deadline = nil
            guard let head else { return }
            self.head = nil
            answered = true
            handle(head, body: body, channel: context.channel)
            body = []
        }
    }

    /// Checks a request's head before any body is read: the host and origin, the session (or the exchange of the
    /// URL's secret, answered here), and the announced body size. nil: read the body and handle the request.
    private func admit(_ head: HTTPRequestHead, _ channel: Channel) -> (() -> Void)? {
        guard routes.allowed(head) else {
            return { Self.reply(channel, .forbidden, "text/plain", Array("forbidden\n".utf8)) }
        }
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        let cookie = KioskAccess.cookie(head)
        if head.method == .GET, path == "/" || path == "/index.html", let token = KioskAccess.token(head.uri) {
            let outcome = routes.access.exchange(token, cookie: cookie)
            return { Self.exchanged(channel, outcome) }
        }
        guard routes.access.admits(cookie) else {
            return {
                Self.reply(
                    channel, .forbidden, "text/plain",
                    Array("forbidden: open the URL tessera kiosk printed at start\n".utf8))
            }
        }
        routes.admitted(channel)
        bodyLimit = routes.bodyLimit(head.method, path)
        if let length = head.headers.first(name: "content-length").flatMap(Int.init), length > bodyLimit {
            return { Self.reply(channel, .payloadTooLarge, "text/plain", Array("too large\n".utf8)) }
        }
        return nil
    }

    /// The answer to `/?token=`: the cookie and a redirect to `/`, or 403.
    private static func exchanged(_ channel: Channel, _ outcome: KioskAccess.Exchange) {
        switch outcome {
        case .granted(let cookie):
            var headers = commonHeaders
            headers.add(name: "location", value: "/")
            headers.add(name: "set-cookie", value: KioskAccess.setCookie(cookie))
            headers.add(name: "content-length", value: "0")
            headers.add(name: "connection", value: "close")
            channel.write(
                HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .seeOther, headers: headers)),
                promise: nil)
            channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
        case .held:
            reply(
                channel, .forbidden, "text/plain",
                Array(
                    "forbidden: another browser holds this station's screen (restart tessera kiosk, or run it with --take-over)\n"
                        .utf8))
        case .wrongToken:
            reply(channel, .forbidden, "text/plain", Array("forbidden\n".utf8))
        }
    }

    private func handle(_ head: HTTPRequestHead, body: [UInt8], channel: Channel) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        switch (head.method, path) {
        case (.GET, "/"), (.GET, "/index.html"):
            let language = KioskCatalogues.choose(
                acceptLanguage: head.headers.first(name: "accept-language"), forced: routes.bridge.language)
            Self.reply(channel, .ok, "text/html; charset=utf-8", Array(KioskAssets.html(language: language).utf8))
        case (.GET, "/catalogues.json"):
            Self.reply(channel, .ok, "application/json", KioskCatalogues.json)
        case (.GET, _) where KioskDrawings.svg(path: path) != nil:
            Self.reply(channel, .ok, "image/svg+xml", Array((KioskDrawings.svg(path: path) ?? "").utf8))
        case (.GET, "/kiosk.js"):
            Self.reply(channel, .ok, "text/javascript; charset=utf-8", Array(KioskAssets.script.utf8))
        case (.GET, "/kiosk.css"):
            Self.reply(channel, .ok, "text/css; charset=utf-8", Array(KioskAssets.style.utf8))
        case (.GET, "/events"):
            stream = true
            events(channel)
        case (.POST, "/api/check"):
            let input = (try? JSONValue.parse(body)) ?? .null
            Self.reply(channel, .ok, "application/json", KioskInputCheck.check(input).serialized())
        case (.POST, "/api/action"):
            perform(body, channel)
        case (.POST, "/api/mrz"):
            Self.readMRZ((try? JSONValue.parse(body))?["image"] ?? .null, routes.bridge, channel)
        default:
            Self.reply(channel, .notFound, "text/plain", Array("not found\n".utf8))
        }
    }

    /// `POST /api/action`: one `KioskAction`, answered once the bridge has run it.
    private func perform(_ body: [UInt8], _ channel: Channel) {
        do throws(TesseraError) {
            Self.run(try KioskAction(json: try JSONValue.parse(body)), routes.bridge, channel)
        } catch {
            let answer: JSONValue = ["error": KioskSession.errorJSON(error)]
            Self.reply(channel, .badRequest, "application/json", answer.serialized())
        }
    }

    private static func run(_ action: KioskAction, _ bridge: KioskBridge, _ channel: Channel) {
        Task {
            let answer = await bridge.perform(action)
            reply(channel, .ok, "application/json", answer.serialized())
        }
    }

    /// `POST /api/mrz`: one camera frame to the MRZ reader, answered with what the bridge made of it.
    private static func readMRZ(_ image: JSONValue, _ bridge: KioskBridge, _ channel: Channel) {
        Task {
            let answer = await bridge.readMRZ(image)
            reply(channel, .ok, "application/json", answer.serialized())
        }
    }

    /// Server-sent events: the current view, then each new one, until the page goes.
    private func events(_ channel: Channel) {
        var headers = Self.commonHeaders
        headers.add(name: "content-type", value: "text/event-stream")
        channel.write(
            HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)),
            promise: nil)
        channel.writeAndFlush(
            HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(string: "retry: 1000\n\n"))), promise: nil)
        let bridge = routes.bridge
        let subscription = Locked<Int?>(nil)
        channel.closeFuture.whenComplete { _ in
            Task { if let id = subscription.withLock({ $0 }) { await bridge.unsubscribe(id) } }
        }
        Task {
            let id = await bridge.subscribe { view in
                // A reader that fell behind by the whole buffer is gone: close it rather than queue more.
                guard channel.isWritable else { return channel.close(promise: nil) }
                var frame = Array("data: ".utf8)
                frame += view
                frame += Array("\n\n".utf8)
                channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: frame))), promise: nil)
            }
            subscription.withLock { $0 = id }
            if !channel.isActive { await bridge.unsubscribe(id) }
        }
    }

    /// No caching, no framing by other sites, and nothing loaded from anywhere but the station itself.
    static let commonHeaders: HTTPHeaders = [
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "content-security-policy":
            "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob: mediastream:; frame-ancestors 'none'",
    ]

    static func reply(_ channel: Channel, _ status: HTTPResponseStatus, _ type: String, _ bytes: [UInt8]) {
        var headers = commonHeaders
        headers.add(name: "content-type", value: type)
        headers.add(name: "content-length", value: String(bytes.count))
        headers.add(name: "connection", value: "close")
        channel.write(
            HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)),
            promise: nil)
        channel.write(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: bytes))), promise: nil)
        channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
    }
}
