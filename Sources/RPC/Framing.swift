import NIOCore
import TesseraCore

/// Splits the byte stream into `\n`-terminated frames (NDJSON). A frame longer than `maxFrameBytes`
/// raises `FrameTooLargeError`; the connection owner answers FRAME_TOO_LARGE and closes.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    let maxFrameBytes: Int
    private var scanned = 0

    init(maxFrameBytes: Int) { self.maxFrameBytes = maxFrameBytes }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let view = buffer.readableBytesView
        if let nl = view.dropFirst(scanned).firstIndex(of: UInt8(ascii: "\n")) {
            let length = nl - view.startIndex
            guard length <= maxFrameBytes else { throw FrameTooLargeError(limit: maxFrameBytes) }
            var frame = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            scanned = 0
            // Tolerate CRLF line ends.
            if frame.readableBytesView.last == UInt8(ascii: "\r") { frame = frame.getSlice(at: frame.readerIndex, length: frame.readableBytes - 1)! }
            context.fireChannelRead(Self.wrapInboundOut(frame))
            return .continue
        }
        scanned = view.count
        if view.count > maxFrameBytes { throw FrameTooLargeError(limit: maxFrameBytes) }
        return .needMoreData
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A final frame without its newline is still a frame.
        while try decode(context: context, buffer: &buffer) == .continue {}
        if buffer.readableBytes > 0, seenEOF {
            let frame = buffer.readSlice(length: buffer.readableBytes)!
            scanned = 0
            context.fireChannelRead(Self.wrapInboundOut(frame))
        }
        return .needMoreData
    }
}

struct FrameTooLargeError: Error { let limit: Int }
