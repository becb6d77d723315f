import Foundation
import GRDB
import TesseraCore

/// One recovery attempt as persisted (docs/LIFECYCLE.md, "Recovery"): its token's `jti` (consumed when the row is
/// inserted), the stage reached and the replacement passkey planned before its key exists.
public struct RecoveryAttemptRow: Codable, Sendable, Equatable, PersistableRecord, TimestampColumns {
    public static let databaseTableName = "recovery_attempt"

    public enum Stage: String, Codable, Sendable, DatabaseValueConvertible {
        /// Token accepted; the document is not matched yet.
        case started
        /// The document matched; `binding` holds the new identity binding.
        case matched
        case succeeded, failed, cancelled
    }

    public var id: String
    public var jti: String
    public var issuer: String
    /// The user handle (base64url).
    public var subject: String
    public var rpId: String
    public var stage: Stage
    /// The planned passkey: {credentialId, keyHandle, challenge, tokenId?, generating?}.
    public var plan: String?
    /// The identity binding (JSON text) the new passkey gets.
    public var binding: String?
    public var credentialId: Data?
    /// The error code of a failed attempt.
    public var failure: String?
    /// The uid that started the attempt (nil: started before owners were recorded; administrators only).
    public var ownerUid: UInt32?
    public var startedAt: Date
    public var updatedAt: Date
    public var expiresAt: Date

    public init(
        id: String, jti: String, issuer: String, subject: String, rpId: String, startedAt: Date, expiresAt: Date,
        ownerUid: UInt32? = nil
    ) {
        self.id = id; self.jti = jti; self.issuer = issuer; self.subject = subject; self.rpId = rpId
        self.ownerUid = ownerUid
        self.stage = .started; self.startedAt = startedAt; self.updatedAt = startedAt; self.expiresAt = expiresAt
    }
}

/// Persistence of recovery attempts (shares the daemon's database). Every method is one committed transaction.
public final class RecoveryStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "recovery_attempt") { t in
            t.column("id", .text).primaryKey()
            t.column("jti", .text).notNull().unique()
            t.column("issuer", .text).notNull()
            t.column("subject", .text).notNull().indexed()
            t.column("rpId", .text).notNull()
            t.column("stage", .text).notNull()
            t.column("plan", .text)
            t.column("binding", .text)
            t.column("credentialId", .blob)
            t.column("failure", .text)
            t.column("startedAt", .datetime).notNull().indexed()
            t.column("updatedAt", .datetime).notNull()
            t.column("expiresAt", .datetime).notNull()
        }
    }

    /// The owner's uid, added after the first release (`v5-recovery-owner`).
    static func migrateOwner(_ db: Database) throws {
        try db.alter(table: "recovery_attempt") { t in t.add(column: "ownerUid", .integer) }
    }

    public func attempt(id: String) async throws(TesseraError) -> RecoveryAttemptRow? {
        do { return try await db.read { db in try RecoveryAttemptRow.fetchOne(db, key: id) } } catch {
            throw storageError(error)
        }
    }

    /// Why a new attempt may not start: the token was used by another attempt (`"replayed"`), or a rate limit
    /// (`"user"` / `"station"`, attempts started since `since`); nil when `row` was inserted (its `jti` consumed).
    public func insert(
        _ row: RecoveryAttemptRow, since: Date, maxPerUser: Int,
        maxPerStation: Int
    ) async throws(TesseraError) -> String? {
        try await self.db.uncancelledWrite { db in
            if try RecoveryAttemptRow.filter(Column("jti") == row.jti).fetchCount(db) > 0 { return "replayed" }
            let recent = RecoveryAttemptRow.filter(Column("startedAt") > DatabaseTimestamp(since))
            if try recent.filter(Column("subject") == row.subject).fetchCount(db) >= maxPerUser { return "user" }
            if try recent.fetchCount(db) >= maxPerStation { return "station" }
            try row.insert(db)
            return nil
        }
    }

    /// Saves the row unless the stored one already ended (succeeded, failed, cancelled); returns whether it did.
    @discardableResult
    public func save(_ row: RecoveryAttemptRow) async throws(TesseraError) -> Bool {
        try await self.db.uncancelledWrite { db in
            guard let stored = try RecoveryAttemptRow.fetchOne(db, key: row.id),
                stored.stage == .started || stored.stage == .matched
            else { return false }
            try row.update(db)
            return true
        }
    }

}
