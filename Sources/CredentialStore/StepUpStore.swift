import Foundation
import GRDB
import TesseraCore

/// One step-up as persisted (docs/LIFECYCLE.md, "Step-up"): what it asked for (without PIN or document access
/// key), the stage reached and, once made, its answer, so that a step-up survives a daemon restart and is
/// answered once.
public struct StepUpRow: Codable, Sendable, Equatable, PersistableRecord, TimestampColumns {
    public static let databaseTableName = "step_up"

    public enum Stage: String, Codable, Sendable, DatabaseValueConvertible {
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

/// Persistence of step-ups (shares the daemon's database). Every method is one committed transaction that a
/// cancelled caller does not abandon.
public final class StepUpStore: Sendable {
    private let db: DatabasePool
    /// How long a step-up's row is kept after its deadline.
    let retention: TimeInterval = 86_400

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "step_up") { t in
            t.column("id", .text).primaryKey()
            t.column("ownerUid", .integer).notNull()
            t.column("rpId", .text).notNull()
            t.column("credentialId", .blob).notNull()
            t.column("request", .text).notNull()
            t.column("sessionId", .text)
            t.column("stage", .text).notNull()
            t.column("document", .text)
            t.column("result", .text)
            t.column("failure", .text)
            t.column("startedAt", .datetime).notNull()
            t.column("updatedAt", .datetime).notNull()
            t.column("deadline", .datetime).notNull().indexed()
        }
    }

    public func row(id: String) async throws(TesseraError) -> StepUpRow? {
        do { return try await db.read { db in try StepUpRow.fetchOne(db, key: id) } } catch {
            throw storageError(error)
        }
    }

    /// Inserts a new step-up; rows whose deadline passed more than a day ago go in the same transaction.
    public func insert(_ row: StepUpRow) async throws(TesseraError) {
        let expired = row.startedAt.addingTimeInterval(-retention)
        try await db.uncancelledWrite { db in
            try StepUpRow.filter(Column("deadline") < DatabaseTimestamp(expired)).deleteAll(db)
            try row.insert(db)
        }
    }

    /// Saves the row unless the stored one is already over; returns whether it did.
    @discardableResult
    public func save(_ row: StepUpRow) async throws(TesseraError) -> Bool {
        try await db.uncancelledWrite { db in
            guard let stored = try StepUpRow.fetchOne(db, key: row.id), !stored.stage.isFinal else { return false }
            try row.update(db)
            return true
        }
    }
}
