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
        guard let frame = try nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(frame))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        while let frame = try nextFrame(&buffer) { context.fireChannelRead(Self.wrapInboundOut(frame)) }
        if seenEOF, let frame = lastFrame(&buffer) { context.fireChannelRead(Self.wrapInboundOut(frame)) }
        return .needMoreData
    }

    /// The next complete frame (without its LF or CRLF) taken from `buffer`, or nil when more bytes are needed.
    /// The channel-free core of `decode`, which the fuzz harness drives directly.
    mutating func nextFrame(_ buffer: inout ByteBuffer) throws -> ByteBuffer? {
        let view = buffer.readableBytesView
        if let nl = view.dropFirst(scanned).firstIndex(of: UInt8(ascii: "\n")) {
            let length = nl - view.startIndex
            guard length <= maxFrameBytes else { throw FrameTooLargeError(limit: maxFrameBytes) }
            var frame = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            scanned = 0
            // Tolerate CRLF line ends.
            if frame.readableBytesView.last == UInt8(ascii: "\r") {
                frame = frame.getSlice(at: frame.readerIndex, length: frame.readableBytes - 1)!
            }
            return frame
        }
        scanned = view.count
        if view.count > maxFrameBytes { throw FrameTooLargeError(limit: maxFrameBytes) }
        return nil
    }

    /// At end of input: what is left, a final frame without its newline.
    mutating func lastFrame(_ buffer: inout ByteBuffer) -> ByteBuffer? {
        guard buffer.readableBytes > 0 else { return nil }
        scanned = 0
        return buffer.readSlice(length: buffer.readableBytes)!
    }
}

struct FrameTooLargeError: Error { let limit: Int }
