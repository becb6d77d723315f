import Foundation
import GRDB
import TesseraCore

/// One kiosk enrollment as persisted: the resolved workflow, what was collected, and where it stands.
/// While active, `data` and `stepState` hold the collected data; a terminal outcome wipes both and the row
/// stays as the audit record.
public struct EnrollmentRow: Sendable, Equatable {
    public enum State: String, Sendable {
        /// Running, waiting for input, or interrupted by a daemon restart.
        case active
        /// Ended `failedWithRetryPossibility`: context kept for `retry`.
        case failedRetryable
        /// A terminal outcome; `outcome` says which.
        case finished
    }

    public var id: String
    public var workflow: String
    /// "remote" or "activationToken".
    public var kind: String
    public var ownerUid: UInt32
    public var state: State
    /// The workflow's steps with their settings, fixed when the enrollment started.
    public var definition: JSONValue
    /// Start parameters: subject, user, expected attributes, userVerification, …
    public var parameters: JSONValue
    /// transactionData: what the completed steps collected.
    public var data: JSONValue
    /// Index of the first step not completed.
    public var stepIndex: Int
    public var completedSteps: [String]
    /// In-progress state of the current step (an issued OTP, a planned passkey), committed before its effects.
    public var stepState: JSONValue
    /// The error of a `failedRetryable` or `failed` enrollment.
    public var failure: JSONValue?
    public var outcome: String?
    public var subject: String?
    public var tokenJti: String?
    public var credentialId: Data?
    public var passiveAuthentication: String?
    /// The face matcher's decisions in this enrollment, for the audit: `[{step, matcher, decision, score,
    /// challenge?}]` (never an image or a template).
    public var faceChecks: JSONValue?
    public var startedAt: Date
    public var updatedAt: Date
    public var finishedAt: Date?

    public init(
        id: String, workflow: String, kind: String, ownerUid: UInt32, definition: JSONValue,
        parameters: JSONValue, subject: String?, tokenJti: String?, startedAt: Date
    ) {
        self.id = id; self.workflow = workflow; self.kind = kind; self.ownerUid = ownerUid; self.state = .active
        self.definition = definition; self.parameters = parameters; self.data = .object([:]); self.stepIndex = 0
        self.completedSteps = []; self.stepState = .null; self.subject = subject; self.tokenJti = tokenJti
        self.startedAt = startedAt; self.updatedAt = startedAt
    }
}

extension EnrollmentRow: FetchableRecord, PersistableRecord {
    public static let databaseTableName = "enrollment"

    public init(row: Row) throws {
        id = row["id"]; workflow = row["workflow"]; kind = row["kind"]
        ownerUid = UInt32(truncatingIfNeeded: row["ownerUid"] as Int64)
        state = State(rawValue: row["state"]) ?? .finished
        definition = Self.json(row["definition"]) ?? .array([])
        parameters = Self.json(row["parameters"]) ?? .object([:])
        data = Self.json(row["data"]) ?? .object([:])
        stepIndex = row["stepIndex"]
        completedSteps = (Self.json(row["completedSteps"])?.arrayValue ?? []).compactMap(\.stringValue)
        stepState = Self.json(row["stepState"]) ?? .null
        failure = Self.json(row["failure"])
        outcome = row["outcome"]; subject = row["subject"]; tokenJti = row["tokenJti"]
        credentialId = row["credentialId"]; passiveAuthentication = row["passiveAuthentication"]
        faceChecks = Self.json(row["faceChecks"])
        startedAt = (row["startedAt"] as DatabaseTimestamp).date
        updatedAt = (row["updatedAt"] as DatabaseTimestamp).date
        finishedAt = (row["finishedAt"] as DatabaseTimestamp?)?.date
    }

    public func encode(to container: inout PersistenceContainer) throws {
        container["id"] = id; container["workflow"] = workflow; container["kind"] = kind
        container["ownerUid"] = Int64(ownerUid); container["state"] = state.rawValue
        container["definition"] = Self.text(definition); container["parameters"] = Self.text(parameters)
        container["data"] = Self.text(data); container["stepIndex"] = stepIndex
        container["completedSteps"] = Self.text(.array(completedSteps.map { .string($0) }))
        container["stepState"] = Self.text(stepState); container["failure"] = failure.map(Self.text)
        container["outcome"] = outcome; container["subject"] = subject; container["tokenJti"] = tokenJti
        container["credentialId"] = credentialId; container["passiveAuthentication"] = passiveAuthentication
        container["faceChecks"] = faceChecks.map(Self.text)
        container["startedAt"] = DatabaseTimestamp(startedAt); container["updatedAt"] = DatabaseTimestamp(updatedAt)
        container["finishedAt"] = finishedAt.map(DatabaseTimestamp.init)
    }

    static func text(_ v: JSONValue) -> String { String(decoding: v.serialized(), as: UTF8.self) }
    static func json(_ s: String?) -> JSONValue? { s.flatMap { try? JSONValue.parse(Array($0.utf8)) } }
}

/// Persistence of enrollments and of used activation tokens (shares the daemon's database).
/// Every method is one committed transaction.
public final class EnrollmentStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "enrollment") { t in
            t.column("id", .text).primaryKey()
            t.column("workflow", .text).notNull()
            t.column("kind", .text).notNull()
            t.column("ownerUid", .integer).notNull()
            t.column("state", .text).notNull().indexed()
            t.column("definition", .text).notNull()
            t.column("parameters", .text).notNull()
            t.column("data", .text).notNull()
            t.column("stepIndex", .integer).notNull()
            t.column("completedSteps", .text).notNull()
            t.column("stepState", .text).notNull()
            t.column("failure", .text)
            t.column("outcome", .text)
            t.column("subject", .text)
            t.column("tokenJti", .text)
            t.column("credentialId", .blob)
            t.column("passiveAuthentication", .text)
            t.column("startedAt", .datetime).notNull()
            t.column("updatedAt", .datetime).notNull()
            t.column("finishedAt", .datetime)
        }
        try db.create(table: "activation_token_use") { t in
            t.column("jti", .text).primaryKey()
            t.column("issuer", .text).notNull()
            t.column("enrollmentId", .text).notNull()
            t.column("usedAt", .datetime).notNull()
        }
    }

    /// The enrollment that is active or failed-retryable (at most one), if any.
    public func current() async throws(TesseraError) -> EnrollmentRow? {
        do {
            return try await db.read { db in
                try EnrollmentRow.filter(Column("state") != EnrollmentRow.State.finished.rawValue)
                    .order(Column("startedAt").desc).fetchOne(db)
            }
        } catch { throw storageError(error) }
    }

    /// The most recently started enrollment, whatever its state.
    public func latest() async throws(TesseraError) -> EnrollmentRow? {
        do {
            return try await db.read { db in try EnrollmentRow.order(Column("startedAt").desc).fetchOne(db) }
        } catch { throw storageError(error) }
    }

    /// Records a new enrollment; with `token`, consumes the activation token's `jti` in the same transaction
    /// (ACTIVATION_TOKEN_REPLAYED when it was used before).
    public func insert(_ row: EnrollmentRow, token: (jti: String, issuer: String)?) async throws(TesseraError) {
        try await self.db.uncancelledWrite { db in
            if let token {
                let used =
                    try Bool.fetchOne(
                        db, sql: "SELECT 1 FROM activation_token_use WHERE jti = ?",
                        arguments: [token.jti]) ?? false
                if used { throw TesseraError(.activationTokenReplayed, "this activation token was already used") }
                try db.execute(
                    sql: "INSERT INTO activation_token_use (jti, issuer, enrollmentId, usedAt) VALUES (?, ?, ?, ?)",
                    arguments: [token.jti, token.issuer, row.id, DatabaseTimestamp(row.startedAt)])
            }
            try row.insert(db)
        }
    }

    /// Whether an activation token with this `jti` was used.
    public func tokenUsed(jti: String) async throws(TesseraError) -> Bool {
        do {
            return try await db.read { db in
                try Bool.fetchOne(db, sql: "SELECT 1 FROM activation_token_use WHERE jti = ?", arguments: [jti])
                    ?? false
            }
        } catch { throw storageError(error) }
    }

    /// Saves the whole row (one transaction) unless the stored row is already finished: the first terminal
    /// outcome stays. Returns whether it was saved.
    @discardableResult
    public func save(_ row: EnrollmentRow) async throws(TesseraError) -> Bool {
        try await self.db.uncancelledWrite { db in
            let state = try String.fetchOne(db, sql: "SELECT state FROM enrollment WHERE id = ?", arguments: [row.id])
            guard state != EnrollmentRow.State.finished.rawValue else { return false }
            try row.update(db)
            return true
        }
    }

    /// Finished enrollments, newest first.
    public func finished(limit: Int) async throws(TesseraError) -> [EnrollmentRow] {
        do {
            return try await db.read { db in
                try EnrollmentRow.filter(Column("state") == EnrollmentRow.State.finished.rawValue)
                    .order(Column("finishedAt").desc).limit(limit).fetchAll(db)
            }
        } catch { throw storageError(error) }
    }
}
