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
        let file = OpenFile(descriptor: fd)
        do throws(OpenFile.Failure) {
            defer { file.close() }
            try file.write(bytes)
            try file.synchronize()
        } catch {
            unlink(temp)
            return .failure(AtomicFileError(reason: error.description))
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
    /// The bytes of the file at `path` (`OpenFile.contents`: one buffer of the file's size); nil when it cannot be
    /// opened or read.
    public static func read(_ path: String) -> [UInt8]? { try? OpenFile.contents(of: path) }
}

/// Why `AtomicFile.write` failed.
public struct AtomicFileError: Error, Sendable {
    public let reason: String
}
