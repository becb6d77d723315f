import CredentialStore
import Documents
import FoundationEssentials
import KeyStores
import Logging
import MRZ
import Ownership
import Passkeys
import TesseraCore
import TesseraRuntime

/// A verified recovery token's claims (docs/LIFECYCLE.md, "Recovery").
public struct RecoveryToken: Sendable, Equatable {
    public var issuer: String
    public var jti: String
    /// The user handle: the UTF-8 bytes of `sub`.
    public var subject: String
    public var rpId: String
    public var userName: String
    public var userDisplayName: String
    public var expiresAt: Date
    /// The person, by attributes …
    public var expected: ExpectedAttributes?
    /// … or by the identity binding of one of the user's credentials.
    public var bindingOf: [UInt8]?
}

/// Verifies recovery tokens against the configured issuers (`enrollment.issuers`) for this station.
public struct RecoveryTokenVerifier: Sendable {
    public var issuers: [IssuerKey]
    public var stationId: String?
    public var leeway: TimeInterval = 60

    static let acceptedTypes: Set<String> = ["tessera-recovery+jwt", "application/tessera-recovery+jwt"]

    public init(issuers: [IssuerKey], stationId: String?) {
        self.issuers = issuers
        self.stationId = stationId
    }

    /// `RECOVERY_TOKEN_INVALID` (structure, `typ`, signature, audience, claims) or `RECOVERY_ATTEMPT_EXPIRED`.
    public func verify(_ compact: String, now: Date) throws(TesseraError) -> RecoveryToken {
        var codes = JWTVerifier.Codes.all(.recoveryTokenInvalid)
        codes.expired = .recoveryAttemptExpired
        let verified = try JWTVerifier(
            issuers: issuers, stationId: stationId, leeway: leeway, types: Self.acceptedTypes,
            typeName: "tessera-recovery+jwt", stationless: false, codes: codes
        ).verify(compact, now: now)
        let c = verified.claims
        guard let sub = c["sub"]?.stringValue, !sub.isEmpty, sub.utf8.count <= 64 else {
            throw Self.invalid("the token's 'sub' must be 1 to 64 bytes")
        }
        guard let rpId = c["rpId"]?.stringValue, !rpId.isEmpty else { throw Self.invalid("the token has no 'rpId'") }
        let user = c["user"]?.objectValue ?? [:]
        let name = user["name"]?.stringValue ?? sub
        var expected: ExpectedAttributes?
        if let e = c["expected"] {
            do { expected = try ExpectedAttributes(json: e) } catch { throw Self.invalid("expected: \(error.message)") }
        }
        var bindingOf: [UInt8]?
        if let b = c["bindingOf"] {
            guard let s = b.stringValue, let bytes = Base64URL.decode(s), !bytes.isEmpty else {
                throw Self.invalid("the token's 'bindingOf' must be a base64url credential id")
            }
            bindingOf = bytes
        }
        guard expected != nil || bindingOf != nil else {
            throw Self.invalid("the token names no identity: give 'expected' or 'bindingOf'")
        }
        return RecoveryToken(
            issuer: verified.issuer, jti: verified.jti, subject: sub, rpId: rpId, userName: name,
            userDisplayName: user["displayName"]?.stringValue ?? name,
            expiresAt: verified.expiresAt,
            expected: expected, bindingOf: bindingOf)
    }

    static func invalid(_ message: String) -> TesseraError { TesseraError(.recoveryTokenInvalid, message) }
}

/// Recovery at a kiosk: a recovery token, a verified read of the person's document matched against the identity
/// the token names, then a replacement passkey; the user's other credentials at the relying party become
/// `replaced`. Each attempt is a database row written before each effect, so that a crash at any point, followed
/// by `recovery.start` with the same attempt id and token, ends with exactly one replacement key.
public actor RecoveryService {
    let store: RecoveryStore
    let passkeys: PasskeyService
    let documents: DocumentService
    let verifier: RecoveryTokenVerifier
    let configuration: EnrollmentConfiguration
    let secret: [UInt8]
    let logger: Logger
    let clock: @Sendable () -> Date
    /// Attempts being run now (a second `start` of one of them waits for nothing: it is refused).
    private var running: Set<String> = []

    public init(
        store: RecoveryStore, passkeys: PasskeyService, documents: DocumentService,
        configuration: EnrollmentConfiguration, secret: [UInt8], logger: Logger,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.passkeys = passkeys
        self.documents = documents
        self.configuration = configuration
        self.verifier = RecoveryTokenVerifier(issuers: configuration.issuers, stationId: configuration.stationId)
        self.secret = secret
        self.logger = logger
        self.clock = clock
    }

    /// What `recovery.start` asks for.
    public struct Request: Sendable {
        public var attemptId: String
        public var token: String
        public var tokenId: String?
        public var pin: String?
        public var allowFinalPinTry: Bool
        /// `{mrz} | {can} | {documentNumber, dateOfBirth, dateOfExpiry}`, `reader?`; needed until the match is done.
        public var document: JSONValue?
        public var origin: String?
        /// The registration's challenge (default: random); fixed by the first start of the attempt.
        public var challenge: [UInt8]?
        public var caller: PINCaller?

        public init(
            attemptId: String, token: String, tokenId: String? = nil, pin: String? = nil,
            allowFinalPinTry: Bool = false, document: JSONValue? = nil, origin: String? = nil,
            challenge: [UInt8]? = nil, caller: PINCaller? = nil
        ) {
            self.attemptId = attemptId; self.token = token; self.tokenId = tokenId; self.pin = pin
            self.allowFinalPinTry = allowFinalPinTry; self.document = document; self.origin = origin
            self.challenge = challenge; self.caller = caller
        }

        /// The caller as the owner rule sees it: the recovered passkey is theirs, and only their credentials are
        /// replaced or bound (nil: the daemon itself).
        var requester: Requester? { caller.map { Requester(uid: $0.uid, pid: $0.pid, isAdmin: false) } }
    }

    /// Runs (or resumes) an attempt to its end; the registration of the replacement passkey.
    public func start(_ r: Request) async throws(TesseraError) -> JSONValue {
        guard !r.attemptId.isEmpty, r.attemptId.utf8.count <= 128 else {
            throw TesseraError(
                .invalidInput, "recoveryAttemptId must be 1 to 128 bytes", details: ["field": "recoveryAttemptId"])
        }
        let now = clock()
        let token = try verifier.verify(r.token, now: now)
        guard !running.contains(r.attemptId) else {
            throw TesseraError(.busy, "recovery attempt \(r.attemptId) is running", retryable: true)
        }
        running.insert(r.attemptId)
        defer { running.remove(r.attemptId) }

        var row: RecoveryAttemptRow
        if let stored = try await store.attempt(id: r.attemptId) {
            guard stored.jti == token.jti else {
                throw TesseraError(.recoveryTokenInvalid, "attempt \(r.attemptId) was started with another token")
            }
            row = stored
        } else {
            row = RecoveryAttemptRow(
                id: r.attemptId, jti: token.jti, issuer: token.issuer,
                subject: Base64URL.encode(Array(token.subject.utf8)), rpId: token.rpId,
                startedAt: now, expiresAt: token.expiresAt, ownerUid: r.caller?.uid)
            switch try await store.insert(
                row, since: now.addingTimeInterval(-configuration.recoveryWindow),
                maxPerUser: configuration.recoveryMaxPerUser,
                maxPerStation: configuration.recoveryMaxPerStation)
            {
            case nil: break
            case "replayed"?: throw TesseraError(.recoveryTokenInvalid, "this recovery token was already used")
            case let scope?:
                throw TesseraError(
                    .recoveryRateLimited, "too many recovery attempts for this \(scope)",
                    details: [
                        "scope": .string(scope == "user" ? "user" : "station"),
                        "retryAfterSeconds": .number(configuration.recoveryWindow),
                    ])
            }
            Failpoint.hit("recovery.afterStart")
        }
        switch row.stage {
        case .succeeded: return try await result(row, token: token, recovered: true)
        case .cancelled: throw TesseraError(.recoveryAttemptCancelled, "recovery attempt \(row.id) was cancelled")
        case .failed:
            throw TesseraError(
                .recoveryMatchFailed, "recovery attempt \(row.id) failed (\(row.failure ?? "?")); start a new one")
        case .started, .matched: break
        }
        if row.stage == .started {
            try await match(&row, token: token, request: r)
        }
        return try await createPasskey(&row, token: token, request: r)
    }

    /// Ends an attempt that has not succeeded; only the uid that started it, or an administrator (`UNAUTHORIZED`).
    public func cancel(attemptId: String, caller: EnrollmentCaller) async throws(TesseraError) -> Bool {
        guard var row = try await store.attempt(id: attemptId) else {
            throw TesseraError(
                .invalidInput, "no recovery attempt \(attemptId)", details: ["field": "recoveryAttemptId"])
        }
        guard caller.owns(row.ownerUid) else {
            throw TesseraError(.unauthorized, "recovery attempt \(attemptId) was started by another uid")
        }
        guard row.stage == .started || row.stage == .matched else { return false }
        row.stage = .cancelled
        row.updatedAt = clock()
        return try await store.save(row)
    }

    private func match(_ row: inout RecoveryAttemptRow, token: RecoveryToken, request r: Request)
        async throws(TesseraError)
    {
        guard let keyJSON = r.document, keyJSON.objectValue != nil else {
            throw TesseraError(.recoveryIDVNotCompleted, "the document's access key is needed: document {mrz} or {can}")
        }
        let p = try Params(keyJSON)
        let result = try await documents.read(
            DocumentReadRequest(
                reader: try p.optionalString("reader"),
                key: try DocumentAccessKey(params: p), verify: true))
        guard result.verdict.verdict == .authentic, let mrz = result.mrz else {
            throw TesseraError(
                .recoveryIDVNotCompleted, "the document is \(result.verdict.verdict.rawValue), not authentic",
                details: [
                    "verdict": .string(result.verdict.verdict.rawValue),
                    "reasons": .array(result.verdict.reasons.map { .string($0.rawValue) }),
                ])
        }
        let identity = DocumentIdentity(mrz: mrz)
        var matched = true
        if let expected = token.expected, !AttributeMatcher.compare(expected, with: mrz).isEmpty { matched = false }
        if let reference = token.bindingOf {
            let record = try? await passkeys.credential(id: reference, requester: r.requester)
            let binding = record.flatMap { rec in
                rec.rpId == token.rpId && rec.userId == Data(token.subject.utf8) ? rec.identityBinding : nil
            }.flatMap(IdentityBinding.init(text:))
            if binding?.isSamePerson(identity, secret: secret) != true { matched = false }
        }
        guard matched else {
            row.stage = .failed
            row.failure = TesseraError.Code.recoveryMatchFailed.rawValue
            row.updatedAt = clock()
            try await store.save(row)
            throw TesseraError(.recoveryMatchFailed, "the document is not the person this recovery is for")
        }
        row.stage = .matched
        row.binding = IdentityBinding(identity: identity, secret: secret, enrollmentId: nil).text
        row.updatedAt = clock()
        guard try await store.save(row) else { throw cancelledError(row) }
        Failpoint.hit("recovery.afterMatch")
    }

    private func createPasskey(_ row: inout RecoveryAttemptRow, token: RecoveryToken, request r: Request)
        async throws(TesseraError) -> JSONValue
    {
        var plan = row.plan.flatMap { try? JSONValue.parse(Array($0.utf8)) }?.objectValue ?? [:]
        if plan["credentialId"] == nil {
            plan["credentialId"] = .string(Base64URL.encode(SecureRandom.bytes(32)))
            plan["keyHandle"] = .string(Base64URL.encode(SecureRandom.bytes(16)))
            plan["challenge"] = .string(Base64URL.encode(r.challenge ?? SecureRandom.bytes(32)))
            if let origin = r.origin { plan["origin"] = .string(origin) }
        }
        guard var credentialId = plan["credentialId"]?.stringValue.flatMap(Base64URL.decode),
            var keyHandle = plan["keyHandle"]?.stringValue.flatMap(Base64URL.decode),
            let challenge = plan["challenge"]?.stringValue.flatMap(Base64URL.decode)
        else {
            throw TesseraError(.internalError, "the stored recovery plan does not parse")
        }
        if (try? await passkeys.credential(id: credentialId)) != nil {
            return try await succeed(&row, credentialId: credentialId, token: token)
        }
        await passkeys.clearInterruptedKey(
            plan: &plan, credentialId: &credentialId, keyHandle: &keyHandle, logger: logger)
        let tokenId: String
        do { tokenId = try await passkeys.chooseToken(r.tokenId).id } catch { throw registrationFailed(error) }
        plan["tokenId"] = .string(tokenId)
        plan["generating"] = true
        row.plan = String(decoding: JSONValue.object(plan).serialized(), as: UTF8.self)
        row.updatedAt = clock()
        // From here a key may exist under these ids: recorded before the attempt.
        guard try await store.save(row) else { throw cancelledError(row) }
        Failpoint.hit("recovery.afterPlan")
        let created: PasskeyService.EnrollResult
        do {
            created = try await passkeys.enroll(
                .init(
                    rpId: token.rpId, userId: Array(token.subject.utf8), userName: token.userName,
                    userDisplayName: token.userDisplayName, challenge: challenge, origin: plan["origin"]?.stringValue,
                    tokenId: tokenId,
                    pin: r.pin, attestation: .packed, userVerification: .preferred, credentialId: credentialId,
                    keyHandle: keyHandle, caller: r.caller, allowFinalPinTry: r.allowFinalPinTry,
                    provisioning: ProvisioningRule(replace: true), actor: "recovery:\(row.id)",
                    identityBinding: row.binding, requester: r.requester))
        } catch {
            throw registrationFailed(error)
        }
        Failpoint.hit("recovery.afterPasskeyRecorded")
        return try await succeed(&row, credentialId: credentialId, token: token, created: created)
    }

    private func succeed(
        _ row: inout RecoveryAttemptRow, credentialId: [UInt8], token: RecoveryToken,
        created: PasskeyService.EnrollResult? = nil
    ) async throws(TesseraError) -> JSONValue {
        row.stage = .succeeded
        row.credentialId = Data(credentialId)
        row.updatedAt = clock()
        try await store.save(row)
        logger.notice("recovery succeeded", metadata: ["attempt": "\(row.id)", "rpId": "\(token.rpId)"])
        return try await result(row, token: token, recovered: created == nil, created: created)
    }

    /// The registration: as created (packed attestation), or rebuilt (`none`) when the answer was lost in a crash.
    private func result(
        _ row: RecoveryAttemptRow, token: RecoveryToken, recovered: Bool,
        created: PasskeyService.EnrollResult? = nil
    ) async throws(TesseraError) -> JSONValue {
        guard let id = row.credentialId else {
            throw TesseraError(.internalError, "a succeeded attempt without credential")
        }
        let plan = row.plan.flatMap { try? JSONValue.parse(Array($0.utf8)) }
        let challenge = plan?["challenge"]?.stringValue.flatMap(Base64URL.decode) ?? []
        let r: PasskeyService.EnrollResult
        if let created {
            r = created
        } else {
            let record = try await passkeys.credential(id: [UInt8](id))
            r = try passkeys.rebuiltRegistration(of: record, challenge: challenge, origin: plan?["origin"]?.stringValue)
        }
        let replaced = try await passkeys.credentials(rpId: token.rpId, userId: Array(token.subject.utf8))
            .filter { $0.state == .replaced }.map { JSONValue.string(Base64URL.encode($0.credentialId)) }
        return [
            "recoveryAttemptId": .string(row.id), "credentialId": .string(Base64URL.encode(r.credentialId)),
            "attestationObject": .string(Base64URL.encode(r.attestationObject)),
            "clientDataJSON": .string(Base64URL.encode(r.clientDataJSON)),
            "authenticatorData": .string(Base64URL.encode(r.authenticatorData)),
            "publicKey": .string(Base64URL.encode(r.publicKey)), "tokenId": .string(r.tokenId),
            "userId": .string(row.subject), "replaced": .array(replaced), "resumed": .bool(recovered),
        ]
    }

    private func registrationFailed(_ error: TesseraError) -> TesseraError {
        TesseraError(
            .recoveryRegistrationFailed, "the replacement passkey could not be created: \(error.message)",
            retryable: error.retryable, details: ["cause": .string(error.code.rawValue)])
    }

    private func cancelledError(_ row: RecoveryAttemptRow) -> TesseraError {
        TesseraError(.recoveryAttemptCancelled, "recovery attempt \(row.id) was cancelled")
    }
}
