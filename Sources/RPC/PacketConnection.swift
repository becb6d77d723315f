import NIOCore
import NIOPosix
import TesseraCore

/// One connected SOCK_SEQPACKET socket (e.g. the CTAP socket's, accepted elsewhere) served on a NIO event loop
/// instead of a thread: each packet read is one message, and each message sent is one packet. Packets are written
/// one at a time (NIO may gather writes queued together into one `writev`, which on this socket would be one
/// packet); a peer that leaves more than
/// `maxQueuedPackets` unread is disconnected, and reading pauses while `maxUnconsumed` packets wait for `next()`.
public final class PacketConnection: Sendable {
    private let channel: any Channel
    private let handler: NIOLoopBound<PacketConnectionHandler>
    private let inbox: FrameInbox

    private init(channel: any Channel, handler: PacketConnectionHandler) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.inbox = handler.inbox
    }

    /// Serves the connected socket `descriptor`, which the connection owns from then on (it is closed with it).
    /// Packets longer than `maxPacketBytes` arrive cut to `maxPacketBytes + 1` bytes.
    public static func adopt(
        _ descriptor: Int32, maxPacketBytes: Int, maxQueuedPackets: Int = 4096, maxUnconsumed: Int = 64,
        group: MultiThreadedEventLoopGroup = .singleton
    ) async throws(TesseraError) -> PacketConnection {
        do {
            return try await ClientBootstrap(group: group)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: maxPacketBytes + 1))
                .withConnectedSocket(NIOBSDSocket.Handle(descriptor)) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let handler = PacketConnectionHandler(maxQueued: maxQueuedPackets, maxUnconsumed: maxUnconsumed)
                        try channel.pipeline.syncOperations.addHandler(handler)
                        return PacketConnection(channel: channel, handler: handler)
                    }
                }
        } catch {
            throw TesseraError(.internalError, "cannot serve a packet socket: \(error)")
        }
    }

    /// The next packet read, in order; nil once the connection has closed.
    public func next() async -> [UInt8]? {
        guard case .frame(let packet) = await inbox.next() else { return nil }
        let handler = self.handler
        channel.eventLoop.execute { handler.value.settled() }
        return packet
    }

    /// Queues `packets` to be written in order, each as one packet; returns at once.
    public func send(_ packets: [[UInt8]]) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.send(packets) }
    }

    /// Closes the connection (`next()` then returns nil).
    public func close() { channel.close(promise: nil) }
}

/// The channel handler of a `PacketConnection`, on its event loop (every method here runs there): packets go to
/// the connection's task through `inbox`, at most `maxUnconsumed` not yet taken by `next()` before reading pauses
/// (`InboxHandler`).
final class PacketConnectionHandler: InboxHandler {
    private let maxQueued: Int
    private var queue = CircularBuffer<[UInt8]>()
    /// A packet is being written (its completion writes the next).
    private var writing = false
    /// `writeQueued`'s loop is running (a completion inside it leaves the next packet to it).
    private var writingQueued = false

    init(maxQueued: Int, maxUnconsumed: Int) {
        self.maxQueued = maxQueued
        super.init(maxOutstanding: maxUnconsumed, cancelRequestsOnEnd: true)
    }

    func send(_ packets: [[UInt8]]) {
        guard !ended, let context else { return }
        guard queue.count + packets.count <= maxQueued else {
            queue.removeAll()
            context.close(promise: nil)
            return
        }
        queue.append(contentsOf: packets)
        writeQueued()
    }

    override func ending() { queue.removeAll() }

    private func writeQueued() {
        guard !writingQueued else { return }
        writingQueued = true
        defer { writingQueued = false }
        while !writing, !ended, let context, let packet = queue.popFirst() {
            writing = true
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: packet))).whenComplete { result in
                handler.value.written(failed: { if case .failure = result { true } else { false } }())
            }
        }
    }

    private func written(failed: Bool) {
        writing = false
        if failed {
            queue.removeAll()
            context?.close(promise: nil)
        } else {
            writeQueued()
        }
    }
}
