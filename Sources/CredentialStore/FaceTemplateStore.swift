import Foundation
import GRDB
import TesseraCore

/// A face template an enrollment kept (FACE_MATCHING with `keepTemplate`), for MID_SELFIE_MATCHING in a later
/// enrollment of the same person: the matcher's template (never an image), the identity binding of the
/// document it was matched against (keyed, salted hashes: `Enrollment.IdentityBinding`), and the matcher's name.
public struct FaceTemplateRecord: Codable, Sendable, Equatable, PersistableRecord, FetchableRecord, TimestampColumns {
    public static let databaseTableName = "face_template"

    public var id: String
    /// `IdentityBinding.text` of the person.
    public var identityBinding: String
    public var mediaType: String
    public var template: Data
    public var matcher: String
    public var enrollmentId: String
    public var createdAt: Date

    public init(
        id: String, identityBinding: String, mediaType: String, template: [UInt8], matcher: String,
        enrollmentId: String, createdAt: Date
    ) {
        self.id = id; self.identityBinding = identityBinding; self.mediaType = mediaType
        self.template = Data(template); self.matcher = matcher; self.enrollmentId = enrollmentId
        self.createdAt = createdAt
    }
}

/// The kept face templates (shares the daemon's database).
public final class FaceTemplateStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    /// "v13-face-templates": the template table, and the enrollment audit's face checks.
    static func migrate(_ db: Database) throws {
        try db.create(table: "face_template") { t in
            t.column("id", .text).primaryKey()
            t.column("identityBinding", .text).notNull()
            t.column("mediaType", .text).notNull()
            t.column("template", .blob).notNull()
            t.column("matcher", .text).notNull()
            t.column("enrollmentId", .text).notNull()
            t.column("createdAt", .datetime).notNull()
        }
        try db.alter(table: "enrollment") { t in t.add(column: "faceChecks", .text) }
    }

    /// Keeps `record`.
    public func add(_ record: FaceTemplateRecord) async throws(TesseraError) {
        do { try await db.write { db in try record.insert(db) } } catch { throw storageError(error) }
    }

    /// Every kept template, newest first (the caller finds the person's by their identity binding).
    public func all() async throws(TesseraError) -> [FaceTemplateRecord] {
        do {
            return try await db.read { db in
                try FaceTemplateRecord.order(Column("createdAt").desc).fetchAll(db)
            }
        } catch { throw storageError(error) }
    }
}
