import Foundation
import GRDB
import TesseraCore

/// The daemon's SQLite database (WAL, synchronous=FULL) with its migrations. Other stores share it.
public final class TesseraDatabase: Sendable {
    public let writer: DatabasePool

    /// Opens (creating if needed) `path` and applies every migration.
    public init(path: String) throws(TesseraError) {
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA foreign_keys = ON")
        }
        do {
            writer = try DatabasePool(path: path, configuration: config)
            try Self.migrator.migrate(writer)
        } catch {
            throw TesseraError(.storageError, "cannot open database \(path): \(error)")
        }
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1-credentials") { db in
            try db.create(table: "credential") { t in
                t.column("credentialId", .blob).primaryKey()
                t.column("rpId", .text).notNull().indexed()
                t.column("userId", .blob).notNull()
                t.column("userName", .text).notNull()
                t.column("userDisplayName", .text).notNull()
                t.column("tokenId", .text).notNull()
                t.column("backend", .text).notNull()
                t.column("keyHandle", .blob).notNull()
                t.column("publicKey", .blob).notNull()
                t.column("counterReserved", .integer).notNull().defaults(to: 0)
                t.column("createdAt", .datetime).notNull()
                t.column("lastUsedAt", .datetime)
            }
            try db.create(index: "credential_rp_user", on: "credential", columns: ["rpId", "userId"])
        }
        m.registerMigration("v2-piv-slots", migrate: PIVSlotStore.migrate)
        m.registerMigration("v3-enrollment", migrate: EnrollmentStore.migrate)
        m.registerMigration("ctap-credential-options", migrate: CTAPCredentialStore.migrate)
        m.registerMigration("v4-credential-lifecycle", migrate: CredentialStore.migrateLifecycle)
        m.registerMigration("v5-recovery-owner", migrate: RecoveryStore.migrateOwner)
        m.registerMigration("v6-step-up", migrate: StepUpStore.migrate)
        m.registerMigration("v7-ctap-hmac-secret", migrate: CTAPCredentialStore.migrateHMACSecret)
        m.registerMigration("v8-mdoc-registrations", migrate: MDocRegistrationStore.migrate)
        m.registerMigration("v9-credential-owner", migrate: CredentialStore.migrateOwner)
        m.registerMigration("v10-ssh-key-owner", migrate: SSHKeyOwnerStore.migrate)
        m.registerMigration(
            "v11-lifecycle-command-jti-per-issuer", migrate: CredentialStore.migrateCommandUsePerIssuer)
        m.registerMigration("v13-face-templates", migrate: FaceTemplateStore.migrate)
        m.registerMigration("v14-key-purpose", migrate: KeyPurposeStore.migrate)
        return m
    }
}

extension DatabasePool {
    /// Runs a write that must not be abandoned when the calling task is cancelled (a step's completion, a
    /// recovery attempt's stage): it runs to its end in a detached task.
    func uncancelledWrite<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(TesseraError)
        -> T
    {
        let pool = self
        do { return try await Task.detached { try await pool.write(body) }.value } catch { throw storageError(error) }
    }
}

func storageError(_ error: any Error) -> TesseraError {
    if let e = error as? TesseraError { return e }
    return TesseraError(.storageError, "database: \(error)")
}
