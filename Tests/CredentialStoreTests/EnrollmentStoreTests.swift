import CredentialStore
import FoundationEssentials
import TesseraCore
import Testing

@Suite struct EnrollmentStoreTests {
    let helpers = CredentialStoreTests()

    func row(_ id: String, startedAt seconds: Double) -> EnrollmentRow {
        EnrollmentRow(
            id: id, workflow: "badge", kind: "activationToken", ownerUid: 1000,
            definition: [["key": "EMAIL_INFO", "kind": "EMAIL_INFO", "settings": [:]]],
            parameters: ["userVerification": "preferred"], subject: "employee-4711", tokenJti: "jti-\(id)",
            startedAt: Date(timeIntervalSince1970: seconds))
    }

    @Test func rowsRoundTripAndOnlyUnfinishedOnesAreCurrent() async throws {
        let (db, path) = try helpers.tempDB()
        defer { helpers.removeDB(path) }
        let store = EnrollmentStore(database: db)
        #expect(try await store.current() == nil)
        var first = row("a", startedAt: 1_700_000_000)
        try await store.insert(first, token: (jti: "jti-a", issuer: "https://backend.example"))
        #expect(try await store.current() == first)

        first.data = ["email": "anna@example.com"]
        first.completedSteps = ["EMAIL_INFO"]
        first.stepIndex = 1
        first.stepState = ["otp": ["attemptsLeft": 4]]
        first.credentialId = Data([1, 2, 3])
        try await store.save(first)
        #expect(try await store.current() == first)

        first.state = .finished
        first.outcome = "success"
        first.data = [:]
        first.finishedAt = Date(timeIntervalSince1970: 1_700_000_100)
        try await store.save(first)
        #expect(try await store.current() == nil)
        #expect(try await store.latest() == first)

        let second = row("b", startedAt: 1_700_000_200)
        try await store.insert(second, token: nil)
        #expect(try await store.current()?.id == "b")
        #expect(try await store.latest()?.id == "b")
        #expect(try await store.finished(limit: 10).map(\.id) == ["a"])
    }

    /// The first terminal outcome stays: a later save of the same enrollment (another outcome, or a step's
    /// result that lost the race) is refused.
    @Test func aFinishedRowIsNeverOverwritten() async throws {
        let (db, path) = try helpers.tempDB()
        defer { helpers.removeDB(path) }
        let store = EnrollmentStore(database: db)
        var r = row("a", startedAt: 1_700_000_000)
        try await store.insert(r, token: nil)
        var finished = r
        finished.state = .finished
        finished.outcome = "success"
        finished.finishedAt = Date(timeIntervalSince1970: 1_700_000_100)
        #expect(try await store.save(finished))

        r.completedSteps = ["EMAIL_INFO"]
        r.stepIndex = 1
        #expect(try await !store.save(r))
        var cancelled = finished
        cancelled.outcome = "cancelled"
        #expect(try await !store.save(cancelled))
        #expect(try await store.latest() == finished)
        #expect(try await store.current() == nil)
    }

    @Test func anActivationTokenIsConsumedOnceAndOnlyWithItsEnrollment() async throws {
        let (db, path) = try helpers.tempDB()
        defer { helpers.removeDB(path) }
        let store = EnrollmentStore(database: db)
        #expect(try await !store.tokenUsed(jti: "t1"))
        try await store.insert(row("a", startedAt: 1), token: (jti: "t1", issuer: "iss"))
        #expect(try await store.tokenUsed(jti: "t1"))
        await #expect(throws: TesseraError.self) {
            try await store.insert(row("b", startedAt: 2), token: (jti: "t1", issuer: "iss"))
        }
        do {
            try await store.insert(row("c", startedAt: 3), token: (jti: "t1", issuer: "iss"))
            Issue.record("a replayed token was accepted")
        } catch {
            #expect(error.code == .activationTokenReplayed)
        }
        // Neither replay left an enrollment behind.
        #expect(try await store.latest()?.id == "a")
        // A failed insert (duplicate id) does not consume its token either.
        await #expect(throws: TesseraError.self) {
            try await store.insert(row("a", startedAt: 4), token: (jti: "t2", issuer: "iss"))
        }
        #expect(try await !store.tokenUsed(jti: "t2"))
    }
}
