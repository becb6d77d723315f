import NIOCore
import NIOHTTP1
import NIOPosix
import TesseraCore

/// The station's web server (swift-nio HTTP/1.1): the page and its assets from the binary, the views as
/// server-sent events (`GET /events`), the page's actions (`POST /api/action`), the as-typed MRZ check
/// (`POST /api/check`), camera frames for the MRZ reader (`POST /api/mrz`), the message catalogues
/// (`GET /catalogues.json`) and drawings (`GET /drawings/NAME.svg`). Nothing is loaded from the network.
public final class KioskHTTPServer: Sendable {
    private let channel: Channel
    /// The port it listens on (the one asked for, or the one the system chose for 0).
    public let port: Int

    private init(channel: Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Listens on `host:port` (0: any free port) and serves `bridge`.
    public static func start(
        host: String, port: Int, bridge: KioskBridge, group: MultiThreadedEventLoopGroup = .singleton
    ) async throws(TesseraError) -> KioskHTTPServer {
        let routes = KioskRoutes(bridge: bridge, host: host, port: port)
        do {
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 64)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
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

/// What the handler of each connection shares: the bridge and the host names a request may carry.
final class KioskRoutes: Sendable {
    let bridge: KioskBridge
    let host: String
    let boundPort: Locked<Int>
    static let maxBody = 8 << 20

    init(bridge: KioskBridge, host: String, port: Int) {
        self.bridge = bridge
        self.host = host
        self.boundPort = Locked(port)
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
    private var tooLarge = false

    init(routes: KioskRoutes) { self.routes = routes }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
            tooLarge = false
        case .body(let buffer):
            if body.count + buffer.readableBytes > KioskRoutes.maxBody {
                tooLarge = true
            } else if !tooLarge {
                body.append(contentsOf: buffer.readableBytesView)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            handle(head, body: body, channel: context.channel)
            body = []
        }
    }

    private func handle(_ head: HTTPRequestHead, body: [UInt8], channel: Channel) {
        guard routes.allowed(head) else {
            return Self.reply(channel, .forbidden, "text/plain", Array("forbidden\n".utf8))
        }
        if tooLarge { return Self.reply(channel, .payloadTooLarge, "text/plain", Array("too large\n".utf8)) }
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
