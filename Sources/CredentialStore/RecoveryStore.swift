import FoundationEssentials
import TesseraCore

/// One recovery attempt as persisted (docs/LIFECYCLE.md, "Recovery"): its token's `jti` (consumed when the row is
/// inserted), the stage reached and the replacement passkey planned before its key exists.
public struct RecoveryAttemptRow: Codable, Sendable, Equatable {
    public enum Stage: String, Codable, Sendable, SQLArgument {
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

extension RecoveryAttemptRow {
    static let columns = """
        id, jti, issuer, subject, rpId, stage, plan, binding, credentialId, failure, ownerUid, startedAt, updatedAt, \
        expiresAt
        """

    init(row: SQLRow) throws {
        id = try row.get(0); jti = try row.get(1); issuer = try row.get(2); subject = try row.get(3)
        rpId = try row.get(4); stage = try row.get(5); plan = try row.get(6); binding = try row.get(7)
        credentialId = try row.get(8); failure = try row.get(9); ownerUid = try row.get(10)
        startedAt = try row.get(11); updatedAt = try row.get(12); expiresAt = try row.get(13)
    }

    /// The row's values in the order of `columns`.
    var values: [any SQLArgument] {
        [
            id, jti, issuer, subject, rpId, stage, plan, binding, credentialId, failure, ownerUid, startedAt,
            updatedAt, expiresAt,
        ]
    }
}

/// Persistence of recovery attempts (shares the daemon's database). Every method is one committed transaction.
public final class RecoveryStore: Sendable {
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// Part of "v4-credential-lifecycle".
    static let migrate = """
        CREATE TABLE "recovery_attempt" ("id" TEXT PRIMARY KEY, "jti" TEXT NOT NULL UNIQUE, "issuer" TEXT NOT NULL, \
        "subject" TEXT NOT NULL, "rpId" TEXT NOT NULL, "stage" TEXT NOT NULL, "plan" TEXT, "binding" TEXT, \
        "credentialId" BLOB, "failure" TEXT, "startedAt" DATETIME NOT NULL, "updatedAt" DATETIME NOT NULL, \
        "expiresAt" DATETIME NOT NULL);
        CREATE INDEX "recovery_attempt_on_subject" ON "recovery_attempt"("subject");
        CREATE INDEX "recovery_attempt_on_startedAt" ON "recovery_attempt"("startedAt");
        """

    /// "v5-recovery-owner": the owner's uid, added after the first release.
    static let migrateOwner = #"ALTER TABLE "recovery_attempt" ADD COLUMN "ownerUid" INTEGER"#

    public func attempt(id: String) async throws(TesseraError) -> RecoveryAttemptRow? {
        try await db.read { c in try Self.fetch(c, id: id) }
    }

    private static func fetch(_ c: SQLConnection, id: String) throws -> RecoveryAttemptRow? {
        try c.first(
            "SELECT \(RecoveryAttemptRow.columns) FROM recovery_attempt WHERE id = ?", [id],
            RecoveryAttemptRow.init(row:))
    }

    /// Why a new attempt may not start: the token was used by another attempt (`"replayed"`), or a rate limit
    /// (`"user"` / `"station"`, attempts started since `since`); nil when `row` was inserted (its `jti` consumed).
    public func insert(
        _ row: RecoveryAttemptRow, since: Date, maxPerUser: Int,
        maxPerStation: Int
    ) async throws(TesseraError) -> String? {
        try await db.write { c in
            if try c.value("SELECT COUNT(*) FROM recovery_attempt WHERE jti = ?", [row.jti], as: Int.self) ?? 0 > 0 {
                return "replayed"
            }
            let recent = "SELECT COUNT(*) FROM recovery_attempt WHERE startedAt > ?"
            if try c.value(recent + " AND subject = ?", [since, row.subject], as: Int.self) ?? 0 >= maxPerUser {
                return "user"
            }
            if try c.value(recent, [since], as: Int.self) ?? 0 >= maxPerStation { return "station" }
            try c.run(
                "INSERT INTO recovery_attempt (\(RecoveryAttemptRow.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row.values)
            return nil
        }
    }

    /// Saves the row unless the stored one already ended (succeeded, failed, cancelled); returns whether it did.
    @discardableResult
    public func save(_ row: RecoveryAttemptRow) async throws(TesseraError) -> Bool {
        try await db.write { c in
            guard let stored = try Self.fetch(c, id: row.id), stored.stage == .started || stored.stage == .matched
            else { return false }
            try c.run(
                """
                UPDATE recovery_attempt SET id = ?, jti = ?, issuer = ?, subject = ?, rpId = ?, stage = ?, plan = ?, \
                binding = ?, credentialId = ?, failure = ?, ownerUid = ?, startedAt = ?, updatedAt = ?, expiresAt = ?
                WHERE id = ?
                """, row.values + [row.id])
            return true
        }
    }
}
