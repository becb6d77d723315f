import FoundationEssentials
import TesseraCore

/// A PIV key slot Tessera created a key in. Slots without a record were not created by Tessera and are never
/// written by it.
public struct PIVSlotRecord: Codable, Sendable, Equatable {
    /// What the slot holds now.
    public enum State: String, Codable, Sendable, SQLArgument {
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
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v2-piv-slots".
    static let migrate = """
        CREATE TABLE "piv_slot" ("tokenId" TEXT NOT NULL, "slot" INTEGER NOT NULL, "state" TEXT NOT NULL, \
        "keyHandle" BLOB, "updatedAt" DATETIME NOT NULL, PRIMARY KEY ("tokenId", "slot"));
        CREATE INDEX "piv_slot_handle" ON "piv_slot"("tokenId", "keyHandle");
        """

    private static let select = "SELECT tokenId, slot, state, keyHandle, updatedAt FROM piv_slot"

    private static func record(_ row: SQLRow) throws -> PIVSlotRecord {
        PIVSlotRecord(
            tokenId: try row.get(0), slot: try row.get(1), state: try row.get(2), keyHandle: try row.get(3),
            updatedAt: try row.get(4))
    }

    /// Every slot Tessera owns on the card, by slot number.
    public func slots(tokenId: String) async throws(TesseraError) -> [PIVSlotRecord] {
        try await db.read { c in try c.all(Self.select + " WHERE tokenId = ? ORDER BY slot", [tokenId], Self.record) }
    }

    /// The slot holding the key with `keyHandle` (used or pending).
    public func slot(tokenId: String, keyHandle: [UInt8]) async throws(TesseraError) -> PIVSlotRecord? {
        try await db.read { c in
            try c.first(Self.select + " WHERE tokenId = ? AND keyHandle = ?", [tokenId, Data(keyHandle)], Self.record)
        }
    }

    /// Inserts or replaces the record of one slot (durably, before the card is touched).
    public func save(_ record: PIVSlotRecord) async throws(TesseraError) {
        try await db.write { c in
            try c.run(
                """
                INSERT INTO piv_slot (tokenId, slot, state, keyHandle, updatedAt) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (tokenId, slot) DO UPDATE SET state = excluded.state, keyHandle = excluded.keyHandle,
                updatedAt = excluded.updatedAt
                """, [record.tokenId, record.slot, record.state, record.keyHandle, record.updatedAt])
        }
    }
}
