import FoundationEssentials
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

extension EnrollmentRow {
    static let columns = """
        id, workflow, kind, ownerUid, state, definition, parameters, data, stepIndex, completedSteps, stepState, \
        failure, outcome, subject, tokenJti, credentialId, passiveAuthentication, faceChecks, startedAt, updatedAt, \
        finishedAt
        """
    static let selectSQL = "SELECT \(columns) FROM enrollment"
    static let insertSQL =
        "INSERT INTO enrollment (\(columns)) VALUES (\(Array(repeating: "?", count: 21).joined(separator: ", ")))"

    init(row: SQLRow) throws {
        id = try row.get(0); workflow = try row.get(1); kind = try row.get(2)
        ownerUid = UInt32(truncatingIfNeeded: try row.get(3, as: Int64.self))
        state = State(rawValue: try row.get(4)) ?? .finished
        definition = Self.json(try row.get(5)) ?? .array([])
        parameters = Self.json(try row.get(6)) ?? .object([:])
        data = Self.json(try row.get(7)) ?? .object([:])
        stepIndex = try row.get(8)
        completedSteps = (Self.json(try row.get(9))?.arrayValue ?? []).compactMap(\.stringValue)
        stepState = Self.json(try row.get(10)) ?? .null
        failure = Self.json(try row.get(11))
        outcome = try row.get(12); subject = try row.get(13); tokenJti = try row.get(14)
        credentialId = try row.get(15); passiveAuthentication = try row.get(16)
        faceChecks = Self.json(try row.get(17))
        startedAt = try row.get(18)
        updatedAt = try row.get(19)
        finishedAt = try row.get(20)
    }

    /// The row's values in the order of `columns`.
    var values: [any SQLArgument] {
        [
            id, workflow, kind, Int64(ownerUid), state.rawValue, Self.text(definition), Self.text(parameters),
            Self.text(data), stepIndex, Self.text(.array(completedSteps.map { .string($0) })), Self.text(stepState),
            failure.map(Self.text), outcome, subject, tokenJti, credentialId, passiveAuthentication,
            faceChecks.map(Self.text), startedAt, updatedAt, finishedAt,
        ]
    }

    static func text(_ v: JSONValue) -> String { String(decoding: v.serialized(), as: UTF8.self) }
    static func json(_ s: String?) -> JSONValue? { s.flatMap { try? JSONValue.parse(Array($0.utf8)) } }
}

/// Persistence of enrollments and of used activation tokens (shares the daemon's database).
/// Every method is one committed transaction.
public final class EnrollmentStore: Sendable {
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v3-enrollment".
    static let migrate = """
        CREATE TABLE "enrollment" ("id" TEXT PRIMARY KEY, "workflow" TEXT NOT NULL, "kind" TEXT NOT NULL, \
        "ownerUid" INTEGER NOT NULL, "state" TEXT NOT NULL, "definition" TEXT NOT NULL, "parameters" TEXT NOT NULL, \
        "data" TEXT NOT NULL, "stepIndex" INTEGER NOT NULL, "completedSteps" TEXT NOT NULL, "stepState" TEXT NOT NULL, \
        "failure" TEXT, "outcome" TEXT, "subject" TEXT, "tokenJti" TEXT, "credentialId" BLOB, \
        "passiveAuthentication" TEXT, "startedAt" DATETIME NOT NULL, "updatedAt" DATETIME NOT NULL, \
        "finishedAt" DATETIME);
        CREATE INDEX "enrollment_on_state" ON "enrollment"("state");
        CREATE TABLE "activation_token_use" ("jti" TEXT PRIMARY KEY, "issuer" TEXT NOT NULL, \
        "enrollmentId" TEXT NOT NULL, "usedAt" DATETIME NOT NULL);
        """

    /// The enrollment that is active or failed-retryable (at most one), if any.
    public func current() async throws(TesseraError) -> EnrollmentRow? {
        try await db.read { c in
            try c.first(
                EnrollmentRow.selectSQL + " WHERE state != ? ORDER BY startedAt DESC LIMIT 1",
                [EnrollmentRow.State.finished.rawValue], EnrollmentRow.init(row:))
        }
    }

    /// The most recently started enrollment, whatever its state.
    public func latest() async throws(TesseraError) -> EnrollmentRow? {
        try await db.read { c in
            try c.first(EnrollmentRow.selectSQL + " ORDER BY startedAt DESC LIMIT 1", [], EnrollmentRow.init(row:))
        }
    }

    /// Records a new enrollment; with `token`, consumes the activation token's `jti` in the same transaction
    /// (ACTIVATION_TOKEN_REPLAYED when it was used before).
    public func insert(_ row: EnrollmentRow, token: (jti: String, issuer: String)?) async throws(TesseraError) {
        try await db.write { c in
            if let token {
                let used: Bool? = try c.value("SELECT 1 FROM activation_token_use WHERE jti = ?", [token.jti])
                if used != nil {
                    throw TesseraError(.activationTokenReplayed, "this activation token was already used")
                }
                try c.run(
                    "INSERT INTO activation_token_use (jti, issuer, enrollmentId, usedAt) VALUES (?, ?, ?, ?)",
                    [token.jti, token.issuer, row.id, row.startedAt])
            }
            try c.run(
                EnrollmentRow.insertSQL, row.values)
        }
    }

    /// Whether an activation token with this `jti` was used.
    public func tokenUsed(jti: String) async throws(TesseraError) -> Bool {
        try await db.read { c in
            try c.value("SELECT 1 FROM activation_token_use WHERE jti = ?", [jti], as: Bool.self) != nil
        }
    }

    /// Saves the whole row (one transaction) unless the stored row is already finished: the first terminal
    /// outcome stays. Returns whether it was saved.
    @discardableResult
    public func save(_ row: EnrollmentRow) async throws(TesseraError) -> Bool {
        try await db.write { c in
            let state: String? = try c.value("SELECT state FROM enrollment WHERE id = ?", [row.id])
            guard state != EnrollmentRow.State.finished.rawValue else { return false }
            guard state != nil else { throw TesseraError(.storageError, "no enrollment \(row.id) to save") }
            try c.run(
                """
                UPDATE enrollment SET id = ?, workflow = ?, kind = ?, ownerUid = ?, state = ?, definition = ?, \
                parameters = ?, data = ?, stepIndex = ?, completedSteps = ?, stepState = ?, failure = ?, outcome = ?, \
                subject = ?, tokenJti = ?, credentialId = ?, passiveAuthentication = ?, faceChecks = ?, startedAt = ?, \
                updatedAt = ?, finishedAt = ? WHERE id = ?
                """, row.values + [row.id])
            return true
        }
    }

    /// Finished enrollments, newest first.
    public func finished(limit: Int) async throws(TesseraError) -> [EnrollmentRow] {
        try await db.read { c in
            try c.all(
                EnrollmentRow.selectSQL + " WHERE state = ? ORDER BY finishedAt DESC LIMIT ?",
                [EnrollmentRow.State.finished.rawValue, limit], EnrollmentRow.init(row:))
        }
    }
}
