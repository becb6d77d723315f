import FoundationEssentials
import TesseraCore

/// Credential metadata persistence. Thread-safe; every write is a committed transaction.
public final class CredentialStore: Sendable {
    private let db: TesseraDatabase
    /// The CTAP options (discoverable, credProtect) of credentials made over CTAP, in the same database.
    public let ctapOptions: CTAPCredentialStore

    public init(database: TesseraDatabase) {
        db = database
        ctapOptions = CTAPCredentialStore(database: database)
    }

    public func insert(_ record: CredentialRecord) async throws(TesseraError) {
        try await db.write { c in try record.insert(c) }
    }

    public func credential(id: [UInt8]) async throws(TesseraError) -> CredentialRecord? {
        try await db.read { c in try CredentialRecord.fetch(c, id: Data(id)) }
    }

    /// Credentials filtered by relying party and/or user handle, oldest first.
    public func list(rpId: String? = nil, userId: [UInt8]? = nil) async throws(TesseraError) -> [CredentialRecord] {
        try await db.read { c in try Self.list(c, rpId: rpId, userId: userId.map { Data($0) }) }
    }

    static func list(_ c: SQLConnection, rpId: String?, userId: Data?) throws -> [CredentialRecord] {
        switch (rpId, userId) {
        case (let rpId?, let userId?): return try c.all(ListSQL.byRPAndUser, [rpId, userId], CredentialRecord.init)
        case (let rpId?, nil): return try c.all(ListSQL.byRP, [rpId], CredentialRecord.init)
        case (nil, let userId?): return try c.all(ListSQL.byUser, [userId], CredentialRecord.init)
        case (nil, nil): return try c.all(ListSQL.all, [], CredentialRecord.init)
        }
    }

    /// `list`'s queries, oldest first.
    private enum ListSQL {
        static let order = " ORDER BY createdAt, credentialId"
        static let byRPAndUser = CredentialRecord.selectSQL + " WHERE rpId = ? AND userId = ?" + order
        static let byRP = CredentialRecord.selectSQL + " WHERE rpId = ?" + order
        static let byUser = CredentialRecord.selectSQL + " WHERE userId = ?" + order
        static let all = CredentialRecord.selectSQL + order
    }

    /// Deletes the record; with `event`, records it in the audit trail in the same transaction.
    @discardableResult
    public func delete(id: [UInt8], event: CredentialEvent? = nil) async throws(TesseraError) -> Bool {
        try await db.write { c in
            let deleted = try c.run("DELETE FROM credential WHERE credentialId = ?", [Data(id)]) > 0
            if deleted, let event { try event.insert(c) }
            return deleted
        }
    }

    /// Replaces the user name and display name kept with credential `id`; false when there is no such credential.
    public func updateUser(id: [UInt8], name: String, displayName: String) async throws(TesseraError) -> Bool {
        try await db.write { c in
            try c.run(
                "UPDATE credential SET userName = ?, userDisplayName = ? WHERE credentialId = ?",
                [name, displayName, Data(id)]) > 0
        }
    }

    /// Durably raises the reserved counter ceiling (never lowers it) and records the use time.
    public func reserveCounter(id: [UInt8], upTo ceiling: Int64, usedAt: Date = Date()) async throws(TesseraError) {
        try await db.write { c in
            try c.run(
                "UPDATE credential SET counterReserved = MAX(counterReserved, ?), lastUsedAt = ? WHERE credentialId = ?",
                [ceiling, usedAt, Data(id)])
        }
    }

    /// Records the last use time of several credentials in one transaction (never moving one back).
    public func recordUse(_ times: [[UInt8]: Date]) async throws(TesseraError) {
        try await db.write { c in
            for (id, at) in times {
                try c.run(
                    """
                    UPDATE credential SET lastUsedAt = ? WHERE credentialId = ? AND (lastUsedAt IS NULL OR lastUsedAt < ?)
                    """, [at, Data(id), at])
            }
        }
    }

    // MARK: owners

    /// "v9-credential-owner": records the daemon's uid as the owner of every credential that existed before owners
    /// were recorded.
    static func migrateOwner(uid: UInt32) -> String {
        #"ALTER TABLE "credential" ADD COLUMN "ownerUid" INTEGER NOT NULL DEFAULT \#(uid)"#
    }

    /// Hands credential `id` to `owner`, with an audit event; the record as it is now, nil when there is no such
    /// credential.
    public func chown(id: [UInt8], to owner: UInt32, actor: String) async throws(TesseraError) -> CredentialRecord? {
        try await db.write { c in
            guard var rec = try CredentialRecord.fetch(c, id: Data(id)) else { return nil }
            guard rec.ownerUid != owner else { return rec }
            try CredentialEvent(
                credentialId: Data(id), at: Date(), fromState: rec.state.rawValue, toState: rec.state.rawValue,
                actor: actor, reason: "owner uid \(rec.ownerUid) -> \(owner)"
            ).insert(c)
            rec.ownerUid = owner
            try c.run("UPDATE credential SET ownerUid = ? WHERE credentialId = ?", [owner, Data(id)])
            return rec
        }
    }

    // MARK: lifecycle

    /// "v1-credentials".
    static let migrateV1 = """
        CREATE TABLE "credential" ("credentialId" BLOB PRIMARY KEY, "rpId" TEXT NOT NULL, "userId" BLOB NOT NULL, \
        "userName" TEXT NOT NULL, "userDisplayName" TEXT NOT NULL, "tokenId" TEXT NOT NULL, "backend" TEXT NOT NULL, \
        "keyHandle" BLOB NOT NULL, "publicKey" BLOB NOT NULL, "counterReserved" INTEGER NOT NULL DEFAULT 0, \
        "createdAt" DATETIME NOT NULL, "lastUsedAt" DATETIME);
        CREATE INDEX "credential_on_rpId" ON "credential"("rpId");
        CREATE INDEX "credential_rp_user" ON "credential"("rpId", "userId");
        """

    /// "v4-credential-lifecycle" (with `RecoveryStore.migrate`).
    static let migrateLifecycle = """
        ALTER TABLE "credential" ADD COLUMN "state" TEXT NOT NULL DEFAULT 'active';
        ALTER TABLE "credential" ADD COLUMN "stateChangedAt" DATETIME;
        ALTER TABLE "credential" ADD COLUMN "identityBinding" TEXT;
        CREATE TABLE "credential_event" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "credentialId" BLOB NOT NULL, \
        "at" DATETIME NOT NULL, "fromState" TEXT, "toState" TEXT NOT NULL, "actor" TEXT NOT NULL, "reason" TEXT);
        CREATE INDEX "credential_event_on_credentialId" ON "credential_event"("credentialId");
        CREATE TABLE "lifecycle_command_use" ("jti" TEXT PRIMARY KEY, "issuer" TEXT NOT NULL, \
        "usedAt" DATETIME NOT NULL);

        """

    /// "v11-lifecycle-command-jti-per-issuer": a command's `jti` is unique per issuer, not across issuers: two
    /// backends that pick the same id do not refuse each other's commands.
    static let migrateCommandUsePerIssuer = """
        CREATE TABLE "lifecycle_command_use_new" ("issuer" TEXT NOT NULL, "jti" TEXT NOT NULL, \
        "usedAt" DATETIME NOT NULL, PRIMARY KEY ("issuer", "jti"));
        INSERT INTO lifecycle_command_use_new (issuer, jti, usedAt) SELECT issuer, jti, usedAt FROM lifecycle_command_use;
        DROP TABLE "lifecycle_command_use";
        ALTER TABLE "lifecycle_command_use_new" RENAME TO "lifecycle_command_use";
        """

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
        try await db.write { c in
            if let command {
                let used: Bool? = try c.value(
                    "SELECT 1 FROM lifecycle_command_use WHERE issuer = ? AND jti = ?", [command.issuer, command.jti])
                if used != nil {
                    throw TesseraError(.lifecycleCommandReplayed, "this lifecycle command was already applied")
                }
                try c.run(
                    "INSERT INTO lifecycle_command_use (jti, issuer, usedAt) VALUES (?, ?, ?)",
                    [command.jti, command.issuer, at])
            }
            var out: [Transition] = []
            for id in ids {
                guard var rec = try CredentialRecord.fetch(c, id: Data(id)) else {
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
                try c.run(
                    "UPDATE credential SET state = ?, stateChangedAt = ? WHERE credentialId = ?", [state, at, Data(id)])
                try CredentialEvent(
                    credentialId: Data(id), at: at, fromState: from.rawValue, toState: state.rawValue,
                    actor: actor, reason: reason
                ).insert(c)
                out.append(Transition(record: rec, changed: true))
            }
            return out
        }
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
        try await db.write { c in
            let replacing = try admit(
                try Self.list(c, rpId: record.rpId, userId: record.userId).filter { $0.ownerUid == record.ownerUid })
            try record.insert(c)
            try CredentialEvent(
                credentialId: record.credentialId, at: record.createdAt, fromState: nil,
                toState: record.state.rawValue, actor: actor, reason: reason
            ).insert(c)
            var out: [Transition] = []
            for id in replacing where Data(id) != record.credentialId {
                guard var rec = try CredentialRecord.fetch(c, id: Data(id)), rec.state != .replaced else { continue }
                let from = rec.state
                rec.state = .replaced
                rec.stateChangedAt = record.createdAt
                try c.run(
                    "UPDATE credential SET state = ?, stateChangedAt = ? WHERE credentialId = ?",
                    [rec.state, record.createdAt, Data(id)])
                try CredentialEvent(
                    credentialId: Data(id), at: record.createdAt, fromState: from.rawValue,
                    toState: rec.state.rawValue, actor: actor,
                    reason: "replaced by \(Base64URL.encode(record.credentialId))"
                ).insert(c)
                out.append(Transition(record: rec, changed: true))
            }
            return out
        }
    }

    /// What a badge office publishes of each credential of `rpId` (`CredentialSummary`), oldest first: read by column,
    /// without decoding whole records, so 100,000 of them are read quickly.
    public func summaries(rpId: String) async throws(TesseraError) -> [CredentialSummary] {
        try await db.read { c in
            try c.all(
                """
                SELECT credentialId, userName, keyHandle, publicKey, state, stateChangedAt, createdAt
                FROM credential
                WHERE rpId = ? ORDER BY createdAt, credentialId
                """, [rpId]
            ) { row in
                CredentialSummary(
                    credentialId: try row.get(0), userName: try row.get(1), keyHandle: try row.get(2),
                    publicKey: try row.get(3),
                    state: CredentialState(rawValue: try row.get(4)) ?? .deactivated,
                    stateChangedAt: try row.get(5), createdAt: try row.get(6))
            }
        }
    }

    /// The id of the newest audit trail entry (0 when there is none): it changes with every state change,
    /// registration and deletion, so a poller notices that some credential changed without reading them all.
    public func auditMarker() async throws(TesseraError) -> Int64 {
        try await db.read { c in try c.value("SELECT COALESCE(MAX(id), 0) FROM credential_event") ?? 0 }
    }

    /// The audit trail, oldest first: of one credential, or (nil) of all, the newest `limit` entries.
    public func events(credentialId: [UInt8]?, limit: Int = 1000) async throws(TesseraError) -> [CredentialEvent] {
        try await db.read { c in
            let select = "SELECT credentialId, at, fromState, toState, actor, reason FROM credential_event"
            let rows =
                if let credentialId {
                    try c.all(
                        select + " WHERE credentialId = ? ORDER BY id DESC LIMIT ?", [Data(credentialId), limit],
                        CredentialEvent.init(row:))
                } else {
                    try c.all(select + " ORDER BY id DESC LIMIT ?", [limit], CredentialEvent.init(row:))
                }
            return rows.reversed()
        }
    }
}
