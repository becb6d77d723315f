import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@testable import CredentialStore

#if canImport(Glibc)
    import Glibc
#endif

/// Databases written by the GRDB store (Fixtures/README.md) open and carry on: their `grdb_migrations` rows are
/// honoured, every row reads back as it was written, and what is written now reads back in an old store's form.
@Suite struct FixtureTests {
    static let fixtures = String(#filePath.prefix(upTo: #filePath.lastIndex(of: "/")!)) + "/Fixtures"

    /// A copy of fixture `name` in a scratch directory (opening a database writes to it).
    static func copy(_ name: String) throws -> String {
        let path = Scratch.directory("fixture") + "/tessera.sqlite"
        try FileManager.default.copyItem(atPath: fixtures + "/" + name, toPath: path)
        return path
    }

    static func strings(_ db: TesseraDatabase, _ sql: String, _ arguments: [any SQLArgument] = []) async throws
        -> [String]
    {
        nonisolated(unsafe) let arguments = arguments
        return try await db.read { c in try c.all(sql, arguments) { row in try row.get(0, as: String.self) } }
    }

    static let identifiers = Migrations.all().map(\.identifier)

    @Test func everyRowOfTheGRDBDatabaseReadsBack() async throws {
        let db = try TesseraDatabase(path: try Self.copy("tessera-grdb.sqlite"))
        #expect(try await Self.strings(db, "SELECT identifier FROM grdb_migrations ORDER BY rowid") == Self.identifiers)

        let store = CredentialStore(database: db)
        let c = FixtureRows.credentials
        #expect(try await store.list() == [c[1], c[0], c[2]])
        for record in c { #expect(try await store.credential(id: [UInt8](record.credentialId)) == record) }
        #expect(try await store.list(rpId: "example.com", userId: [0x00, 0x01]) == [c[0], c[2]])
        #expect(
            try await store.summaries(rpId: "badges.example").map(\.stateChangedAt) == [c[1].stateChangedAt])
        let events = try await store.events(credentialId: nil)
        #expect(
            events == [
                CredentialEvent(
                    credentialId: c[1].credentialId, at: c[1].stateChangedAt!, fromState: "active",
                    toState: "suspended", actor: "issuer:\(FixtureRows.command.issuer)", reason: "lost"),
                CredentialEvent(
                    credentialId: c[2].credentialId, at: c[2].createdAt, fromState: nil, toState: "active",
                    actor: "uid:1000", reason: "enrolled"),
                CredentialEvent(
                    credentialId: Data([0x04]), at: FixtureRows.at(800_000_300), fromState: "active",
                    toState: "deleted", actor: "uid:0", reason: nil),
            ])
        #expect(try await store.auditMarker() == 3)
        let replay = await #expect(throws: TesseraError.self) {
            try await store.transition(
                ids: [[0x02]], to: .active, actor: "x", reason: nil, command: FixtureRows.command)
        }
        #expect(replay?.code == .lifecycleCommandReplayed)

        let ids = FixtureRows.ctapOptions.map(\.credentialId)
        #expect(
            try await store.ctapOptions.options(ids + [Data([0x02])])
                == Dictionary(uniqueKeysWithValues: FixtureRows.ctapOptions.map { ($0.credentialId, $0) }))

        let piv = PIVSlotStore(database: db)
        #expect(try await piv.slots(tokenId: "piv-0001") == FixtureRows.pivSlots)
        #expect(try await piv.slot(tokenId: "piv-0001", keyHandle: [0x9A]) == FixtureRows.pivSlots[0])

        let enrollments = EnrollmentStore(database: db)
        let e = FixtureRows.enrollments
        #expect(try await enrollments.latest() == e[1])
        #expect(try await enrollments.current() == e[1])
        #expect(try await enrollments.finished(limit: 10) == [e[0]])
        #expect(try await enrollments.tokenUsed(jti: "tok-1"))

        let recovery = RecoveryStore(database: db)
        for r in FixtureRows.recovery { #expect(try await recovery.attempt(id: r.id) == r) }
        let stepUps = StepUpStore(database: db)
        for s in FixtureRows.stepUps { #expect(try await stepUps.row(id: s.id) == s) }
        #expect(try await MDocRegistrationStore(database: db).registrations(ownerUid: nil) == FixtureRows.mdocs)
        #expect(try await SSHKeyOwnerStore(database: db).owners() == ["pkcs11-3f2a": [Data([0x55, 0x01]): 1000]])
        #expect(try await FaceTemplateStore(database: db).all() == FixtureRows.faceTemplates)
        #expect(
            try await KeyPurposeStore(database: db).purposes() == [
                "pkcs11-3f2a": [
                    Data([0xAA, 0xBB]): [.passkey], Data([0xCC]): [.passkey], Data([0x55, 0x01]): [.ssh],
                    Data([0x11, 0x22]): [.mdocDevice], Data([0x33]): [.mdocDevice], Data([0x77]): [.badgeIssuer],
                ],
                "piv-0001": [Data([0x9A]): [.passkey]],
            ])
    }

    /// What is written now is what GRDB wrote: the same date text (and so the same order in SQL), integers,
    /// blobs; and the old rows stay beside the new ones.
    @Test func theGRDBDatabaseCarriesOn() async throws {
        let path = try Self.copy("tessera-grdb.sqlite")
        let db = try TesseraDatabase(path: path)
        let store = CredentialStore(database: db)
        #expect(
            try await Self.strings(db, "SELECT createdAt FROM credential ORDER BY createdAt") == [
                "1997-10-31 14:13:19.500", "2026-05-09 06:13:20.123", "2026-05-09 06:16:40.001",
            ])
        var added = FixtureRows.credentials[0]
        added.credentialId = Data([0x05])
        added.createdAt = FixtureRows.at(800_000_000.124)
        added.lastUsedAt = nil
        try await store.insert(added)
        try await store.recordUse([[0x02]: FixtureRows.at(800_000_600.5)])
        #expect(
            try await Self.strings(
                db,
                "SELECT hex(credentialId) || ' ' || createdAt || ' ' || typeof(counterReserved) FROM credential "
                    + "ORDER BY createdAt")
                == [
                    "02 1997-10-31 14:13:19.500 integer", "0100FF7F 2026-05-09 06:13:20.123 integer",
                    "05 2026-05-09 06:13:20.124 integer", "0303 2026-05-09 06:16:40.001 integer",
                ])
        #expect(
            try await Self.strings(db, "SELECT lastUsedAt FROM credential WHERE credentialId = x'02'")
                == ["2026-05-09 06:23:20.500"])
        _ = try await store.transition(ids: [[0x02]], to: .active, actor: "uid:0", reason: nil)
        let reopened = CredentialStore(database: try TesseraDatabase(path: path))
        #expect(try await reopened.credential(id: [0x05]) == added)
        #expect(try await reopened.credential(id: [0x02])?.state == .active)
        #expect(try await reopened.events(credentialId: [0x02]).count == 2)
        #expect(try await Self.strings(db, "SELECT identifier FROM grdb_migrations").count == Self.identifiers.count)
    }

    /// An older release's database gets the migrations it lacks, in order, recorded where GRDB recorded them;
    /// its rows carry over into the new columns and tables.
    @Test func anOlderReleasesDatabaseGetsTheMissingMigrations() async throws {
        let path = try Self.copy("tessera-grdb-v8.sqlite")
        let db = try TesseraDatabase(path: path)
        #expect(try await Self.strings(db, "SELECT identifier FROM grdb_migrations ORDER BY rowid") == Self.identifiers)
        let store = CredentialStore(database: db)
        let old = try #require(try await store.credential(id: [0x0A]))
        #expect(old.ownerUid == geteuid() && old.counterReserved == 7 && old.createdAt == FixtureRows.at(700_000_000.5))
        // The command used before "v11" is still refused for its issuer, and only for it.
        let replay = await #expect(throws: TesseraError.self) {
            try await store.transition(
                ids: [[0x0A]], to: .suspended, actor: "x", reason: nil, command: ("old-cmd", "https://old.example"))
        }
        #expect(replay?.code == .lifecycleCommandReplayed)
        _ = try await store.transition(
            ids: [[0x0A]], to: .suspended, actor: "x", reason: nil, command: ("old-cmd", "https://other.example"))
        #expect(try await store.ctapOptions.options([Data([0x0A])])[Data([0x0A])]?.hmacSecret == false)
        let enrollment = try #require(try await EnrollmentStore(database: db).current())
        #expect(enrollment.id == "old-enr" && enrollment.faceChecks == nil)
        #expect(try await RecoveryStore(database: db).attempt(id: "old-rec")?.ownerUid == nil)
        try await KeyPurposeStore(database: db).record(FixtureRows.badgeIssuerKey)
        try await FaceTemplateStore(database: db).add(FixtureRows.faceTemplates[0])
    }

    /// A new database gets the schema GRDB's migrations made, table for table and index for index; so does an
    /// older release's once migrated.
    @Test func migrationsMakeGRDBsSchema() async throws {
        func schema(_ path: String) async throws -> Set<String> {
            let db = try TesseraDatabase(path: path)
            return Set(
                try await Self.strings(
                    db, "SELECT type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '') FROM sqlite_master"))
        }
        let fixture = try await schema(try Self.copy("tessera-grdb.sqlite"))
        // The fixture was written as root: "v9-credential-owner"'s default owner is uid 0.
        let fresh = try await schema(Scratch.directory("fresh") + "/tessera.sqlite").map {
            $0.replacing(
                #""ownerUid" INTEGER NOT NULL DEFAULT \#(geteuid())"#, with: #""ownerUid" INTEGER NOT NULL DEFAULT 0"#)
        }
        #expect(Set(fresh).symmetricDifference(fixture) == [])
        let migrated = try await schema(try Self.copy("tessera-grdb-v8.sqlite")).map {
            $0.replacing(
                #""ownerUid" INTEGER NOT NULL DEFAULT \#(geteuid())"#, with: #""ownerUid" INTEGER NOT NULL DEFAULT 0"#)
        }
        #expect(Set(migrated).symmetricDifference(fixture) == [])
    }

    /// The same calls through today's store write what the GRDB store wrote, value for value (dates as the same
    /// text, integers, blobs, NULLs): every table of a new database written as the fixture was equals the fixture's,
    /// but for the time `recordDeviceKey` stamps its rows with.
    @Test func theStoresWriteWhatGRDBWrote() async throws {
        func dump(_ path: String) async throws -> [String: [String]] {
            let db = try TesseraDatabase(path: path)
            var out: [String: [String]] = [:]
            for table in try await Self.strings(db, "SELECT name FROM sqlite_master WHERE type = 'table'") {
                let columns = try await Self.strings(db, "SELECT name FROM pragma_table_info(?)", [table])
                let kept = columns.filter { !(table == "key_purpose" && $0 == "createdAt") }
                let values = kept.map { "quote(\"\($0)\")" }.joined(separator: " || '|' || ")
                out[table] = try await Self.strings(db, "SELECT \(values) FROM \"\(table)\" ORDER BY rowid")
            }
            return out
        }
        let path = Scratch.directory("written") + "/tessera.sqlite"
        try await FixtureRows.write(into: try TesseraDatabase(path: path))
        let written = try await dump(path)
        let fixture = try await dump(try Self.copy("tessera-grdb.sqlite"))
        #expect(written.keys.sorted() == fixture.keys.sorted())
        for (table, rows) in fixture { #expect(written[table] == rows, "\(table)") }
        #expect(fixture["credential"]?.count == 3 && fixture["credential_event"]?.count == 3)
    }
}
