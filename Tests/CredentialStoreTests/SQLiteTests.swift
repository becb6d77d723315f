import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@testable import CredentialStore

/// The store's layer over libsqlite3 (SQLite.swift, Database.swift).
@Suite struct SQLiteTests {
    func database() throws -> TesseraDatabase {
        try TesseraDatabase(path: Scratch.directory("sqlite") + "/tessera.sqlite")
    }

    /// '' and an empty blob stay themselves (a nil buffer pointer would bind NULL), as do NULL and the extremes.
    @Test func valuesRoundTrip() async throws {
        let db = try database()
        let read = try await db.write { c in
            try c.execute("CREATE TABLE t (a, b, c, d, e, f)")
            try c.run(
                "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                ["", Data(), String?.none, Int64.min, "é\u{0}x", Data([0, 0xFF])])
            return try c.first("SELECT typeof(a), typeof(b), typeof(c), d, e, f FROM t") { row in
                [
                    try row.get(0, as: String.self), try row.get(1, as: String.self), try row.get(2, as: String.self),
                    String(try row.get(3, as: Int64.self)), try row.get(4, as: String.self),
                    Hex.encode([UInt8](try row.get(5, as: Data.self))),
                ]
            }
        }
        #expect(read == ["text", "blob", "null", String(Int64.min), "é\u{0}x", "00ff"])
    }

    /// A column read as what it does not hold is an error naming the column, not a made-up value.
    @Test func aMismatchIsAStorageError() async throws {
        let db = try database()
        await #expect(throws: TesseraError.self) {
            try await db.read { c in try c.value("SELECT NULL AS missing", as: Int64.self) }
        }
        let error = await #expect(throws: TesseraError.self) {
            try await db.read { c in try c.value("SELECT 'x' AS word", as: Int64.self) }
        }
        #expect(error?.code == .storageError && error?.message.contains("word") == true)
        let syntax = await #expect(throws: TesseraError.self) { try await db.read { c in try c.run("SELEC 1") } }
        #expect(syntax?.code == .storageError && syntax?.message.contains("SELEC 1") == true)
    }

    /// A body that throws leaves nothing written; the error comes out as it was thrown when it is a TesseraError.
    @Test func aThrowingWriteRollsBack() async throws {
        let db = try database()
        try await db.write { c in try c.execute("CREATE TABLE t (a)") }
        let error = await #expect(throws: TesseraError.self) {
            try await db.write { c in
                try c.run("INSERT INTO t VALUES (1)")
                throw TesseraError(.credentialExists, "no")
            }
        }
        #expect(error?.code == .credentialExists)
        #expect(try await db.read { c in try c.value("SELECT COUNT(*) FROM t", as: Int.self) } == 0)
        try await db.write { c in try c.run("INSERT INTO t VALUES (2)") }
        #expect(try await db.read { c in try c.value("SELECT COUNT(*) FROM t", as: Int.self) } == 1)
    }

    /// The same SQL run again while its cached statement is being stepped gets a statement of its own.
    @Test func aStatementInUseIsNotReused() async throws {
        let db = try database()
        let pairs = try await db.write { c in
            try c.execute("CREATE TABLE t (a); INSERT INTO t VALUES (1), (2), (3)")
            let sql = "SELECT a FROM t WHERE a >= ? ORDER BY a"
            return try c.all(sql, [1]) { row in
                let a: Int = try row.get(0)
                return try c.all(sql, [a]) { inner in try inner.get(0, as: Int.self) }.count
            }
        }
        #expect(pairs == [3, 2, 1])
    }

    /// Writes are serial and reads see every committed write, from many tasks at once.
    @Test func concurrentWritesAndReads() async throws {
        let db = try database()
        try await db.write { c in try c.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b)") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for t in 0..<8 {
                group.addTask {
                    for i in 0..<25 {
                        try await db.write { c in try c.run("INSERT INTO t (b) VALUES (?)", [t * 100 + i]) }
                        let count = try await db.read { c in try c.value("SELECT COUNT(*) FROM t", as: Int.self) }
                        #expect((count ?? 0) >= i + 1)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await db.read { c in try c.value("SELECT COUNT(*) FROM t", as: Int.self) } == 200)
    }

    /// A migration the database lists and this release does not know (a newer release's) is left alone; the known
    /// ones are not run again.
    @Test func unknownMigrationsAreLeftAlone() async throws {
        let path = Scratch.directory("sqlite") + "/tessera.sqlite"
        let db = try TesseraDatabase(path: path)
        try await db.write { c in
            try c.run("INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')")
            try c.execute("CREATE TABLE future (a)")
        }
        let reopened = try TesseraDatabase(path: path)
        let identifiers = try await reopened.read { c in
            try c.all("SELECT identifier FROM grdb_migrations ORDER BY rowid") { row in try row.get(0, as: String.self)
            }
        }
        #expect(identifiers == Migrations.all().map(\.identifier) + ["v99-from-the-future"])
    }

    /// The writer's settings are GRDB's DatabasePool's: WAL, synchronous NORMAL (1), foreign keys on; readers only
    /// read.
    @Test func theConnectionsAreSetUpAsGRDBsWere() async throws {
        let db = try database()
        let writer = try await db.write { c in
            [
                try c.value("PRAGMA journal_mode", as: String.self),
                try c.value("PRAGMA synchronous", as: Int.self).map { String($0) },
                try c.value("PRAGMA foreign_keys", as: Int.self).map { String($0) },
            ]
        }
        #expect(writer == ["wal", "1", "1"])
        let refused = await #expect(throws: TesseraError.self) {
            try await db.read { c in try c.run("CREATE TABLE t (a)") }
        }
        #expect(refused?.code == .storageError)
    }
}
