import FoundationEssentials
import TesseraCore

/// One step-up as persisted (docs/LIFECYCLE.md, "Step-up"): what it asked for (without PIN or document access
/// key), the stage reached and, once made, its answer, so that a step-up survives a daemon restart and is
/// answered once.
public struct StepUpRow: Codable, Sendable, Equatable {
    public enum Stage: String, Codable, Sendable, SQLArgument {
        /// Started; the document is not verified yet.
        case waitingForDocument
        /// The document was read, found authentic and matched (`document`), or none was required.
        case documentVerified
        /// The assertion was made (`result`).
        case succeeded
        case failed, cancelled

        /// Whether the step-up is over.
        public var isFinal: Bool { self == .succeeded || self == .failed || self == .cancelled }
    }

    public var id: String
    public var ownerUid: UInt32
    public var rpId: String
    /// The credential chosen when the step-up started.
    public var credentialId: Data
    /// The request's parameters (JSON text) without PIN and document access key.
    public var request: String
    public var sessionId: String?
    public var stage: Stage
    /// The document's verdict and match (JSON text), once verified.
    public var document: String?
    /// The answer of a succeeded step-up (JSON text).
    public var result: String?
    /// The error code of a failed or cancelled step-up.
    public var failure: String?
    public var startedAt: Date
    public var updatedAt: Date
    /// When the step-up expires: the challenge's `expiresAt`, or the end of the wait for the document.
    public var deadline: Date

    public init(
        id: String, ownerUid: UInt32, rpId: String, credentialId: Data, request: String, sessionId: String?,
        startedAt: Date, deadline: Date
    ) {
        self.id = id; self.ownerUid = ownerUid; self.rpId = rpId; self.credentialId = credentialId
        self.request = request; self.sessionId = sessionId; self.stage = .waitingForDocument
        self.startedAt = startedAt; self.updatedAt = startedAt; self.deadline = deadline
    }
}

extension StepUpRow {
    static let columns = """
        id, ownerUid, rpId, credentialId, request, sessionId, stage, document, result, failure, startedAt, updatedAt, \
        deadline
        """

    init(row: SQLRow) throws {
        id = try row.get(0); ownerUid = try row.get(1); rpId = try row.get(2); credentialId = try row.get(3)
        request = try row.get(4); sessionId = try row.get(5); stage = try row.get(6); document = try row.get(7)
        result = try row.get(8); failure = try row.get(9); startedAt = try row.get(10); updatedAt = try row.get(11)
        deadline = try row.get(12)
    }

    /// The row's values in the order of `columns`.
    var values: [any SQLArgument] {
        [
            id, ownerUid, rpId, credentialId, request, sessionId, stage, document, result, failure, startedAt,
            updatedAt, deadline,
        ]
    }
}

/// Persistence of step-ups (shares the daemon's database). Every method is one committed transaction that a
/// cancelled caller does not abandon.
public final class StepUpStore: Sendable {
    private let db: TesseraDatabase
    /// How long a step-up's row is kept after its deadline.
    let retention: TimeInterval = 86_400

    public init(database: TesseraDatabase) { db = database }

    /// "v6-step-up".
    static let migrate = """
        CREATE TABLE "step_up" ("id" TEXT PRIMARY KEY, "ownerUid" INTEGER NOT NULL, "rpId" TEXT NOT NULL, \
        "credentialId" BLOB NOT NULL, "request" TEXT NOT NULL, "sessionId" TEXT, "stage" TEXT NOT NULL, \
        "document" TEXT, "result" TEXT, "failure" TEXT, "startedAt" DATETIME NOT NULL, "updatedAt" DATETIME NOT NULL, \
        "deadline" DATETIME NOT NULL);
        CREATE INDEX "step_up_on_deadline" ON "step_up"("deadline");
        """

    public func row(id: String) async throws(TesseraError) -> StepUpRow? {
        try await db.read { c in try Self.fetch(c, id: id) }
    }

    private static func fetch(_ c: SQLConnection, id: String) throws -> StepUpRow? {
        try c.first("SELECT \(StepUpRow.columns) FROM step_up WHERE id = ?", [id], StepUpRow.init(row:))
    }

    /// Inserts a new step-up; rows whose deadline passed more than a day ago go in the same transaction.
    public func insert(_ row: StepUpRow) async throws(TesseraError) {
        let expired = row.startedAt.addingTimeInterval(-retention)
        try await db.write { c in
            try c.run("DELETE FROM step_up WHERE deadline < ?", [expired])
            try c.run(
                "INSERT INTO step_up (\(StepUpRow.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row.values)
        }
    }

    /// Saves the row unless the stored one is already over; returns whether it did.
    @discardableResult
    public func save(_ row: StepUpRow) async throws(TesseraError) -> Bool {
        try await db.write { c in
            guard let stored = try Self.fetch(c, id: row.id), !stored.stage.isFinal else { return false }
            try c.run(
                """
                UPDATE step_up SET id = ?, ownerUid = ?, rpId = ?, credentialId = ?, request = ?, sessionId = ?, \
                stage = ?, document = ?, result = ?, failure = ?, startedAt = ?, updatedAt = ?, deadline = ? WHERE id = ?
                """, row.values + [row.id])
            return true
        }
    }
}
