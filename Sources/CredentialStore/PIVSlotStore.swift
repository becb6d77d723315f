import Foundation
import GRDB
import TesseraCore

/// A PIV key slot Tessera created a key in. Slots without a record were not created by Tessera and are never
/// written by it.
public struct PIVSlotRecord: Codable, Sendable, Equatable, PersistableRecord, TimestampColumns {
    public static let databaseTableName = "piv_slot"

    /// What the slot holds now.
    public enum State: String, Codable, Sendable {
        /// A key generation was started (a crash leaves the slot Tessera's, to be reused).
        case pending
        /// The key of a credential (`keyHandle`).
        case used
        /// Tessera's own throw-away key after a delete: free for Tessera to reuse.
        case free
    }

    public var tokenId: String
    /// The key reference (82…95).
    public var slot: Int
    public var state: State
    /// The passkey service's key handle while `used` / `pending`.
    public var keyHandle: Data?
    public var updatedAt: Date

    public init(tokenId: String, slot: Int, state: State, keyHandle: Data?, updatedAt: Date = Date()) {
        self.tokenId = tokenId; self.slot = slot; self.state = state; self.keyHandle = keyHandle;
        self.updatedAt = updatedAt
    }
}

/// The PIV slots Tessera owns, per card (shares the daemon's database).
public final class PIVSlotStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "piv_slot") { t in
            t.column("tokenId", .text).notNull()
            t.column("slot", .integer).notNull()
            t.column("state", .text).notNull()
            t.column("keyHandle", .blob)
            t.column("updatedAt", .datetime).notNull()
            t.primaryKey(["tokenId", "slot"])
        }
        try db.create(index: "piv_slot_handle", on: "piv_slot", columns: ["tokenId", "keyHandle"])
    }

    /// Every slot Tessera owns on the card, by slot number.
    public func slots(tokenId: String) async throws(TesseraError) -> [PIVSlotRecord] {
        do {
            return try await db.read { db in
                try PIVSlotRecord.filter(Column("tokenId") == tokenId).order(Column("slot")).fetchAll(db)
            }
        } catch { throw storageError(error) }
    }

    /// The slot holding the key with `keyHandle` (used or pending).
    public func slot(tokenId: String, keyHandle: [UInt8]) async throws(TesseraError) -> PIVSlotRecord? {
        do {
            return try await db.read { db in
                try PIVSlotRecord.filter(Column("tokenId") == tokenId && Column("keyHandle") == Data(keyHandle))
                    .fetchOne(db)
            }
        } catch { throw storageError(error) }
    }

    /// Inserts or replaces the record of one slot (durably, before the card is touched).
    public func save(_ record: PIVSlotRecord) async throws(TesseraError) {
        do { try await db.write { db in try record.save(db) } } catch { throw storageError(error) }
    }
}
