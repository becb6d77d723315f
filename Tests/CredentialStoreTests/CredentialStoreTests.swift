import CredentialStore
import Foundation
import Testing

@Suite struct CredentialStoreTests {
    /// A database in a temp file; the caller removes it with `removeDB` (`defer`).
    func tempDB() throws -> (TesseraDatabase, String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cs-\(UUID().uuidString).sqlite").path
        return (try TesseraDatabase(path: path), path)
    }

    func removeDB(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    func record(_ id: UInt8, rp: String = "example.com", user: UInt8 = 1) -> CredentialRecord {
        CredentialRecord(credentialId: Data([id, 1, 2]), rpId: rp, userId: Data([user]), userName: "u\(user)",
                         userDisplayName: "U", tokenId: "p11-x", backend: "pkcs11", keyHandle: Data([9, id]),
                         publicKey: Data([0xA5]), createdAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(id)))
    }

    @Test func insertGetListDelete() async throws {
        let (db, path) = try tempDB()
        defer { removeDB(path) }
        let store = CredentialStore(database: db)
        try await store.insert(record(1))
        try await store.insert(record(2, rp: "other.example", user: 2))
        try await store.insert(record(3, user: 2))
        #expect(try await store.credential(id: [1, 1, 2])?.userName == "u1")
        #expect(try await store.credential(id: [7]) == nil)
        #expect(try await store.list().map(\.credentialId) == [Data([1, 1, 2]), Data([2, 1, 2]), Data([3, 1, 2])])
        #expect(try await store.list(rpId: "example.com").count == 2)
        #expect(try await store.list(rpId: "example.com", userId: [2]).map(\.credentialId) == [Data([3, 1, 2])])
        #expect(try await store.delete(id: [1, 1, 2]))
        #expect(try await !store.delete(id: [1, 1, 2]))
        #expect(try await store.list().count == 2)
    }

    @Test func duplicateIdIsAStorageError() async throws {
        let (db, path) = try tempDB()
        defer { removeDB(path) }
        let store = CredentialStore(database: db)
        try await store.insert(record(1))
        await #expect(throws: (any Error).self) { try await store.insert(record(1)) }
    }

    @Test func counterReservationOnlyRisesAndSurvivesReopen() async throws {
        let (db, path) = try tempDB()
        defer { removeDB(path) }
        let store = CredentialStore(database: db)
        try await store.insert(record(1))
        try await store.reserveCounter(id: [1, 1, 2], upTo: 1024)
        try await store.reserveCounter(id: [1, 1, 2], upTo: 10)
        #expect(try await store.credential(id: [1, 1, 2])?.counterReserved == 1024)
        let reopened = CredentialStore(database: try TesseraDatabase(path: path))
        let r = try await reopened.credential(id: [1, 1, 2])
        #expect(r?.counterReserved == 1024)
        #expect(r?.lastUsedAt != nil)
    }

    @Test func recordUseWritesSeveralCredentialsAndNeverMovesOneBack() async throws {
        let (db, path) = try tempDB()
        defer { removeDB(path) }
        let store = CredentialStore(database: db)
        try await store.insert(record(1))
        try await store.insert(record(2))
        let early = Date(timeIntervalSince1970: 1_800_000_000), late = early.addingTimeInterval(90)
        try await store.recordUse([[1, 1, 2]: late, [2, 1, 2]: early])
        #expect(try await store.credential(id: [1, 1, 2])?.lastUsedAt == late)
        #expect(try await store.credential(id: [2, 1, 2])?.lastUsedAt == early)
        try await store.recordUse([[1, 1, 2]: early])
        #expect(try await store.credential(id: [1, 1, 2])?.lastUsedAt == late)
    }
}
