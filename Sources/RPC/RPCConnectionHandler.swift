import NIOCore
import TesseraCore

/// One JSON-RPC connection's channel handler, on its event loop (every method here runs there). Request frames go
/// to the connection's task through `inbox` (it runs each as a child task); a request counts as in flight until its
/// answer has been handed to the kernel, so a peer that does not read holds at most `maxRequestsInFlight` answers.
/// Past that, a frame is answered BUSY here and nothing more is read until that answer is written: such a peer
/// stalls only itself.
///
/// The input ends on the peer's half-close, on the server's shutdown (which closes the input) and on an oversized
/// frame (answered FRAME_TOO_LARGE): the requests in flight are answered, then the connection closes. When the peer
/// closes the connection, its answers cannot be delivered: the requests in flight are cancelled (unless the server
/// is shutting down) and the close hooks run at once. Once a write fails, the frames still waiting are dropped
/// unanswered.
///
/// A write may complete while it is being made (at once when the kernel takes it, or when it fails on a closing
/// channel): frames waiting behind a BUSY answer are so taken by one loop (`takeWaiting`), never by a completion
/// calling back into it, however many there are.
final class RPCConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let server: RPCServer
    let inbox: FrameInbox
    /// Set right after the connection is made (it refers to this handler), until the channel closes.
    var connection: RPCConnection?
    private var context: ChannelHandlerContext?
    /// Requests handed to the inbox whose answer is not yet written, and BUSY answers not yet written.
    private var inFlight = 0
    /// Frames read while a BUSY answer is being written, handled once it is.
    private var waiting = CircularBuffer<ByteBuffer>()
    private var refusing = false
    private var readHeld = false
    private var inputEnded = false
    private var inactive = false
    /// `takeWaiting`'s loop is running (a completion inside it leaves the next frame to it).
    private var takingWaiting = false
    private var outputFailed = false

    init(server: RPCServer, inbox: FrameInbox) {
        self.server = server
        self.inbox = inbox
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        closed()
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if outputFailed { return }
        if refusing || !waiting.isEmpty {
            waiting.append(frame)
        } else {
            take(frame)
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        if server.isShuttingDown { context.close(mode: .input, promise: nil) }
    }

    func read(context: ChannelHandlerContext) {
        if refusing || !waiting.isEmpty { readHeld = true } else { context.read() }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            inputEnded = true
            closeIfDone()
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !inputEnded else { return }
        if let tooLarge = error as? FrameTooLargeError {
            inputEnded = true
            let answer = RPCWire.response(
                id: nil,
                error: TesseraError(
                    .frameTooLarge, tooLarge.message, details: ["limit": .number(Double(tooLarge.limit))]))
            inFlight += 1
            write(RPCConnection.frame(answer))
        } else {
            server.logDebug("connection \(connection?.id ?? 0) failed: \(error)")
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed()
        context.fireChannelInactive()
    }

    /// The answer of a request from the inbox (nil for a notification), on the event loop.
    func answered(_ frame: ByteBuffer?) {
        if let frame { write(frame) } else { written() }
    }

    private func closed() {
        guard !inactive else { return }
        inactive = true
        inputEnded = true
        waiting.removeAll()
        if let connection { server.connectionWentAway(connection) }
        connection = nil  // it holds this handler
        inbox.push(.closed(cancelRequests: !server.isShuttingDown))
    }

    private func take(_ frame: ByteBuffer) {
        guard !inactive else { return }
        let bytes = Array(frame.readableBytesView)
        guard inFlight < server.maxRequestsInFlight else {
            server.countBusy()
            if let answer = RPCServer.busyAnswer(to: bytes, limit: server.maxRequestsInFlight) {
                refusing = true
                inFlight += 1
                write(RPCConnection.frame(answer), endsRefusal: true)
            }
            return
        }
        inFlight += 1
        inbox.push(.frame(bytes))
    }

    /// Writes an answer counted in `inFlight`, after the notifications queued before it. A BUSY answer
    /// (`endsRefusal`) holds the reading until it is written.
    private func write(_ frame: ByteBuffer, endsRefusal: Bool = false) {
        guard let context, !inactive else {
            written(endsRefusal: endsRefusal)
            return
        }
        connection?.handOverNotifications()
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { result in
            if case .failure = result { handler.value.outputBroke() }
            handler.value.written(endsRefusal: endsRefusal)
        }
    }

    private func written(endsRefusal: Bool = false) {
        inFlight -= 1
        if endsRefusal {
            refusing = false
            takeWaiting()
        }
        closeIfDone()
    }

    /// The peer can no longer be answered: what waits is dropped unanswered, and nothing more is taken.
    private func outputBroke() {
        outputFailed = true
        inputEnded = true
        waiting.removeAll()
    }

    /// Handles the frames read while refusing, until one is refused again or none is left.
    private func takeWaiting() {
        guard !takingWaiting else { return }
        takingWaiting = true
        defer { takingWaiting = false }
        while !refusing, let frame = waiting.popFirst() { take(frame) }
        if !refusing, readHeld, let context {
            readHeld = false
            context.read()
        }
    }

    /// Closes the connection once its input has ended, every frame read is handled and every answer is written.
    private func closeIfDone() {
        guard inputEnded, inFlight == 0, !refusing, waiting.isEmpty, !inactive else { return }
        context?.close(promise: nil)
    }
}
