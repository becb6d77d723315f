import Foundation
import GRDB
import TesseraCore

/// Whose an SSH key on a token is: the uid that made it with `ssh.keygen`. A key with no row (made elsewhere, a PIV
/// card's certificate key, or made before owners were recorded) is the daemon's uid's.
public struct SSHKeyOwnerRecord: Codable, Sendable, Equatable, PersistableRecord, FetchableRecord, TimestampColumns {
    public static let databaseTableName = "ssh_key_owner"

    public var tokenId: String
    /// The key's handle on the token (`CKA_ID`).
    public var keyHandle: Data
    public var ownerUid: UInt32
    public var createdAt: Date

    public init(tokenId: String, keyHandle: [UInt8], ownerUid: UInt32, createdAt: Date = Date()) {
        self.tokenId = tokenId; self.keyHandle = Data(keyHandle); self.ownerUid = ownerUid; self.createdAt = createdAt
    }
}

/// The owners of the SSH keys `ssh.keygen` made (shares the daemon's database).
public final class SSHKeyOwnerStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "ssh_key_owner") { t in
            t.column("tokenId", .text).notNull()
            t.column("keyHandle", .blob).notNull()
            t.column("ownerUid", .integer).notNull()
            t.column("createdAt", .datetime).notNull()
            t.primaryKey(["tokenId", "keyHandle"])
        }
    }

    /// Records `ownerUid` as the owner of the key (replacing an earlier row for the same token and handle).
    public func record(_ owner: SSHKeyOwnerRecord) async throws(TesseraError) {
        do { try await db.write { db in try owner.save(db) } } catch { throw storageError(error) }
    }

    /// Every recorded owner, by token id and key handle.
    public func owners() async throws(TesseraError) -> [String: [Data: UInt32]] {
        do {
            let rows = try await db.read { db in try SSHKeyOwnerRecord.fetchAll(db) }
            var out: [String: [Data: UInt32]] = [:]
            for r in rows { out[r.tokenId, default: [:]][r.keyHandle] = r.ownerUid }
            return out
        } catch { throw storageError(error) }
    }
}
