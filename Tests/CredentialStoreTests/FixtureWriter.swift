import Foundation
import GRDB
import TesseraCore
import Testing

@testable import CredentialStore

/// Writes the GRDB-era fixtures into $FIXTURE_OUT (see Fixtures/README.md); not run otherwise.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["FIXTURE_OUT"] != nil)) struct FixtureWriter {
    let out = ProcessInfo.processInfo.environment["FIXTURE_OUT"] ?? ""

    @Test func writeCurrent() async throws {
        let path = out + "/tessera-grdb.sqlite"
        let db = try TesseraDatabase(path: path)
        let store = CredentialStore(database: db)
        let c = FixtureRows.credentials
        try await store.insert(c[0])
        var second = c[1]
        second.state = .active
        second.stateChangedAt = nil
        try await store.insert(second)
        _ = try await store.transition(
            ids: [[UInt8](c[1].credentialId)], to: .suspended, actor: "issuer:\(FixtureRows.command.issuer)",
            reason: "lost", command: FixtureRows.command, at: c[1].stateChangedAt!)
        _ = try await store.insert(c[2], admit: { _ in [] }, actor: "uid:1000", reason: "enrolled")
        var gone = c[2]
        gone.credentialId = Data([0x04])
        try await store.insert(gone)
        try await store.delete(
            id: [0x04],
            event: CredentialEvent(
                credentialId: Data([0x04]), at: FixtureRows.at(800_000_300), fromState: "active", toState: "deleted",
                actor: "uid:0", reason: nil))
        for o in FixtureRows.ctapOptions { try await store.ctapOptions.save(o) }
        let piv = PIVSlotStore(database: db)
        for s in FixtureRows.pivSlots { try await piv.save(s) }
        let enrollments = EnrollmentStore(database: db)
        let e = FixtureRows.enrollments
        try await enrollments.insert(e[0], token: (jti: "tok-1", issuer: "https://backend.example"))
        try await enrollments.insert(e[1], token: nil)
        let recovery = RecoveryStore(database: db)
        for r in FixtureRows.recovery {
            #expect(try await recovery.insert(r, since: FixtureRows.at(0), maxPerUser: 9, maxPerStation: 9) == nil)
        }
        let stepUps = StepUpStore(database: db)
        for s in FixtureRows.stepUps { try await stepUps.insert(s) }
        let mdocs = MDocRegistrationStore(database: db)
        for m in FixtureRows.mdocs {
            try await mdocs.recordDeviceKey(tokenId: m.tokenId, keyHandle: [UInt8](m.keyHandle))
            try await mdocs.insert(m)
        }
        let ssh = SSHKeyOwnerStore(database: db)
        for o in FixtureRows.sshOwners { try await ssh.record(o) }
        let faces = FaceTemplateStore(database: db)
        for f in FixtureRows.faceTemplates { try await faces.add(f) }
        try await KeyPurposeStore(database: db).record(FixtureRows.badgeIssuerKey)
    }

    /// A database of an older release: the migrations up to "v8-mdoc-registrations", rows written as that
    /// release's columns were.
    @Test func writeV8() throws {
        let path = out + "/tessera-grdb-v8.sqlite"
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA foreign_keys = ON")
        }
        let pool = try DatabasePool(path: path, configuration: config)
        try TesseraDatabase.migrator.migrate(pool, upTo: "v8-mdoc-registrations")
        let t = DatabaseTimestamp(FixtureRows.at(700_000_000.5))
        try pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO credential (credentialId, rpId, userId, userName, userDisplayName, tokenId, backend,
                        keyHandle, publicKey, counterReserved, createdAt, lastUsedAt, state, stateChangedAt)
                    VALUES (?, 'old.example', ?, 'olga', 'Olga', 'pkcs11-old', 'pkcs11', ?, ?, 7, ?, NULL, 'active', NULL)
                    """, arguments: [Data([0x0A]), Data([0x01]), Data([0x0B]), Data([0xA5]), t])
            try db.execute(
                sql:
                    "INSERT INTO lifecycle_command_use (jti, issuer, usedAt) VALUES ('old-cmd', 'https://old.example', ?)",
                arguments: [t])
            try db.execute(
                sql:
                    "INSERT INTO ctap_credential (credentialId, discoverable, credProtect, hmacSecret) VALUES (?, 1, 2, 0)",
                arguments: [Data([0x0A])])
            try db.execute(
                sql: """
                    INSERT INTO enrollment (id, workflow, kind, ownerUid, state, definition, parameters, data, stepIndex,
                        completedSteps, stepState, startedAt, updatedAt)
                    VALUES ('old-enr', 'badge', 'remote', 1000, 'active', '[]', '{}', '{}', 0, '[]', 'null', ?, ?)
                    """, arguments: [t, t])
            try db.execute(
                sql: """
                    INSERT INTO recovery_attempt (id, jti, issuer, subject, rpId, stage, startedAt, updatedAt, expiresAt)
                    VALUES ('old-rec', 'old-rjti', 'https://old.example', 'AQ', 'old.example', 'started', ?, ?, ?)
                    """, arguments: [t, t, t])
        }
    }

    /// GRDB's own `Date` text and reading for the instants of `DatabaseTimestampTests` and a few other forms.
    @Test func writeTimestamps() throws {
        var lines: [String] = []
        func bits(_ d: Double?) -> String { d.map { String($0.bitPattern, radix: 16) } ?? "-" }
        for t in DatabaseTimestampTests.instants {
            let value = Date(timeIntervalSince1970: t).databaseValue
            let text = try #require(String.fromDatabaseValue(value))
            lines.append(
                "instant\t\(bits(t))\t\(text)\t\(bits(Date.fromDatabaseValue(value)?.timeIntervalSinceReferenceDate))")
        }
        for text in [
            "2026-11-27", "2026-11-27 10:11", "2026-11-27T10:11:12.345Z", "2026-11-27 10:11:12", "x",
            "2026-11-27T10:11", "2026-11-27 10:11:12.3", "2026-11-27 10:11:12.345678", "2026-02-29 00:00:00.000",
        ] {
            lines.append(
                "text\t-\t\(text)\t\(bits(Date.fromDatabaseValue(text.databaseValue)?.timeIntervalSinceReferenceDate))")
        }
        for n in [1_700_000_000.5, 0, -86_400.25] {
            let v = DatabaseValue(value: n)!
            lines.append("number\t\(bits(n))\t-\t\(bits(Date.fromDatabaseValue(v)?.timeIntervalSinceReferenceDate))")
        }
        let v = DatabaseValue(value: Int64(1_700_000_000))!
        lines.append("integer\t1700000000\t-\t\(bits(Date.fromDatabaseValue(v)?.timeIntervalSinceReferenceDate))")
        try (lines.joined(separator: "\n") + "\n").write(
            toFile: out + "/grdb-timestamps.tsv", atomically: true, encoding: .utf8)
    }
}
