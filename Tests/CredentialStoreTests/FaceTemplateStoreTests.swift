import CredentialStore
import FoundationEssentials
import TesseraCore
import Testing

/// "v13-face-templates": kept face templates, and the enrollment audit's face checks.
@Suite struct FaceTemplateStoreTests {
    let helpers = CredentialStoreTests()

    @Test func templatesAreKeptNewestFirst() async throws {
        let (db, path) = try helpers.tempDB()
        defer { helpers.removeDB(path) }
        let store = FaceTemplateStore(database: db)
        #expect(try await store.all().isEmpty)
        let older = FaceTemplateRecord(
            id: "t1", identityBinding: "{\"v\":1}", mediaType: "application/vnd.tessera.dlib-descriptor",
            template: [UInt8](repeating: 7, count: 512), matcher: "tessera-face-match", enrollmentId: "e1",
            createdAt: Date(timeIntervalSince1970: 1_700_000_000))
        var newer = older
        newer.id = "t2"
        newer.enrollmentId = "e2"
        newer.createdAt = Date(timeIntervalSince1970: 1_700_000_500)
        try await store.add(older)
        try await store.add(newer)
        #expect(try await store.all() == [newer, older])
        // An id is kept once.
        await #expect(throws: TesseraError.self) { try await store.add(older) }
    }

    @Test func faceChecksRoundTripWithTheEnrollment() async throws {
        let (db, path) = try helpers.tempDB()
        defer { helpers.removeDB(path) }
        let store = EnrollmentStore(database: db)
        var row = EnrollmentRow(
            id: "f", workflow: "face", kind: "remote", ownerUid: 1000, definition: [], parameters: [:], subject: nil,
            tokenJti: nil, startedAt: Date(timeIntervalSince1970: 1_700_000_000))
        try await store.insert(row, token: nil)
        #expect(try await store.current()?.faceChecks == nil)
        row.faceChecks = [
            [
                "step": "FACE_MATCHING", "matcher": "tessera-face-match", "decision": "noMatch", "score": 0.17,
                "challenge": ["turnLeft"],
            ]
        ]
        try await store.save(row)
        #expect(try await store.current() == row)
    }
}
