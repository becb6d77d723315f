import Foundation
import GRDB
import TesseraCore

/// Credential metadata persistence. Thread-safe; every write is a committed transaction.
public final class CredentialStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    public func insert(_ record: CredentialRecord) async throws(TesseraError) {
        do { try await db.write { db in try record.insert(db) } } catch { throw storageError(error) }
    }

    public func credential(id: [UInt8]) async throws(TesseraError) -> CredentialRecord? {
        do { return try await db.read { db in try CredentialRecord.fetchOne(db, key: Data(id)) } } catch {
            throw storageError(error)
        }
    }

    /// Credentials filtered by relying party and/or user handle, oldest first.
    public func list(rpId: String? = nil, userId: [UInt8]? = nil) async throws(TesseraError) -> [CredentialRecord] {
        do {
            return try await db.read { db in
                var q = CredentialRecord.all()
                if let rpId { q = q.filter(Column("rpId") == rpId) }
                if let userId { q = q.filter(Column("userId") == Data(userId)) }
                return try q.order(Column("createdAt"), Column("credentialId")).fetchAll(db)
            }
        } catch { throw storageError(error) }
    }

    @discardableResult
    public func delete(id: [UInt8]) async throws(TesseraError) -> Bool {
        do { return try await db.write { db in try CredentialRecord.deleteOne(db, key: Data(id)) } } catch {
            throw storageError(error)
        }
    }

    /// Durably raises the reserved counter ceiling (never lowers it) and records the use time.
    public func reserveCounter(id: [UInt8], upTo ceiling: Int64, usedAt: Date = Date()) async throws(TesseraError) {
        do {
            try await db.write { db in
                try db.execute(sql: """
                    UPDATE credential SET counterReserved = MAX(counterReserved, ?), lastUsedAt = ?
                    WHERE credentialId = ?
                    """, arguments: [ceiling, usedAt, Data(id)])
            }
        } catch { throw storageError(error) }
    }

    /// Records the last use time of several credentials in one transaction (never moving one back).
    public func recordUse(_ times: [[UInt8]: Date]) async throws(TesseraError) {
        do {
            try await db.write { db in
                for (id, at) in times {
                    try db.execute(sql: """
                        UPDATE credential SET lastUsedAt = ? WHERE credentialId = ? AND (lastUsedAt IS NULL OR lastUsedAt < ?)
                        """, arguments: [at, Data(id), at])
                }
            }
        } catch { throw storageError(error) }
    }
}
