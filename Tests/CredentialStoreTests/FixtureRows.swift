import CredentialStore
import FoundationEssentials
import TesseraCore

/// The rows of `Fixtures/tessera-grdb.sqlite`, a database written by the GRDB store (README there): the fixture
/// test reads every one of them back through today's store and compares it with these values.
enum FixtureRows {
    /// Instants with milliseconds, as the store keeps them (the `Date` nearest to a whole number of milliseconds).
    static func at(_ secondsSinceReference: Double) -> Date {
        Date(timeIntervalSinceReferenceDate: secondsSinceReference)
    }

    static let credentials: [CredentialRecord] = [
        CredentialRecord(
            credentialId: Data([0x01, 0x00, 0xFF, 0x7F]), rpId: "example.com", userId: Data([0x00, 0x01]),
            userName: "anna", userDisplayName: "Anna Ångström ✓", tokenId: "pkcs11-3f2a", backend: "pkcs11",
            keyHandle: Data([0xAA, 0xBB]), publicKey: Data([0xA5, 0x01, 0x02]), counterReserved: 2048,
            createdAt: at(800_000_000.123), lastUsedAt: at(800_000_500.999), ownerUid: 1000),
        CredentialRecord(
            credentialId: Data([0x02]), rpId: "badges.example", userId: Data([0x42]), userName: "badge-7",
            userDisplayName: "Badge 7", tokenId: "piv-0001", backend: "piv", keyHandle: Data([0x9A]),
            publicKey: Data([0xA5]), counterReserved: 0, createdAt: at(-100_000_000.5), state: .suspended,
            stateChangedAt: at(800_000_100), identityBinding: #"{"v":1,"doc":"x"}"#, ownerUid: 0),
        CredentialRecord(
            credentialId: Data([0x03, 0x03]), rpId: "example.com", userId: Data([0x00, 0x01]), userName: "anna",
            userDisplayName: "", tokenId: "pkcs11-3f2a", backend: "pkcs11", keyHandle: Data([0xCC]),
            publicKey: Data([0xA5, 0x03]), createdAt: at(800_000_200.001), ownerUid: 1000),
    ]

    /// The lifecycle command applied to credential 2 (suspended), by issuer.
    static let command = (jti: "cmd-1", issuer: "https://backend.example")

    static let ctapOptions: [CTAPCredentialOptions] = [
        CTAPCredentialOptions(
            credentialId: Data([0x01, 0x00, 0xFF, 0x7F]), discoverable: true, credProtect: 3, hmacSecret: true),
        CTAPCredentialOptions(credentialId: Data([0x03, 0x03]), discoverable: false, credProtect: 1),
    ]

    static let pivSlots: [PIVSlotRecord] = [
        PIVSlotRecord(
            tokenId: "piv-0001", slot: 0x82, state: .used, keyHandle: Data([0x9A]), updatedAt: at(800_000_000)),
        PIVSlotRecord(tokenId: "piv-0001", slot: 0x83, state: .free, keyHandle: nil, updatedAt: at(800_000_001.5)),
    ]

    static var enrollments: [EnrollmentRow] {
        var finished = EnrollmentRow(
            id: "enr-1", workflow: "badge", kind: "activationToken", ownerUid: 1000,
            definition: [["key": "EMAIL_INFO", "kind": "EMAIL_INFO", "settings": ["x": 1]]],
            parameters: ["userVerification": "preferred", "n": 1.5], subject: "employee-4711", tokenJti: "tok-1",
            startedAt: at(800_001_000))
        finished.state = .finished
        finished.outcome = "success"
        finished.data = [:]
        finished.stepIndex = 1
        finished.completedSteps = ["EMAIL_INFO"]
        finished.credentialId = Data([0x01, 0x00, 0xFF, 0x7F])
        finished.passiveAuthentication = "passed"
        finished.faceChecks = [["step": "FACE_MATCHING", "decision": "match", "score": 0.93]]
        finished.updatedAt = at(800_001_060.25)
        finished.finishedAt = at(800_001_060.25)
        var active = EnrollmentRow(
            id: "enr-2", workflow: "remote-face", kind: "remote", ownerUid: 0, definition: [], parameters: [:],
            subject: nil, tokenJti: nil, startedAt: at(800_002_000))
        active.stepState = ["otp": ["attemptsLeft": 4]]
        active.failure = ["code": "FACE_NO_MATCH"]
        active.state = .failedRetryable
        return [finished, active]
    }

    static var recovery: [RecoveryAttemptRow] {
        var matched = RecoveryAttemptRow(
            id: "rec-1", jti: "rjti-1", issuer: "https://backend.example", subject: "AAE", rpId: "example.com",
            startedAt: at(800_003_000), expiresAt: at(800_003_600), ownerUid: 1000)
        matched.stage = .matched
        matched.plan = #"{"credentialId":"AQ","keyHandle":"qrs"}"#
        matched.binding = #"{"v":1}"#
        matched.updatedAt = at(800_003_010.75)
        var failed = RecoveryAttemptRow(
            id: "rec-2", jti: "rjti-2", issuer: "https://backend.example", subject: "QQ", rpId: "example.com",
            startedAt: at(800_003_100), expiresAt: at(800_003_700))
        failed.stage = .failed
        failed.failure = "DOCUMENT_MISMATCH"
        failed.credentialId = Data([0x09])
        return [matched, failed]
    }

    static var stepUps: [StepUpRow] {
        var done = StepUpRow(
            id: "su-1", ownerUid: 1000, rpId: "example.com", credentialId: Data([0x01, 0x00, 0xFF, 0x7F]),
            request: #"{"rpId":"example.com"}"#, sessionId: "s-1", startedAt: at(800_004_000),
            deadline: at(800_004_300))
        done.stage = .succeeded
        done.document = #"{"verdict":"authentic"}"#
        done.result = #"{"signature":"x"}"#
        done.updatedAt = at(800_004_100.5)
        let waiting = StepUpRow(
            id: "su-2", ownerUid: 1001, rpId: "example.com", credentialId: Data([0x03, 0x03]), request: "{}",
            sessionId: nil, startedAt: at(800_004_200), deadline: at(800_004_500))
        return [done, waiting]
    }

    static let mdocs: [MDocRegistrationRecord] = [
        MDocRegistrationRecord(
            documentIdentifier: "mdl-1", docType: "org.iso.18013.5.1.mDL", issuerSigned: [0xA2, 0x01, 0x02],
            tokenId: "pkcs11-3f2a", keyHandle: [0x11, 0x22], supportedAuthorityKeyIdentifiers: [[0x0A, 0x1B], [0xFF]],
            invalidationDate: nil, validUntil: at(900_000_000), ownerUid: 1000, createdAt: at(800_005_000)),
        MDocRegistrationRecord(
            documentIdentifier: "mdl-2", docType: "org.iso.18013.5.1.mDL", issuerSigned: [0xA0], tokenId: "pkcs11-3f2a",
            keyHandle: [0x33], supportedAuthorityKeyIdentifiers: [], invalidationDate: at(850_000_000.001),
            validUntil: at(900_000_000), ownerUid: 1001, createdAt: at(800_005_100)),
    ]

    static let sshOwners: [SSHKeyOwnerRecord] = [
        SSHKeyOwnerRecord(tokenId: "pkcs11-3f2a", keyHandle: [0x55, 0x01], ownerUid: 1000, createdAt: at(800_006_000))
    ]

    static let faceTemplates: [FaceTemplateRecord] = [
        FaceTemplateRecord(
            id: "ft-1", identityBinding: #"{"v":1,"h":"abc"}"#, mediaType: "application/vnd.tessera.dlib-descriptor",
            template: [UInt8](repeating: 7, count: 512), matcher: "tessera-face-match", enrollmentId: "enr-1",
            createdAt: at(800_001_060.25))
    ]

    /// The badge CA's key, recorded with its purpose (besides the mdoc device keys `recordDeviceKey` records).
    static let badgeIssuerKey = KeyPurposeRecord(
        tokenId: "pkcs11-3f2a", keyHandle: [0x77], purpose: .badgeIssuer, createdAt: at(800_007_000))

    /// Writes the rows through the stores' public methods, as the fixture was written.
    static func write(into db: TesseraDatabase) async throws {
        let store = CredentialStore(database: db)
        let c = credentials
        try await store.insert(c[0])
        var second = c[1]
        second.state = .active
        second.stateChangedAt = nil
        try await store.insert(second)
        _ = try await store.transition(
            ids: [[UInt8](c[1].credentialId)], to: .suspended, actor: "issuer:\(command.issuer)",
            reason: "lost", command: command, at: c[1].stateChangedAt!)
        _ = try await store.insert(c[2], admit: { _ in [] }, actor: "uid:1000", reason: "enrolled")
        var gone = c[2]
        gone.credentialId = Data([0x04])
        try await store.insert(gone)
        try await store.delete(
            id: [0x04],
            event: CredentialEvent(
                credentialId: Data([0x04]), at: at(800_000_300), fromState: "active", toState: "deleted",
                actor: "uid:0", reason: nil))
        for o in ctapOptions { try await store.ctapOptions.save(o) }
        let piv = PIVSlotStore(database: db)
        for s in pivSlots { try await piv.save(s) }
        let enrollmentStore = EnrollmentStore(database: db)
        let e = enrollments
        try await enrollmentStore.insert(e[0], token: (jti: "tok-1", issuer: "https://backend.example"))
        try await enrollmentStore.insert(e[1], token: nil)
        let recoveryStore = RecoveryStore(database: db)
        for r in recovery {
            _ = try await recoveryStore.insert(r, since: at(0), maxPerUser: 9, maxPerStation: 9)
        }
        let stepUpStore = StepUpStore(database: db)
        for s in stepUps { try await stepUpStore.insert(s) }
        let mdocStore = MDocRegistrationStore(database: db)
        for m in mdocs {
            try await mdocStore.recordDeviceKey(tokenId: m.tokenId, keyHandle: [UInt8](m.keyHandle))
            try await mdocStore.insert(m)
        }
        let ssh = SSHKeyOwnerStore(database: db)
        for o in sshOwners { try await ssh.record(o) }
        let faces = FaceTemplateStore(database: db)
        for f in faceTemplates { try await faces.add(f) }
        try await KeyPurposeStore(database: db).record(badgeIssuerKey)
    }
}
