import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon's SQLite database (WAL) with its migrations. Other stores share it.
///
/// One writer connection on a thread of its own runs every write as a `BEGIN IMMEDIATE` transaction, one at a
/// time; reads run on reader connections on threads of their own, concurrently with the writer (WAL). A caller
/// suspends while its job runs, so no event loop or cooperative thread ever waits for the disk, and a job once
/// queued runs to its end even when the calling task is cancelled.
public final class TesseraDatabase: Sendable {
    private let writer: Worker
    private let readers: [Worker]
    /// Jobs queued or running per reader; a read goes to the least busy one.
    private let readerLoad: Locked<[Int]>

    /// Reader connections (and threads): reads rarely overlap on a 2-core machine.
    static let readerCount = 2

    /// Opens (creating if needed) `path` and applies every migration not applied yet. The writer commits with
    /// `synchronous = NORMAL`, as GRDB's `DatabasePool` did (it set NORMAL over the FULL asked for before it): a
    /// commit survives the daemon's crash; a power loss may take the last commits, never the database's consistency.
    public init(path: String) throws(TesseraError) {
        do {
            let connection = try SQLConnection(path: path, create: true)
            try Self.configure(connection)
            try connection.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
            try Migrations.apply(connection)
            writer = Worker(name: "tessera.db.writer", connection)
            var readers: [Worker] = []
            for i in 0..<Self.readerCount {
                let reader = try SQLConnection(path: path, create: false)
                try Self.configure(reader)
                try reader.execute("PRAGMA query_only = ON")
                readers.append(Worker(name: "tessera.db.reader\(i)", reader))
            }
            self.readers = readers
            readerLoad = Locked([Int](repeating: 0, count: readers.count))
        } catch {
            throw TesseraError(.storageError, "cannot open database \(path): \(error)")
        }
    }

    private static func configure(_ connection: SQLConnection) throws(SQLiteError) {
        try connection.execute("PRAGMA foreign_keys = ON")
    }

    /// Runs `body` in one write transaction on the writer's thread: committed when it returns, rolled back when it
    /// throws. A `TesseraError` it throws comes out unchanged; any other error as STORAGE_ERROR.
    @discardableResult
    func write<T: Sendable>(_ body: @escaping @Sendable (SQLConnection) throws -> T) async throws(TesseraError) -> T {
        try await writer.run { c in try c.transaction(immediate: true) { try body(c) } }
    }

    /// Runs `body` in one read transaction (a consistent snapshot) on a reader's thread.
    func read<T: Sendable>(_ body: @escaping @Sendable (SQLConnection) throws -> T) async throws(TesseraError) -> T {
        let index = readerLoad.withLock { load in
            let i = load.indices.min { load[$0] < load[$1] } ?? 0
            load[i] += 1
            return i
        }
        defer { readerLoad.withLock { $0[index] -= 1 } }
        return try await readers[index].run { c in try c.transaction(immediate: false) { try body(c) } }
    }
}

/// A connection and the one thread that uses it.
private final class Worker: Sendable {
    private let thread: DedicatedThread
    private let connection: SQLConnection

    init(name: String, _ connection: SQLConnection) {
        thread = DedicatedThread(name: name)
        self.connection = connection
    }

    func run<T: Sendable>(_ body: @escaping @Sendable (SQLConnection) throws -> T) async throws(TesseraError) -> T {
        let connection = self.connection
        return try await thread.run { () throws(TesseraError) -> T in
            do { return try body(connection) } catch { throw storageError(error) }
        }
    }
}

func storageError(_ error: any Error) -> TesseraError {
    if let e = error as? TesseraError { return e }
    return TesseraError(.storageError, "database: \(error)")
}

/// The schema's migrations, in order, under the identifiers GRDB's `DatabaseMigrator` recorded them with in
/// `grdb_migrations` (a database from a GRDB release carries on: only the ones it lacks are applied). The SQL is the
/// SQL GRDB's schema builder ran, so a new database has the same schema as an old one.
enum Migrations {
    static func all() -> [(identifier: String, sql: String)] {
        [
            ("v1-credentials", CredentialStore.migrateV1),
            ("v2-piv-slots", PIVSlotStore.migrate),
            ("v3-enrollment", EnrollmentStore.migrate),
            ("ctap-credential-options", CTAPCredentialStore.migrate),
            ("v4-credential-lifecycle", CredentialStore.migrateLifecycle + RecoveryStore.migrate),
            ("v5-recovery-owner", RecoveryStore.migrateOwner),
            ("v6-step-up", StepUpStore.migrate),
            ("v7-ctap-hmac-secret", CTAPCredentialStore.migrateHMACSecret),
            ("v8-mdoc-registrations", MDocRegistrationStore.migrate),
            ("v9-credential-owner", CredentialStore.migrateOwner(uid: geteuid())),
            ("v10-ssh-key-owner", SSHKeyOwnerStore.migrate),
            ("v11-lifecycle-command-jti-per-issuer", CredentialStore.migrateCommandUsePerIssuer),
            ("v13-face-templates", FaceTemplateStore.migrate),
            ("v14-key-purpose", KeyPurposeStore.migrate),
        ]
    }

    /// Applies, in order, each migration `grdb_migrations` does not list, each in its own transaction with its row
    /// there. Identifiers the table lists and this release does not know (a newer release's) are left alone.
    static func apply(_ c: SQLConnection) throws {
        try c.execute("CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        let applied = Set(
            try c.all("SELECT identifier FROM grdb_migrations") { row in try row.get(0, as: String.self) })
        for (identifier, sql) in all() where !applied.contains(identifier) {
            try c.transaction(immediate: true) {
                try c.execute(sql)
                try c.run("INSERT INTO grdb_migrations (identifier) VALUES (?)", [identifier])
            }
        }
    }
}
