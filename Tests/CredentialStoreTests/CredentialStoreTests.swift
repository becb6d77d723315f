import CredentialStore
import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@Suite struct CredentialStoreTests {
    /// A database in a temp file; the caller removes it with `removeDB` (`defer`).
    func tempDB() throws -> (TesseraDatabase, String) {
        let path = Scratch.file("cs", suffix: ".sqlite")
        return (try TesseraDatabase(path: path), path)
    }

    func removeDB(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    func record(_ id: UInt8, rp: String = "example.com", user: UInt8 = 1) -> CredentialRecord {
        CredentialRecord(
            credentialId: Data([id, 1, 2]), rpId: rp, userId: Data([user]), userName: "u\(user)",
            userDisplayName: "U", tokenId: "p11-x", backend: "pkcs11", keyHandle: Data([9, id]),
            publicKey: Data([0xA5]), createdAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(id)))
    }

    /// A credential keeps the uid that created it; `chown` hands it on with an audit event; a replacement by the
    /// provisioning check only ever touches the same owner's credentials.
    @Test func ownersAreKeptChangedAndRespected() async throws {
        let (db, path) = try tempDB()
        defer { removeDB(path) }
        let store = CredentialStore(database: db)
        var alice = record(1)
        alice.ownerUid = 1000
        try await store.insert(alice)
        #expect(try await store.credential(id: [1, 1, 2])?.ownerUid == 1000)
        #expect(try await store.chown(id: [1, 1, 2], to: 1001, actor: "uid:0")?.ownerUid == 1001)
        #expect(try await store.credential(id: [1, 1, 2])?.ownerUid == 1001)
        #expect(try await store.chown(id: [7], to: 1, actor: "uid:0") == nil)
        let events = try await store.events(credentialId: [1, 1, 2])
        #expect(events.last?.reason == "owner uid 1000 -> 1001")
        // Same rp and user, another owner: the replacing insert is not shown (nor can replace) uid 1001's credential.
        var bob = record(2)
        bob.ownerUid = 1002
        let seen = Locked<[Data]>([])
        _ = try await store.insert(
            bob,
            admit: { existing in
                seen.withLock { $0 = existing.map(\.credentialId) }
                return existing.map { [UInt8]($0.credentialId) }
            }, actor: "test", reason: nil)
        #expect(seen.withLock { $0 }.isEmpty)
        #expect(try await store.credential(id: [1, 1, 2])?.state == .active)
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

@Suite struct CredentialLifecycleStoreTests {
    func record(_ id: UInt8, user: UInt8 = 1) -> CredentialRecord {
        CredentialRecord(
            credentialId: Data([id, 1, 2]), rpId: "example.com", userId: Data([user]), userName: "u",
            userDisplayName: "U", tokenId: "p11-x", backend: "pkcs11", keyHandle: Data([9, id]),
            publicKey: Data([0xA5]), createdAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(id)))
    }

    func withStore(_ body: (CredentialStore) async throws -> Void) async throws {
        let path = Scratch.file("cl", suffix: ".sqlite")
        defer { for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + s) } }
        try await body(CredentialStore(database: try TesseraDatabase(path: path)))
    }

    @Test func transitionsAreAuditedAndFinalStatesStay() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            #expect(try await store.credential(id: [1, 1, 2])?.state == .active)
            let s = try await store.transition(ids: [[1, 1, 2]], to: .suspended, actor: "uid:0", reason: "lost badge")
            #expect(s[0].changed && s[0].record.state == .suspended)
            #expect(
                try await store.transition(ids: [[1, 1, 2]], to: .suspended, actor: "uid:0", reason: nil)[0].changed
                    == false)
            _ = try await store.transition(ids: [[1, 1, 2]], to: .active, actor: "uid:0", reason: "found")
            _ = try await store.transition(ids: [[1, 1, 2]], to: .deactivated, actor: "uid:1", reason: "left")
            for target in [CredentialState.active, .suspended] {
                await #expect(throws: TesseraError.self) {
                    try await store.transition(ids: [[1, 1, 2]], to: target, actor: "uid:0", reason: nil)
                }
            }
            #expect(try await store.credential(id: [1, 1, 2])?.state == .deactivated)
            let events = try await store.events(credentialId: [1, 1, 2])
            #expect(events.map(\.toState) == ["suspended", "active", "deactivated"])
            #expect(events.map(\.reason) == ["lost badge", "found", "left"])
            #expect(events.last?.actor == "uid:1" && events.last?.fromState == "active")
        }
    }

    @Test func aBatchFailsWhole() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            try await store.insert(record(2))
            _ = try await store.transition(ids: [[2, 1, 2]], to: .deactivated, actor: "uid:0", reason: nil)
            do {
                _ = try await store.transition(
                    ids: [[1, 1, 2], [2, 1, 2]], to: .suspended, actor: "uid:0", reason: nil)
                Issue.record("a batch with a deactivated credential was applied")
            } catch {
                #expect((error as Error as? TesseraError)?.code == .credentialDeactivated)
            }
            #expect(try await store.credential(id: [1, 1, 2])?.state == .active)
        }
    }

    @Test func commandJtiIsSingleUse() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            _ = try await store.transition(
                ids: [[1, 1, 2]], to: .suspended, actor: "issuer:x", reason: nil,
                command: (jti: "c-1", issuer: "x"))
            do {
                _ = try await store.transition(
                    ids: [[1, 1, 2]], to: .active, actor: "issuer:x", reason: nil,
                    command: (jti: "c-1", issuer: "x"))
                Issue.record("a replayed command was applied")
            } catch {
                #expect((error as Error as? TesseraError)?.code == .lifecycleCommandReplayed)
            }
            #expect(try await store.credential(id: [1, 1, 2])?.state == .suspended)
        }
    }

    /// A `jti` is unique per issuer (issue #27): another issuer's command with the same id is applied.
    @Test func commandJtiIsUniquePerIssuer() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            _ = try await store.transition(
                ids: [[1, 1, 2]], to: .suspended, actor: "issuer:x", reason: nil,
                command: (jti: "c-1", issuer: "x"))
            _ = try await store.transition(
                ids: [[1, 1, 2]], to: .active, actor: "issuer:y", reason: nil,
                command: (jti: "c-1", issuer: "y"))
            #expect(try await store.credential(id: [1, 1, 2])?.state == .active)
            do {
                _ = try await store.transition(
                    ids: [[1, 1, 2]], to: .suspended, actor: "issuer:y", reason: nil,
                    command: (jti: "c-1", issuer: "y"))
                Issue.record("a replayed command was applied")
            } catch {
                #expect((error as Error as? TesseraError)?.code == .lifecycleCommandReplayed)
            }
            #expect(try await store.credential(id: [1, 1, 2])?.state == .active)
        }
    }

    @Test func insertReplacingMarksTheOthers() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            try await store.insert(record(2))
            _ = try await store.transition(ids: [[2, 1, 2]], to: .deactivated, actor: "uid:0", reason: nil)
            let replaced = try await store.insert(
                record(3),
                admit: { existing in
                    #expect(existing.map(\.credentialId) == [Data([1, 1, 2]), Data([2, 1, 2])])
                    return [[1, 1, 2], [2, 1, 2]]
                }, actor: "uid:5", reason: nil)
            #expect(replaced.map(\.record.state) == [.replaced, .replaced])
            #expect(try await store.list().map(\.state) == [.replaced, .replaced, .active])
            #expect(try await store.events(credentialId: [3, 1, 2]).map(\.toState) == ["active"])
            #expect(try await store.events(credentialId: [2, 1, 2]).last?.reason?.hasPrefix("replaced by") == true)
            #expect(
                try await store.delete(
                    id: [1, 1, 2],
                    event: CredentialEvent(
                        credentialId: Data([1, 1, 2]), at: Date(), fromState: "replaced", toState: "deleted",
                        actor: "uid:0", reason: nil)))
            #expect(try await store.events(credentialId: [1, 1, 2]).last?.toState == "deleted")
        }
    }

    @Test func insertRefusedByItsCheckWritesNothing() async throws {
        try await withStore { store in
            try await store.insert(record(1))
            await #expect(throws: TesseraError.self) {
                try await store.insert(
                    record(2),
                    admit: { existing throws(TesseraError) in
                        // Sees the user's credential at the relying party in the same transaction: refuses.
                        if !existing.isEmpty { throw TesseraError(.credentialExists, "exists") }
                        return []
                    }, actor: "uid:5", reason: nil)
            }
            #expect(try await store.list().map(\.credentialId) == [Data([1, 1, 2])])
            #expect(try await store.events(credentialId: [2, 1, 2]).isEmpty)
        }
    }
}

@Suite struct CTAPCredentialStoreTests {
    @Test func hmacSecretIsKeptPerCredential() async throws {
        let path = Scratch.file("ctap", suffix: ".sqlite")
        defer { CredentialStoreTests().removeDB(path) }
        let store = CTAPCredentialStore(database: try TesseraDatabase(path: path))
        let with = CTAPCredentialOptions(credentialId: Data([1]), discoverable: false, credProtect: 2, hmacSecret: true)
        let without = CTAPCredentialOptions(credentialId: Data([2]), discoverable: true, credProtect: 1)
        try await store.save(with)
        try await store.save(without)
        // Read back from a reopened database.
        let reopened = CTAPCredentialStore(database: try TesseraDatabase(path: path))
        #expect(try await reopened.options([Data([1]), Data([2])]) == [Data([1]): with, Data([2]): without])
        #expect(without.hmacSecret == false)
    }
}
