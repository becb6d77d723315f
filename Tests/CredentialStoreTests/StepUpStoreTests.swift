import CredentialStore
import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@Suite struct StepUpStoreTests {
    func withStore(_ body: (StepUpStore) async throws -> Void) async throws {
        let path = Scratch.file("su", suffix: ".sqlite")
        defer { for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + s) } }
        try await body(StepUpStore(database: try TesseraDatabase(path: path)))
    }

    func row(_ id: String, startedAt: Double = 1_800_000_000, deadline: Double = 1_800_000_300) -> StepUpRow {
        StepUpRow(
            id: id, ownerUid: 1000, rpId: "example.com", credentialId: Data([1, 2, 3]), request: #"{"rpId":"a"}"#,
            sessionId: "s-1", startedAt: Date(timeIntervalSince1970: startedAt),
            deadline: Date(timeIntervalSince1970: deadline))
    }

    @Test func rowsRoundTripAndAnEndedOneIsNeverOverwritten() async throws {
        try await withStore { store in
            var r = row("a")
            try await store.insert(r)
            #expect(try await store.row(id: "a") == r)
            r.stage = .documentVerified
            r.document = #"{"verdict":"authentic"}"#
            #expect(try await store.save(r))
            r.stage = .succeeded
            r.result = #"{"signature":"x"}"#
            #expect(try await store.save(r))
            var late = r
            late.stage = .failed
            #expect(try await store.save(late) == false)
            #expect(try await store.row(id: "a")?.stage == .succeeded)
            #expect(try await store.row(id: "a")?.result == r.result)
            #expect(try await store.row(id: "missing") == nil)
        }
    }

    @Test func rowsADayPastTheirDeadlineGoWhenAnotherStarts() async throws {
        try await withStore { store in
            try await store.insert(row("old", startedAt: 1_800_000_000, deadline: 1_800_000_300))
            try await store.insert(row("recent", startedAt: 1_800_080_000, deadline: 1_800_080_300))
            try await store.insert(row("new", startedAt: 1_800_000_300 + 86_401, deadline: 1_800_090_000))
            #expect(try await store.row(id: "old") == nil)
            #expect(try await store.row(id: "recent") != nil)
            #expect(try await store.row(id: "new") != nil)
        }
    }
}
