import FoundationEssentials
import TesseraCore

/// A face template an enrollment kept (FACE_MATCHING with `keepTemplate`), for MID_SELFIE_MATCHING in a later
/// enrollment of the same person: the matcher's template (never an image), the identity binding of the
/// document it was matched against (keyed, salted hashes: `Enrollment.IdentityBinding`), and the matcher's name.
public struct FaceTemplateRecord: Codable, Sendable, Equatable {
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
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v13-face-templates": the template table, and the enrollment audit's face checks.
    static let migrate = """
        CREATE TABLE "face_template" ("id" TEXT PRIMARY KEY, "identityBinding" TEXT NOT NULL, \
        "mediaType" TEXT NOT NULL, "template" BLOB NOT NULL, "matcher" TEXT NOT NULL, "enrollmentId" TEXT NOT NULL, \
        "createdAt" DATETIME NOT NULL);
        ALTER TABLE "enrollment" ADD COLUMN "faceChecks" TEXT;
        """

    /// Keeps `record`.
    public func add(_ record: FaceTemplateRecord) async throws(TesseraError) {
        try await db.write { c in
            try c.run(
                """
                INSERT INTO face_template (id, identityBinding, mediaType, template, matcher, enrollmentId, createdAt)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    record.id, record.identityBinding, record.mediaType, record.template, record.matcher,
                    record.enrollmentId, record.createdAt,
                ])
        }
    }

    /// Every kept template, newest first (the caller finds the person's by their identity binding).
    public func all() async throws(TesseraError) -> [FaceTemplateRecord] {
        try await db.read { c in
            try c.all(
                """
                SELECT id, identityBinding, mediaType, template, matcher, enrollmentId, createdAt FROM face_template
                ORDER BY createdAt DESC
                """
            ) { row in
                var record = FaceTemplateRecord(
                    id: try row.get(0), identityBinding: try row.get(1), mediaType: try row.get(2), template: [],
                    matcher: try row.get(4), enrollmentId: try row.get(5), createdAt: try row.get(6))
                record.template = try row.get(3)
                return record
            }
        }
    }
}
