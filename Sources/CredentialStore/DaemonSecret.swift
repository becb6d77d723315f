import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon's own secret: 32 random bytes in a file of its own (mode 0600, owned by the daemon's user) in the
/// state directory, created on first start. Keys for what the database alone must not reveal (the one-time codes'
/// MAC keys) are derived from it, so a copy of the database without this file gives nothing away.
public enum DaemonSecret {
    public static let fileName = "daemon.secret"
    public static let byteCount = 32

    /// Reads `directory/daemon.secret`, creating it when it does not exist. The file appears under its name only
    /// complete (written to a private temporary file by `AtomicFile`, then hard-linked, which never replaces an
    /// existing file).
    /// STORAGE_ERROR naming the file when it cannot be created, or exists but is not a regular file of
    /// `byteCount` bytes owned by this user and unreadable to others.
    public static func loadOrCreate(directory: String) throws(TesseraError) -> [UInt8] {
        let path = directory + "/" + fileName
        let fm = FileManager.default
        if (try? fm.attributesOfItem(atPath: path)) == nil {
            try create(directory)
        }
        return try load(path)
    }

    static func load(_ path: String) throws(TesseraError) -> [UInt8] {
        let fm = FileManager.default
        guard let attributes = try? fm.attributesOfItem(atPath: path) else {
            throw TesseraError(.storageError, "cannot read the daemon secret \(path)")
        }
        guard attributes[.type] as? FileAttributeType == .typeRegular else {
            throw TesseraError(.storageError, "the daemon secret \(path) is not a regular file")
        }
        let mode = (attributes[.posixPermissions] as? UInt).map { Int($0) } ?? 0o777
        guard mode & 0o077 == 0 else {
            throw TesseraError(
                .storageError,
                "the daemon secret \(path) is accessible to others (mode \(String(mode, radix: 8))); it must be 0600")
        }
        let owner = attributes[.ownerAccountID] as? UInt
        guard owner == UInt(geteuid()) else {
            throw TesseraError(.storageError, "the daemon secret \(path) is not owned by the daemon's user")
        }
        guard let data = fm.contents(atPath: path), data.count == byteCount else {
            throw TesseraError(.storageError, "the daemon secret \(path) must hold exactly \(byteCount) bytes")
        }
        return [UInt8](data)
    }

    static func create(_ directory: String) throws(TesseraError) {
        let path = directory + "/" + fileName
        let temp = fileName + ".tmp-" + Hex.encode(SecureRandom.bytes(8))
        defer { unlink(directory + "/" + temp) }
        if case .failure(let failure) = AtomicFile.write(
            SecureRandom.bytes(byteCount), directory: directory, name: temp, mode: 0o600)
        {
            throw TesseraError(.storageError, "cannot create the daemon secret \(path): \(failure.reason)")
        }
        // EEXIST: another process created it first, and that one is used.
        guard link(directory + "/" + temp, path) == 0 || errno == EEXIST else {
            throw TesseraError(
                .storageError, "cannot create the daemon secret \(path): \(String(cString: strerror(errno)))")
        }
    }
}
