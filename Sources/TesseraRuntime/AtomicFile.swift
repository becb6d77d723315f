import Foundation
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The one way to replace a file so that a reader sees the old bytes or the new ones, never a part, and a crash
/// leaves one of the two: a temp file of an unpredictable name, created with O_CREAT|O_EXCL|O_NOFOLLOW and its final
/// `mode` in the same directory, written, fsynced, renamed over the final name, then the directory fsynced.
public enum AtomicFile {
    /// Writes `bytes` to `directory/name`; the reason (errno text) on failure.
    public static func write(_ bytes: [UInt8], directory: String, name: String, mode: mode_t = 0o600)
        -> Result<Void, AtomicFileError>
    {
        let final = directory + "/" + name
        let suffix = SecureRandom.bytes(12).map { String($0, radix: 16) }.joined()
        let temp = directory + "/." + name + "." + suffix + ".tmp"
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { return .failure(AtomicFileError(reason: String(cString: strerror(errno)))) }
        // The umask does not narrow the mode the caller asked for.
        _ = fchmod(fd, mode)
        // Written from the caller's buffer (no copy of a large file), then fsynced.
        var written = 0
        let failure: String? = bytes.withUnsafeBytes { buffer in
            while written < buffer.count {
                let n = Glibc.write(fd, buffer.baseAddress! + written, buffer.count - written)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return String(cString: strerror(errno)) }
                written += n
            }
            return fsync(fd) == 0 ? nil : String(cString: strerror(errno))
        }
        if close(fd) != 0 || failure != nil {
            let why = failure ?? String(cString: strerror(errno))
            unlink(temp)
            return .failure(AtomicFileError(reason: why))
        }
        guard rename(temp, final) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temp)
            return .failure(AtomicFileError(reason: why))
        }
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 {
            _ = fsync(dir)
            close(dir)
        }
        return .success(())
    }
}

extension AtomicFile {
    /// The bytes of the file at `path`, read into one buffer of the file's size (no second copy of a large file);
    /// nil when it cannot be opened or read.
    public static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var total = 0
        let complete = bytes.withUnsafeMutableBytes { buffer in
            while total < buffer.count {
                let n = Glibc.read(fd, buffer.baseAddress! + total, buffer.count - total)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return n == 0 }
                total += n
            }
            return true
        }
        guard complete else { return nil }
        // A file that shrank while it was read: what was there.
        if total < bytes.count { bytes.removeLast(bytes.count - total) }
        return bytes
    }
}

/// Why `AtomicFile.write` failed.
public struct AtomicFileError: Error, Sendable {
    public let reason: String
}
