import Foundation
import GRDB
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Credential metadata persistence. Thread-safe; every write is a committed transaction.
public final class CredentialStore: Sendable {
    private let db: DatabasePool
    /// The CTAP options (discoverable, credProtect) of credentials made over CTAP, in the same database.
    public let ctapOptions: CTAPCredentialStore

    public init(database: TesseraDatabase) {
        db = database.writer
        ctapOptions = CTAPCredentialStore(database: database)
    }

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
            return try await db.read { db in try Self.list(db, rpId: rpId, userId: userId.map { Data($0) }) }
        } catch { throw storageError(error) }
    }

    static func list(_ db: Database, rpId: String?, userId: Data?) throws -> [CredentialRecord] {
        var q = CredentialRecord.all()
        if let rpId { q = q.filter(Column("rpId") == rpId) }
        if let userId { q = q.filter(Column("userId") == userId) }
        return try q.order(Column("createdAt"), Column("credentialId")).fetchAll(db)
    }

    /// Deletes the record; with `event`, records it in the audit trail in the same transaction.
    @discardableResult
    public func delete(id: [UInt8], event: CredentialEvent? = nil) async throws(TesseraError) -> Bool {
        do {
            return try await db.write { db in
                let deleted = try CredentialRecord.deleteOne(db, key: Data(id))
                if deleted, let event { try event.insert(db) }
                return deleted
            }
        } catch { throw storageError(error) }
    }

    /// Replaces the user name and display name kept with credential `id`; false when there is no such credential.
    public func updateUser(id: [UInt8], name: String, displayName: String) async throws(TesseraError) -> Bool {
        do {
            return try await db.write { db in
                try db.execute(
                    sql: "UPDATE credential SET userName = ?, userDisplayName = ? WHERE credentialId = ?",
                    arguments: [name, displayName, Data(id)])
                return db.changesCount > 0
            }
        } catch { throw storageError(error) }
    }

    /// Durably raises the reserved counter ceiling (never lowers it) and records the use time.
    public func reserveCounter(id: [UInt8], upTo ceiling: Int64, usedAt: Date = Date()) async throws(TesseraError) {
        do {
            try await db.write { db in
                try db.execute(
                    sql: """
                        UPDATE credential SET counterReserved = MAX(counterReserved, ?), lastUsedAt = ?
                        WHERE credentialId = ?
                        """, arguments: [ceiling, DatabaseTimestamp(usedAt), Data(id)])
            }
        } catch { throw storageError(error) }
    }

    /// Records the last use time of several credentials in one transaction (never moving one back).
    public func recordUse(_ times: [[UInt8]: Date]) async throws(TesseraError) {
        do {
            try await db.write { db in
                for (id, at) in times {
                    try db.execute(
                        sql: """
                            UPDATE credential SET lastUsedAt = ? WHERE credentialId = ? AND (lastUsedAt IS NULL OR lastUsedAt < ?)
                            """, arguments: [DatabaseTimestamp(at), Data(id), DatabaseTimestamp(at)])
                }
            }
        } catch { throw storageError(error) }
    }

    // MARK: owners

    /// Records the daemon's uid as the owner of every credential that existed before owners were recorded.
    static func migrateOwner(_ db: Database) throws {
        try db.alter(table: "credential") { t in
            t.add(column: "ownerUid", .integer).notNull().defaults(to: Int64(geteuid()))
        }
    }

    /// Hands credential `id` to `owner`, with an audit event; the record as it is now, nil when there is no such
    /// credential.
    public func chown(id: [UInt8], to owner: UInt32, actor: String) async throws(TesseraError) -> CredentialRecord? {
        do {
            return try await db.write { db in
                guard var rec = try CredentialRecord.fetchOne(db, key: Data(id)) else { return nil }
                guard rec.ownerUid != owner else { return rec }
                try CredentialEvent(
                    credentialId: Data(id), at: Date(), fromState: rec.state.rawValue, toState: rec.state.rawValue,
                    actor: actor, reason: "owner uid \(rec.ownerUid) -> \(owner)"
                ).insert(db)
                rec.ownerUid = owner
                try db.execute(
                    sql: "UPDATE credential SET ownerUid = ? WHERE credentialId = ?", arguments: [owner, Data(id)])
                return rec
            }
        } catch { throw storageError(error) }
    }

    // MARK: lifecycle

    static func migrateLifecycle(_ db: Database) throws {
        try db.alter(table: "credential") { t in
            t.add(column: "state", .text).notNull().defaults(to: CredentialState.active.rawValue)
            t.add(column: "stateChangedAt", .datetime)
            t.add(column: "identityBinding", .text)
        }
        try db.create(table: "credential_event") { t in
            t.autoIncrementedPrimaryKey("id")
            t.column("credentialId", .blob).notNull().indexed()
            t.column("at", .datetime).notNull()
            t.column("fromState", .text)
            t.column("toState", .text).notNull()
            t.column("actor", .text).notNull()
            t.column("reason", .text)
        }
        try db.create(table: "lifecycle_command_use") { t in
            t.column("jti", .text).primaryKey()
            t.column("issuer", .text).notNull()
            t.column("usedAt", .datetime).notNull()
        }
        try RecoveryStore.migrate(db)
    }

    /// A command's `jti` is unique per issuer, not across issuers: two backends that pick the same id do not
    /// refuse each other's commands.
    static func migrateCommandUsePerIssuer(_ db: Database) throws {
        try db.create(table: "lifecycle_command_use_new") { t in
            t.column("issuer", .text).notNull()
            t.column("jti", .text).notNull()
            t.column("usedAt", .datetime).notNull()
            t.primaryKey(["issuer", "jti"])
        }
        try db.execute(
            sql:
                "INSERT INTO lifecycle_command_use_new (issuer, jti, usedAt) SELECT issuer, jti, usedAt FROM lifecycle_command_use"
        )
        try db.drop(table: "lifecycle_command_use")
        try db.rename(table: "lifecycle_command_use_new", to: "lifecycle_command_use")
    }

    /// One credential's state change as `transition` reports it.
    public struct Transition: Sendable {
        public var record: CredentialRecord
        /// False when the credential already was in the target state (nothing written for it).
        public var changed: Bool
    }

    /// Moves every credential in `ids` to `state` in one transaction, with an audit event for each one that
    /// changes. A credential already in `state` is left as it is. Refused for the whole batch, nothing
    /// written: an unknown id (`PASSKEY_NOT_FOUND`) or a final state (`CREDENTIAL_DEACTIVATED`; only
    /// `deactivated` → `replaced` is allowed). With `command`, its `jti` is consumed in the same transaction
    /// (`LIFECYCLE_COMMAND_REPLAYED` when the same issuer used it before).
    public func transition(
        ids: [[UInt8]], to state: CredentialState, actor: String, reason: String?,
        command: (jti: String, issuer: String)? = nil,
        at: Date = Date()
    ) async throws(TesseraError) -> [Transition] {
        do {
            return try await db.write { db in
                if let command {
                    let used =
                        try Bool.fetchOne(
                            db, sql: "SELECT 1 FROM lifecycle_command_use WHERE issuer = ? AND jti = ?",
                            arguments: [command.issuer, command.jti]) ?? false
                    if used {
                        throw TesseraError(.lifecycleCommandReplayed, "this lifecycle command was already applied")
                    }
                    try db.execute(
                        sql: "INSERT INTO lifecycle_command_use (jti, issuer, usedAt) VALUES (?, ?, ?)",
                        arguments: [command.jti, command.issuer, DatabaseTimestamp(at)])
                }
                var out: [Transition] = []
                for id in ids {
                    guard var rec = try CredentialRecord.fetchOne(db, key: Data(id)) else {
                        throw TesseraError(.passkeyNotFound, "no credential with id \(Base64URL.encode(id))")
                    }
                    if rec.state == state { out.append(Transition(record: rec, changed: false)); continue }
                    if rec.state.isFinal, !(rec.state == .deactivated && state == .replaced) {
                        throw TesseraError(
                            .credentialDeactivated, "the credential is \(rec.state.rawValue), a final state",
                            details: [
                                "credentialId": .string(Base64URL.encode(id)),
                                "state": .string(rec.state.rawValue),
                            ])
                    }
                    let from = rec.state
                    rec.state = state
                    rec.stateChangedAt = at
                    try db.execute(
                        sql: "UPDATE credential SET state = ?, stateChangedAt = ? WHERE credentialId = ?",
                        arguments: [state.rawValue, DatabaseTimestamp(at), Data(id)])
                    try CredentialEvent(
                        credentialId: Data(id), at: at, fromState: from.rawValue, toState: state.rawValue,
                        actor: actor, reason: reason
                    ).insert(db)
                    out.append(Transition(record: rec, changed: true))
                }
                return out
            }
        } catch { throw storageError(error) }
    }

    /// Inserts a new credential and, in the same transaction, marks other credentials `replaced`: those `admit`
    /// returns when given the user's credentials at the relying party as they are in that transaction (oldest
    /// first). An error `admit` throws leaves nothing written, so two concurrent inserts cannot both pass a check
    /// that only one of them may pass.
    public func insert(
        _ record: CredentialRecord,
        admit: @escaping @Sendable (_ existing: [CredentialRecord]) throws(TesseraError) -> [[UInt8]], actor: String,
        reason: String?
    ) async throws(TesseraError) -> [Transition] {
        do {
            return try await db.write { db in
                let replacing = try admit(
                    try Self.list(db, rpId: record.rpId, userId: record.userId).filter {
                        $0.ownerUid == record.ownerUid
                    })
                try record.insert(db)
                try CredentialEvent(
                    credentialId: record.credentialId, at: record.createdAt, fromState: nil,
                    toState: record.state.rawValue, actor: actor, reason: reason
                ).insert(db)
                var out: [Transition] = []
                for id in replacing where Data(id) != record.credentialId {
                    guard var rec = try CredentialRecord.fetchOne(db, key: Data(id)), rec.state != .replaced else {
                        continue
                    }
                    let from = rec.state
                    rec.state = .replaced
                    rec.stateChangedAt = record.createdAt
                    try db.execute(
                        sql: "UPDATE credential SET state = ?, stateChangedAt = ? WHERE credentialId = ?",
                        arguments: [rec.state.rawValue, DatabaseTimestamp(record.createdAt), Data(id)])
                    try CredentialEvent(
                        credentialId: Data(id), at: record.createdAt, fromState: from.rawValue,
                        toState: rec.state.rawValue, actor: actor,
                        reason: "replaced by \(Base64URL.encode(record.credentialId))"
                    ).insert(db)
                    out.append(Transition(record: rec, changed: true))
                }
                return out
            }
        } catch { throw storageError(error) }
    }

    /// What a badge office publishes of each credential of `rpId` (`CredentialSummary`), oldest first: read by column,
    /// without decoding whole records, so 100,000 of them are read quickly.
    public func summaries(rpId: String) async throws(TesseraError) -> [CredentialSummary] {
        do {
            return try await db.read { db in
                let rows = try Row.fetchCursor(
                    db,
                    sql: """
                        SELECT credentialId, userName, keyHandle, publicKey, state, stateChangedAt, createdAt
                        FROM credential
                        WHERE rpId = ? ORDER BY createdAt, credentialId
                        """, arguments: [rpId])
                var out: [CredentialSummary] = []
                while let row = try rows.next() {
                    out.append(
                        CredentialSummary(
                            credentialId: row[0], userName: row[1], keyHandle: row[2], publicKey: row[3],
                            state: CredentialState(rawValue: row[4]) ?? .deactivated,
                            stateChangedAt: (row[5] as DatabaseTimestamp?)?.date,
                            createdAt: (row[6] as DatabaseTimestamp).date))
                }
                return out
            }
        } catch { throw storageError(error) }
    }

    /// The id of the newest audit trail entry (0 when there is none): it changes with every state change,
    /// registration and deletion, so a poller notices that some credential changed without reading them all.
    public func auditMarker() async throws(TesseraError) -> Int64 {
        do {
            return try await db.read { db in
                try Int64.fetchOne(db, sql: "SELECT COALESCE(MAX(id), 0) FROM credential_event") ?? 0
            }
        } catch { throw storageError(error) }
    }

    /// The audit trail, oldest first: of one credential, or (nil) of all, the newest `limit` entries.
    public func events(credentialId: [UInt8]?, limit: Int = 1000) async throws(TesseraError) -> [CredentialEvent] {
        do {
            return try await db.read { db in
                var q = CredentialEvent.all()
                if let credentialId { q = q.filter(Column("credentialId") == Data(credentialId)) }
                let rows = try q.order(Column("id").desc).limit(limit).fetchAll(db)
                return rows.reversed()
            }
        } catch { throw storageError(error) }
    }
}
