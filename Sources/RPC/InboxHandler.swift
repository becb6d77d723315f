import NIOCore

/// The channel-handler core of the connections whose frames one task takes in order (`LengthPrefixedServer`'s,
/// a `PacketConnection`), on the connection's event loop (every method here runs there): each frame read goes to
/// that task through `inbox`; while `maxOutstanding` frames handed over are not yet settled (answered, consumed),
/// reading pauses (pausing and resuming cost two system calls: a peer that waits for each answer never reaches
/// it). The end of the connection reaches the inbox once. Subclasses close or log on errors, and drop what they
/// hold in `ending()`.
class InboxHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let inbox = FrameInbox()
    private let maxOutstanding: Int
    /// The `.closed` event's `cancelRequests`.
    private let cancelRequestsOnEnd: Bool
    private(set) var context: ChannelHandlerContext?
    /// Frames handed to the inbox and not yet settled.
    private var outstanding = 0
    private var readHeld = false
    private(set) var ended = false

    init(maxOutstanding: Int, cancelRequestsOnEnd: Bool) {
        self.maxOutstanding = maxOutstanding
        self.cancelRequestsOnEnd = cancelRequestsOnEnd
    }

    final func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    final func handlerRemoved(context: ChannelHandlerContext) {
        end()
        self.context = nil
    }

    final func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !ended else { return }
        outstanding += 1
        inbox.push(.frame(Array(unwrapInboundIn(data).readableBytesView)))
    }

    final func read(context: ChannelHandlerContext) {
        if outstanding >= maxOutstanding { readHeld = true } else { context.read() }
    }

    final func channelInactive(context: ChannelHandlerContext) {
        end()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    /// One frame handed over is answered or consumed: a held read goes on.
    final func settled() {
        outstanding -= 1
        if outstanding < maxOutstanding, readHeld, let context {
            readHeld = false
            context.read()
        }
    }

    /// Drops what the subclass holds when the connection ends (before the end reaches the inbox).
    func ending() {}

    private func end() {
        guard !ended else { return }
        ended = true
        ending()
        inbox.push(.closed(cancelRequests: cancelRequestsOnEnd))
    }
}
