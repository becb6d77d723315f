import Foundation
import TesseraCore

/// The daemon's own secret: 32 random bytes in a file of its own (mode 0600, owned by the daemon's user) in the
/// state directory, created on first start. Keys for what the database alone must not reveal (the one-time codes'
/// MAC keys) are derived from it, so a copy of the database without this file gives nothing away.
public enum DaemonSecret {
    public static let fileName = "daemon.secret"
    public static let byteCount = 32

    /// Reads `directory/daemon.secret`, creating it when it does not exist. The file appears under its name only
    /// complete (written to a private temporary file, then hard-linked, which never replaces an existing file).
    /// STORAGE_ERROR naming the file when it cannot be created, or exists but is not a regular file of
    /// `byteCount` bytes owned by this user and unreadable to others.
    public static func loadOrCreate(directory: String) throws(TesseraError) -> [UInt8] {
        let path = directory + "/" + fileName
        let fm = FileManager.default
        if (try? fm.attributesOfItem(atPath: path)) == nil {
            try create(path)
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
        let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0o777
        guard mode & 0o077 == 0 else {
            throw TesseraError(
                .storageError,
                "the daemon secret \(path) is accessible to others (mode \(String(mode, radix: 8))); it must be 0600")
        }
        let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value
        guard owner == geteuid() else {
            throw TesseraError(.storageError, "the daemon secret \(path) is not owned by the daemon's user")
        }
        guard let data = fm.contents(atPath: path), data.count == byteCount else {
            throw TesseraError(.storageError, "the daemon secret \(path) must hold exactly \(byteCount) bytes")
        }
        return [UInt8](data)
    }

    static func create(_ path: String) throws(TesseraError) {
        let fm = FileManager.default
        let temp = path + ".tmp-" + Hex.encode(SecureRandom.bytes(8))
        defer { try? fm.removeItem(atPath: temp) }
        do {
            // Empty and 0600 before the secret is written into it.
            guard fm.createFile(atPath: temp, contents: Data(), attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteUnknown)
            }
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: temp))
            defer { try? handle.close() }
            try handle.write(contentsOf: Data(SecureRandom.bytes(byteCount)))
            try handle.synchronize()
        } catch {
            throw TesseraError(.storageError, "cannot create the daemon secret \(path): \(error.localizedDescription)")
        }
        do {
            try fm.linkItem(atPath: temp, toPath: path)
        } catch {
            // Another process created it first: that one is used.
            if (try? fm.attributesOfItem(atPath: path)) == nil {
                throw TesseraError(
                    .storageError, "cannot create the daemon secret \(path): \(error.localizedDescription)")
            }
        }
    }
}
