import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A file descriptor read or written whole, in place of Foundation's `FileHandle`: this process's standard
/// streams, a file opened to append to or to read, a descriptor opened elsewhere. Writes retry short writes and
/// EINTR; reads go to the end of the file (so `/proc` files, whose size shows 0, read whole). Blocking: use it on a
/// thread of your own, or for the CLI's terminal output.
public struct OpenFile: Sendable {
    /// The descriptor; closed only by `close()`.
    public let descriptor: Int32

    /// Why a read, write or open failed: the errno and its text.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public let errno: Int32
        public init(errno: Int32) { self.errno = errno }
        public var description: String { String(cString: strerror(errno)) }
    }

    public init(descriptor: Int32) { self.descriptor = descriptor }

    public static let standardInput = OpenFile(descriptor: STDIN_FILENO)
    public static let standardOutput = OpenFile(descriptor: STDOUT_FILENO)
    public static let standardError = OpenFile(descriptor: STDERR_FILENO)

    /// Opens `path` for writing (close-on-exec), created with `mode` when missing; `truncate` empties it, else
    /// writes go to its end.
    public static func forWriting(_ path: String, truncate: Bool = false, mode: mode_t = 0o644) throws(Failure)
        -> OpenFile
    {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), mode)
        guard fd >= 0 else { throw Failure(errno: errno) }
        return OpenFile(descriptor: fd)
    }

    /// Opens `path` for reading (close-on-exec).
    public static func forReading(_ path: String) throws(Failure) -> OpenFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(errno: errno) }
        return OpenFile(descriptor: fd)
    }

    /// The whole content of `path`, read to its end.
    public static func contents(of path: String) throws(Failure) -> [UInt8] {
        let file = try forReading(path)
        defer { file.close() }
        return try file.readToEnd()
    }

    /// Writes every byte of `bytes`.
    public func write(_ bytes: some Collection<UInt8>) throws(Failure) {
        let result =
            bytes.withContiguousStorageIfAvailable { writeAll($0) }
            ?? Array(bytes).withUnsafeBufferPointer { writeAll($0) }
        if result != 0 { throw Failure(errno: result) }
    }

    /// Writes `text` as UTF-8, ignoring failures (diagnostics and terminal output: nothing better to do with them).
    public func write(_ text: String) {
        _ = Array(text.utf8).withUnsafeBufferPointer { writeAll($0) }
    }

    /// Reads until the end of the file, into one buffer of the file's size when it has one (no regrowth while a large
    /// file is read; `/proc` files say 0 and grow as read).
    public func readToEnd() throws(Failure) -> [UInt8] {
        var result: [UInt8] = []
        var info = stat()
        if fstat(descriptor, &info) == 0, info.st_size > 0 { result.reserveCapacity(Int(info.st_size)) }
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if n == 0 { return result }
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure(errno: errno)
            }
            result += chunk[..<n]
        }
    }

    /// Flushes what was written to the disk (`fsync`).
    public func synchronize() throws(Failure) {
        guard fsync(descriptor) == 0 else { throw Failure(errno: errno) }
    }

    /// Whether the descriptor is a terminal.
    public var isTerminal: Bool { isatty(descriptor) == 1 }

    public func close() { _ = Glibc.close(descriptor) }

    /// 0 when every byte went out, else the errno.
    private func writeAll(_ buffer: UnsafeBufferPointer<UInt8>) -> Int32 {
        var offset = 0
        while offset < buffer.count {
            let n = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            offset += n
        }
        return 0
    }
}
