import NIOCore
import TesseraCore

/// Requests of some methods (they carry images: `face.compare`, `enrollment.submit`) may be longer than the
/// connection's frame limit, up to `maxBytes`: a frame past the limit whose first `methodWindow` bytes name one of
/// `methods` (`"method":"NAME"`, as clients write it before `params`) may grow to `maxBytes`.
public struct LargeFrames: Sendable {
    public var methods: Set<String>
    public var maxBytes: Int
    static let methodWindow = 4096

    public init(methods: Set<String>, maxBytes: Int = 16 << 20) {
        self.methods = methods; self.maxBytes = maxBytes
    }

    /// The method a frame's start names, if it is one of `methods`.
    func method(in start: ByteBufferView) -> String? {
        let head = Array(start.prefix(Self.methodWindow))
        let key = Array(#""method""#.utf8)
        guard var i = head.firstRange(of: key)?.upperBound else { return nil }
        func skipSpaces() { while i < head.count, head[i] == 0x20 || head[i] == 0x09 { i += 1 } }
        skipSpaces()
        guard i < head.count, head[i] == UInt8(ascii: ":") else { return nil }
        i += 1
        skipSpaces()
        guard i < head.count, head[i] == UInt8(ascii: "\"") else { return nil }
        guard let end = head[(i + 1)...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        let name = String(decoding: head[(i + 1)..<end], as: UTF8.self)
        return methods.contains(name) ? name : nil
    }
}

/// Splits the byte stream into `\n`-terminated frames (NDJSON). A frame longer than `maxFrameBytes` (or
/// `large.maxBytes` for a large frame's method) raises `FrameTooLargeError`; the connection owner answers
/// FRAME_TOO_LARGE and closes.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    let maxFrameBytes: Int
    let large: LargeFrames?
    private var scanned = 0

    init(maxFrameBytes: Int, large: LargeFrames? = nil) {
        self.maxFrameBytes = maxFrameBytes
        self.large = large
    }

    /// The limit of the frame at the start of `view`, once it is past `maxFrameBytes`.
    private func limit(_ view: ByteBufferView, length: Int) throws -> Int {
        guard length > maxFrameBytes else { return maxFrameBytes }
        guard let large, let method = large.method(in: view) else {
            throw FrameTooLargeError(limit: maxFrameBytes, large: large)
        }
        guard length <= large.maxBytes else {
            throw FrameTooLargeError(limit: large.maxBytes, method: method)
        }
        return large.maxBytes
    }

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
        // One memchr over the bytes not scanned yet (a search through the view's slice goes byte by byte).
        let newline = buffer.withUnsafeReadableBytes {
            ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: $0, from: scanned)
        }
        if let length = newline {
            _ = try limit(view, length: length)
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
        _ = try limit(view, length: view.count)
        return nil
    }

    /// At end of input: what is left, a final frame without its newline.
    mutating func lastFrame(_ buffer: inout ByteBuffer) -> ByteBuffer? {
        guard buffer.readableBytes > 0 else { return nil }
        scanned = 0
        return buffer.readSlice(length: buffer.readableBytes)!
    }
}

struct FrameTooLargeError: Error {
    let limit: Int
    var method: String?
    var large: LargeFrames?

    init(limit: Int, method: String? = nil, large: LargeFrames? = nil) {
        self.limit = limit; self.method = method; self.large = large
    }

    /// The FRAME_TOO_LARGE answer's message: the limit that applied, and the larger one of the methods that have it.
    var message: String {
        if let method { return "a \(method) request may be at most \(limit) bytes; connection closed" }
        var text = "frame exceeds \(limit) bytes; connection closed"
        if let large {
            text += " (\(large.methods.sorted().joined(separator: ", ")) requests may be up to \(large.maxBytes) bytes)"
        }
        return text
    }
}
