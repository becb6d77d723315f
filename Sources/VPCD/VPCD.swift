import APDU
import FoundationEssentials
import NIOCore
import NIOPosix
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Something that happened on a `VirtualCardLink`, for tracing.
public enum VPCDLinkEvent: Sendable, Hashable {
    case connected
    case disconnected
    case powerOn
    case powerOff
    case reset
    case atrRequested
}

/// Connects a `VirtualCard` to a vpcd reader: pcscd's vpcd driver listens on TCP (default 127.0.0.1:35963) and the
/// card side connects to it. Connected = card inserted, disconnected = card removed.
///
/// Wire format (vsmartcard vpcd): each frame is a 2-byte big-endian length and a payload. One-byte payloads are
/// control codes (0 power off, 1 power on, 2 reset, 4 get ATR — answered with the ATR); any other payload is a
/// command APDU answered with the response APDU.
public actor VirtualCardLink {
    /// Called for every APDU exchange once the response was written to vpcd: command, response, time the command
    /// arrived.
    public typealias ExchangeHook = @Sendable (_ command: [UInt8], _ response: [UInt8], _ timestamp: Date) -> Void
    public typealias EventHook = @Sendable (VPCDLinkEvent) -> Void

    public nonisolated let card: any VirtualCard
    public nonisolated let host: String
    public nonisolated let port: Int
    /// Whether a dropped link (e.g. pcscd restarted) is re-established automatically until `remove()`.
    public nonisolated let reconnects: Bool
    private let reconnectInterval: Duration
    private let onExchange: ExchangeHook?
    private let onEvent: EventHook?

    private var runner: Task<Void, Never>?
    private var runnerID = 0
    private var channel: (any Channel)?
    private var connectedWaiters: [CheckedContinuation<Void, Never>] = []

    /// Whether the card is currently inserted (the TCP link is up).
    public private(set) var isConnected = false

    public init(
        card: any VirtualCard, host: String = "127.0.0.1", port: Int = 35963, reconnects: Bool = false,
        reconnectInterval: Duration = .milliseconds(200), onExchange: ExchangeHook? = nil,
        onEvent: EventHook? = nil
    ) {
        self.card = card
        self.host = host
        self.port = port
        self.reconnects = reconnects
        self.reconnectInterval = reconnectInterval
        self.onExchange = onExchange
        self.onEvent = onEvent
    }

    /// Inserts the card (same as `insert`); the link then stays up until `remove()`.
    public func start(timeout: Duration = .seconds(5)) async throws(TesseraError) {
        try await insert(timeout: timeout)
    }

    /// Connects to the vpcd reader (= inserts the card), retrying until `timeout`.
    /// Throws NO_READER when no vpcd reader listens at host:port in time. No-op when already inserted.
    public func insert(timeout: Duration = .seconds(5)) async throws(TesseraError) {
        if runner != nil { return }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var lastError = "timeout"
        while true {
            do {
                let connection = try await Self.connect(host: host, port: port)
                guard runner == nil else {  // a concurrent insert() won
                    try? await connection.channel.close()
                    return
                }
                attach(connection)
                return
            } catch {
                lastError = "\(error)"
            }
            if ContinuousClock.now >= deadline || Task.isCancelled {
                throw TesseraError(.noReader, "no vpcd reader at \(host):\(port): \(lastError)")
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Disconnects (= removes the card) and stops reconnecting. No-op when not inserted.
    public func remove() async {
        guard let runner else { return }
        self.runner = nil
        runner.cancel()
        try? await channel?.close()
        await runner.value
        channel = nil
        setConnected(false)
    }

    /// Waits until the link is up (e.g. after pcscd restarted and `reconnects` re-attached); false on timeout.
    public func waitUntilConnected(timeout: Duration) async -> Bool {
        if isConnected { return true }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while ContinuousClock.now < deadline {
            if isConnected { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return isConnected
    }

    typealias Connection = NIOAsyncChannel<[UInt8], [UInt8]>

    private func attach(_ connection: Connection) {
        channel = connection.channel
        setConnected(true)
        runnerID += 1
        let id = runnerID
        runner = Task { await self.run(first: connection, id: id) }
    }

    private func setConnected(_ value: Bool) {
        guard value != isConnected else { return }
        isConnected = value
        onEvent?(value ? .connected : .disconnected)
    }

    private func run(first: Connection, id: Int) async {
        defer {
            // The link ended by itself (peer closed, no reconnect): a later insert() starts afresh.
            if runnerID == id && !Task.isCancelled {
                runner = nil
                channel = nil
            }
        }
        var connection: Connection? = first
        while let current = connection {
            await Self.serve(current, card: card, onExchange: onExchange, onEvent: onEvent)
            connection = nil
            setConnected(false)
            guard reconnects else { break }
            while !Task.isCancelled {
                try? await Task.sleep(for: reconnectInterval)
                if Task.isCancelled { break }
                if let next = try? await Self.connect(host: host, port: port) {
                    if Task.isCancelled {
                        try? await next.channel.close()
                        break
                    }
                    channel = next.channel
                    setConnected(true)
                    connection = next
                    break
                }
            }
        }
    }

    private static func connect(host: String, port: Int) async throws -> Connection {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(2))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(QuickAckHandler())
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(VPCDFrameDecoder()))
                    try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(VPCDFrameEncoder()))
                    return try Connection(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// Answers frames until the peer closes the link or the task is cancelled.
    private static func serve(
        _ connection: Connection, card: any VirtualCard, onExchange: ExchangeHook?,
        onEvent: EventHook?
    ) async {
        try? await connection.executeThenClose { inbound, outbound in
            for try await frame in inbound {
                if Task.isCancelled { break }
                if frame.count == 1 {
                    switch frame[0] {
                    case 0:
                        onEvent?(.powerOff)
                        await card.powerOff()
                    case 1:
                        onEvent?(.powerOn)
                        await card.powerOn()
                    case 2:
                        onEvent?(.reset)
                        await card.reset()
                    case 4:
                        onEvent?(.atrRequested)
                        try await outbound.write(await card.atr)
                    default:
                        break  // unknown control code: vpcd expects no answer
                    }
                } else if !frame.isEmpty {
                    let timestamp = Date()
                    let response = await card.process(frame)
                    try await outbound.write(response)
                    onExchange?(frame, response, timestamp)
                }
            }
        }
    }
}

/// pcscd's vpcd driver writes a frame's length and payload separately; with Nagle on its side the payload waits
/// for our ACK, which Linux delays by up to 40 ms. Re-arming TCP_QUICKACK on every read acknowledges at once.
final class QuickAckHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    /// Linux TCP_QUICKACK (not exported by NIO).
    private static let tcpQuickAck = ChannelOptions.Types.SocketOption(level: .tcp, name: .init(rawValue: 12))

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        try? context.channel.syncOptions?.setOption(Self.tcpQuickAck, value: 1)
        context.fireChannelRead(data)
    }
}

/// vpcd framing: 2-byte big-endian length, then the payload.
struct VPCDFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = [UInt8]

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let payload = Self.nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(payload))
        return .continue
    }

    /// The next frame's payload taken from `buffer`, or nil when more bytes are needed (the channel-free core
    /// of `decode`, which the fuzz harness drives directly).
    static func nextFrame(_ buffer: inout ByteBuffer) -> [UInt8]? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self),
            buffer.readableBytes >= 2 + Int(length)
        else { return nil }
        buffer.moveReaderIndex(forwardBy: 2)
        return buffer.readBytes(length: Int(length)) ?? []
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        try decode(context: context, buffer: &buffer)
    }
}

struct VPCDFrameEncoder: MessageToByteEncoder {
    typealias OutboundIn = [UInt8]

    func encode(data: [UInt8], out: inout ByteBuffer) throws {
        guard data.count <= Int(UInt16.max) else { throw TesseraError(.frameTooLarge, "vpcd frame over 65535 bytes") }
        out.writeInteger(UInt16(data.count))
        out.writeBytes(data)
    }
}
