import CredentialStore
import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@Suite struct MDocRegistrationStoreTests {
    static func record(_ id: String, owner: UInt32, validUntil: Date, invalidation: Date? = nil)
        -> MDocRegistrationRecord
    {
        MDocRegistrationRecord(
            documentIdentifier: id, docType: "org.iso.18013.5.1.mDL", issuerSigned: [0xA0], tokenId: "pkcs11-x",
            keyHandle: [1, 2, 3], supportedAuthorityKeyIdentifiers: [[0x0A, 0x1B], [0xFF]],
            invalidationDate: invalidation, validUntil: validUntil, ownerUid: owner)
    }

    @Test func registrationsPersistPerOwnerAndIdentifiersAreUnique() async throws {
        let path = Scratch.file("tessera-mdoc", suffix: ".sqlite")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = MDocRegistrationStore(database: try TesseraDatabase(path: path))
        let later = Date(timeIntervalSinceNow: 3_600)
        try await store.insert(Self.record("a", owner: 1000, validUntil: later))
        try await store.insert(Self.record("b", owner: 1001, validUntil: later))
        do {
            try await store.insert(Self.record("a", owner: 1001, validUntil: later))
            Issue.record("a duplicate documentIdentifier was stored")
        } catch {
            #expect(error.code == .mdocRegistrationExists)
        }
        let reopened = MDocRegistrationStore(database: try TesseraDatabase(path: path))
        #expect(try await reopened.registrations(ownerUid: 1000).map(\.documentIdentifier) == ["a"])
        #expect(try await reopened.registrations(ownerUid: nil).count == 2)
        let a = try #require(try await reopened.registration("a"))
        #expect(a.authorityKeyIdentifiers == [[0x0A, 0x1B], [0xFF]])
        #expect(a.ownerUid == 1000 && a.keyHandle == Data([1, 2, 3]))
        #expect(try await reopened.delete("a"))
        #expect(try await reopened.delete("a") == false)
        #expect(try await reopened.registration("a") == nil)
    }

    @Test func expiredRegistrationsAreNotOffered() {
        let now = Date()
        #expect(Self.record("a", owner: 0, validUntil: now + 60).offered(at: now))
        #expect(!Self.record("a", owner: 0, validUntil: now - 60).offered(at: now))
        #expect(!Self.record("a", owner: 0, validUntil: now + 60, invalidation: now - 1).offered(at: now))
        #expect(Self.record("a", owner: 0, validUntil: now + 60, invalidation: now + 1).offered(at: now))
    }
}
