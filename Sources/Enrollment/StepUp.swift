import CredentialStore
import Documents
import FoundationEssentials
import KeyStores
import Logging
import MRZ
import Passkeys
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// An authentic document read made before a step-up (on the caller's connection), which a step-up with
/// `document.maxAgeSeconds` uses instead of reading the document again.
public struct AuthenticRead: Sendable {
    public var mrz: MRZ
    public var chipAuthenticity: DocumentVerdict.ChipAuthenticity
    public var at: Date

    public init(mrz: MRZ, chipAuthenticity: DocumentVerdict.ChipAuthenticity, at: Date) {
        self.mrz = mrz
        self.chipAuthenticity = chipAuthenticity
        self.at = at
    }
}

/// Step-up (vendor documents 002 and 004; docs/LIFECYCLE.md, "Step-up"): an assertion that first shows the
/// operation to the station's UI clients, reads and verifies the person's document and checks it against the
/// credential's identity binding (or the expected attributes). Each step-up is a database row written before
/// each effect: after a daemon restart, `stepup.submit` continues it (with the document's access key while it was
/// not verified), and a step-up that made its assertion answers with that assertion again, never a second one.
public actor StepUpService {
    let store: StepUpStore
    let passkeys: PasskeyService
    let documents: DocumentService
    let secret: [UInt8]
    let logger: Logger
    let sink: EnrollmentEventSink
    let clock: @Sendable () -> Date
    /// The step-ups run by a `stepup.start` of this process.
    private var operations: [String: Operation] = [:]
    /// The step-ups being continued by a `stepup.submit` (after a restart).
    private var resuming: Set<String> = []

    /// A running step-up's wait for its document (owner and session are the row's).
    struct Operation {
        var waiter: CheckedContinuation<Input, Never>?
        /// Input was asked for (`stepup.inputRequired` sent) and not delivered yet.
        var waiting = false
        /// Input delivered before the waiter was in place.
        var pending: Input?
        var cancelled = false
    }

    enum Input: Sendable { case document(JSONValue), cancelled, expired }

    public init(
        store: StepUpStore, passkeys: PasskeyService, documents: DocumentService, secret: [UInt8], logger: Logger,
        clock: @escaping @Sendable () -> Date = { Date() }, emit: @escaping EnrollmentEventSink
    ) {
        self.store = store
        self.passkeys = passkeys
        self.documents = documents
        self.secret = secret
        self.logger = logger
        self.clock = clock
        self.sink = emit
    }

    /// What `stepup.start` asks for.
    public struct Request: Sendable {
        public var rpId: String
        public var challenge: [UInt8]
        public var allowCredentials: [[UInt8]]
        public var origin: String?
        public var pin: String?
        public var userVerification: PasskeyService.UserVerification
        public var allowFinalPinTry: Bool
        /// `{contentB64, mime}`, shown to the UI clients before and echoed after the operation.
        public var operationContext: JSONValue?
        public var expiresAt: Date?
        public var documentRequired: Bool
        public var expected: ExpectedAttributes?
        /// The access key given up front (`{mrz}`, `{can}` or the three fields); nil: asked with `stepup.inputRequired`.
        public var documentKey: JSONValue?
        public var reader: String?
        public var evidence: Bool
        public var crossPlatformSessionId: String?
        /// How long to wait for the document's access key when there is no `expiresAt`.
        public var inputTimeout: TimeInterval
        /// An authentic read recent enough for `document.maxAgeSeconds`: used instead of a new read.
        public var recentRead: AuthenticRead?
        /// The id the caller chose (1–128 bytes, new), so that it knows the step-up even when the daemon dies
        /// before announcing it; nil: a random one.
        public var id: String?

        public init(
            rpId: String, challenge: [UInt8], allowCredentials: [[UInt8]], origin: String? = nil,
            pin: String? = nil, userVerification: PasskeyService.UserVerification = .preferred,
            allowFinalPinTry: Bool = false, operationContext: JSONValue? = nil, expiresAt: Date? = nil,
            documentRequired: Bool = true, expected: ExpectedAttributes? = nil, documentKey: JSONValue? = nil,
            reader: String? = nil, evidence: Bool = false, crossPlatformSessionId: String? = nil,
            inputTimeout: TimeInterval = 300, recentRead: AuthenticRead? = nil, id: String? = nil
        ) {
            self.rpId = rpId; self.challenge = challenge; self.allowCredentials = allowCredentials; self.origin = origin
            self.pin = pin; self.userVerification = userVerification; self.allowFinalPinTry = allowFinalPinTry
            self.operationContext = operationContext; self.expiresAt = expiresAt
            self.documentRequired = documentRequired; self.expected = expected; self.documentKey = documentKey
            self.reader = reader; self.evidence = evidence; self.crossPlatformSessionId = crossPlatformSessionId
            self.inputTimeout = inputTimeout; self.recentRead = recentRead; self.id = id
        }

        /// What the row keeps: everything needed to continue, without the PIN and the document's access key.
        var persisted: String {
            var o: [String: JSONValue] = [
                "rpId": .string(rpId), "challenge": .string(Base64URL.encode(challenge)),
                "userVerification": .string(userVerification.rawValue), "documentRequired": .bool(documentRequired),
                "evidence": .bool(evidence),
            ]
            if let origin { o["origin"] = .string(origin) }
            if let operationContext { o["operationContext"] = operationContext }
            if let expiresAt { o["expiresAt"] = .number(expiresAt.timeIntervalSince1970) }
            if let expected { o["expected"] = expected.json }
            if let reader { o["reader"] = .string(reader) }
            return StepUpService.stored(.object(o))
        }

        /// The request of a stored step-up, with `row`'s session and credential.
        init(persisted row: StepUpRow) throws(TesseraError) {
            let p = try Params(try JSONValue.parse(Array(row.request.utf8)))
            self.init(
                rpId: try p.string("rpId"), challenge: try p.bytes("challenge"),
                allowCredentials: [[UInt8](row.credentialId)], origin: try p.optionalString("origin"),
                userVerification: PasskeyService.UserVerification(
                    rawValue: try p.optionalString("userVerification") ?? "") ?? .preferred,
                operationContext: p.value["operationContext"],
                expiresAt: p.value["expiresAt"]?.doubleValue.map(Date.init(timeIntervalSince1970:)),
                documentRequired: try p.optionalBool("documentRequired") ?? true,
                expected: try p.value["expected"].map { v throws(TesseraError) in try ExpectedAttributes(json: v) },
                reader: try p.optionalString("reader"), evidence: try p.optionalBool("evidence") ?? false,
                crossPlatformSessionId: row.sessionId)
        }
    }

    /// Runs one step-up to its end and returns the assertion, `stepUpId`, the document verdict and the
    /// post-operation context. Announces `stepup.context`, `stepup.inputRequired` (without `documentKey` or a
    /// recent read) and `stepup.finished`.
    public func run(_ r: Request, caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        let id = r.id ?? UUID().uuidString.lowercased()
        guard !id.isEmpty, id.utf8.count <= 128 else {
            throw TesseraError(.invalidInput, "stepUpId must be 1 to 128 bytes", details: ["field": "stepUpId"])
        }
        if try await store.row(id: id) != nil {
            throw TesseraError(
                .invalidInput, "step-up \(id) exists: continue it with stepup.submit", details: ["field": "stepUpId"])
        }
        let now = clock()
        if let expiresAt = r.expiresAt, expiresAt <= now {
            throw TesseraError(.challengeExpired, "the challenge expired at \(expiresAt.iso8601Seconds)")
        }
        guard !r.allowCredentials.isEmpty else { throw .invalidInput("allowCredentials must not be empty") }
        var found: [CredentialRecord] = []
        for cid in r.allowCredentials {
            if let rec = try? await passkeys.credential(id: cid, requester: caller), rec.rpId == r.rpId {
                found.append(rec)
            }
        }
        guard !found.isEmpty else {
            throw TesseraError(.passkeyNotFound, "none of allowCredentials is known for rpId \(r.rpId)")
        }
        let record = try PasskeyService.firstActive(found)
        let binding = record.identityBinding.flatMap(IdentityBinding.init(text:))
        if r.documentRequired, r.expected == nil, binding == nil {
            throw TesseraError(
                .invalidInput, "the credential has no identity binding: give document.expected",
                details: ["field": "document.expected"])
        }
        var row = StepUpRow(
            id: id, ownerUid: caller.uid, rpId: r.rpId, credentialId: record.credentialId, request: r.persisted,
            sessionId: r.crossPlatformSessionId, startedAt: now,
            deadline: r.expiresAt ?? now.addingTimeInterval(r.inputTimeout))
        try await store.insert(row)
        Failpoint.hit("stepup.afterStart")
        operations[id] = Operation()
        defer { operations[id] = nil }
        var context: [String: JSONValue] = [
            "stepUpId": .string(id), "rpId": .string(r.rpId),
            "user": ["name": .string(record.userName), "displayName": .string(record.userDisplayName)],
            "documentRequired": .bool(r.documentRequired),
        ]
        if let c = r.operationContext { context["operationContext"] = c }
        if let e = r.expiresAt { context["expiresAt"] = .string(e.iso8601Seconds) }
        await sink(EnrollmentEvent(method: "stepup.context", params: .object(context), owner: caller.uid))
        return try await finish(&row, r, record: record, binding: binding, caller: caller)
    }

    /// Runs the rest of the step-up from the row's stage; records how it ended and announces `stepup.finished`.
    private func finish(
        _ row: inout StepUpRow, _ r: Request, record: CredentialRecord, binding: IdentityBinding?,
        caller: EnrollmentCaller
    ) async throws(TesseraError) -> JSONValue {
        let id = row.id
        do {
            let result = try await perform(&row, r, record: record, binding: binding, caller: caller)
            await sink(
                EnrollmentEvent(
                    method: "stepup.finished", params: ["stepUpId": .string(id), "outcome": "success"],
                    owner: row.ownerUid))
            return result
        } catch {
            let cancelled = error.code == .userCancelled
            row.end(error.code, at: clock())
            do { try await store.save(row) } catch let e {
                logger.error("cannot record the end of a step-up", metadata: ["stepUp": "\(id)", "error": "\(e)"])
            }
            await sink(
                EnrollmentEvent(
                    method: "stepup.finished",
                    params: [
                        "stepUpId": .string(id), "outcome": .string(cancelled ? "cancelled" : "failed"),
                        "error": [
                            "code": .string(error.code.rawValue), "message": .string(error.message),
                            "retryable": .bool(error.retryable),
                        ],
                    ], owner: row.ownerUid))
            logger.notice("step-up did not succeed", metadata: ["stepUp": "\(id)", "code": "\(error.code.rawValue)"])
            throw error
        }
    }

    private func perform(
        _ row: inout StepUpRow, _ r: Request, record: CredentialRecord, binding: IdentityBinding?,
        caller: EnrollmentCaller
    ) async throws(TesseraError) -> JSONValue {
        let id = row.id
        var document = Self.parsed(row.document)
        if row.stage == .waitingForDocument {
            if r.documentRequired {
                let verified: (mrz: MRZ, json: [String: JSONValue])
                if let recent = r.recentRead {
                    verified = (
                        recent.mrz,
                        [
                            "verdict": .string(DocumentVerdict.Verdict.authentic.rawValue),
                            "chipAuthenticity": .string(recent.chipAuthenticity.rawValue), "reused": true,
                            "readAt": .string(recent.at.iso8601Seconds),
                        ]
                    )
                } else {
                    verified = try await read(try await documentKey(row, r, record: record), r)
                }
                var json = try match(verified.mrz, r, binding: binding)
                json.merge(verified.json) { a, _ in a }
                document = .object(json)
            }
            row.stage = .documentVerified
            row.document = document.map { Self.stored(Self.withoutEvidence($0)) }
            row.updatedAt = clock()
            guard try await store.save(row) else { throw TesseraError(.userCancelled, "the step-up was cancelled") }
            if r.documentRequired { Failpoint.hit("stepup.afterDocument") }
        }
        if operations[id]?.cancelled == true { throw TesseraError(.userCancelled, "the step-up was cancelled") }
        if let expiresAt = r.expiresAt, expiresAt <= clock() {
            throw TesseraError(.challengeExpired, "the challenge expired at \(expiresAt.iso8601Seconds)")
        }
        let a = try await passkeys.authenticate(
            .init(
                rpId: r.rpId, challenge: r.challenge, allowCredentials: [[UInt8](record.credentialId)],
                origin: r.origin,
                pin: r.pin, userVerification: r.userVerification, caller: caller.pinCaller,
                allowFinalPinTry: r.allowFinalPinTry, requester: caller))
        var out = a.json
        out["stepUpId"] = .string(id)
        if let document { out["document"] = document }
        if let c = r.operationContext { out["postOperationContext"] = c }
        var kept = out
        kept["document"] = document.map(Self.withoutEvidence)
        row.stage = .succeeded
        row.result = Self.stored(.object(kept))
        row.updatedAt = clock()
        try await store.save(row)
        return .object(out)
    }

    /// The document's verdict as the row keeps it: the evidence (the chip's signed data) goes to the caller only.
    static func withoutEvidence(_ document: JSONValue) -> JSONValue {
        var kept = document.objectValue ?? [:]
        kept["evidence"] = nil
        return .object(kept)
    }

    static func keyNeeded(_ id: String) -> TesseraError {
        TesseraError(
            .invalidInput, "step-up \(id) needs the document's access key: payload {mrz} or {can}",
            details: ["field": "payload"])
    }

    static func stored(_ value: JSONValue) -> String { String(decoding: value.serialized(), as: UTF8.self) }

    /// A JSON column the row keeps (`stored`); nil when absent or unreadable.
    static func parsed(_ text: String?) -> JSONValue? { text.flatMap { try? JSONValue.parse(Array($0.utf8)) } }

    /// The document's access key: given with the request, or asked for (`stepup.inputRequired`) and awaited.
    private func documentKey(_ row: StepUpRow, _ r: Request, record: CredentialRecord) async throws(TesseraError)
        -> JSONValue
    {
        if let key = r.documentKey { return key }
        guard operations[row.id] != nil else {
            throw Self.keyNeeded(row.id)
        }
        operations[row.id]?.waiting = true
        await sink(
            EnrollmentEvent(
                method: "stepup.inputRequired",
                params: [
                    "stepUpId": .string(row.id), "key": "DOCUMENT",
                    "prompt": .string("The MRZ or the CAN of the identity document of \(record.userDisplayName)"),
                    "input": [
                        "type": "object", "properties": ["mrz": ["type": "string"], "can": ["type": "string"]],
                    ],
                ], owner: row.ownerUid))
        switch await waitForInput(row.id, deadline: row.deadline) {
        case .document(let payload): return payload
        case .cancelled: throw TesseraError(.userCancelled, "the step-up was cancelled")
        case .expired: throw TesseraError(.challengeExpired, "no document was presented before the challenge expired")
        }
    }

    /// Reads the document with `keyParams` and requires `authentic`.
    private func read(_ keyParams: JSONValue, _ r: Request) async throws(TesseraError)
        -> (mrz: MRZ, json: [String: JSONValue])
    {
        let p = try Params(keyParams)
        var request = DocumentReadRequest(
            reader: try p.optionalString("reader") ?? r.reader,
            key: try DocumentAccessKey(params: p), dataGroups: nil,
            verify: true)
        request.evidence = r.evidence
        let result = try await documents.read(request)
        let verdict = result.verdict
        guard verdict.verdict == .authentic else { throw result.notAuthenticError }
        guard let mrz = result.mrz else {
            throw TesseraError(.malformedData, "the chip's DG1 could not be read or parsed")
        }
        var out: [String: JSONValue] = [
            "verdict": .string(verdict.verdict.rawValue),
            "chipAuthenticity": .string(verdict.chipAuthenticity.rawValue), "reused": false,
            "readAt": .string(clock().iso8601Seconds),
        ]
        if r.evidence, let evidence = result.evidence { out["evidence"] = evidence.json }
        return (mrz, out)
    }

    /// Compares the document with `expected` or the binding: `STEP_UP_CREDENTIAL_USER_MISMATCH`.
    private func match(_ mrz: MRZ, _ r: Request, binding: IdentityBinding?) throws(TesseraError)
        -> [String: JSONValue]
    {
        if let expected = r.expected {
            let mismatches = AttributeMatcher.compare(expected, with: mrz)
            if !mismatches.isEmpty {
                throw TesseraError(
                    .stepUpCredentialUserMismatch, "the document does not match the expected attributes",
                    details: ["mismatches": .array(mismatches.map(\.json))])
            }
        }
        if let binding, !binding.isSamePerson(DocumentIdentity(mrz: mrz), secret: secret) {
            throw TesseraError(
                .stepUpCredentialUserMismatch, "the document is not the credential holder's",
                details: [
                    "mismatches": .array(
                        binding.mismatches(DocumentIdentity(mrz: mrz), secret: secret)
                            .map { .string($0) })
                ])
        }
        return [
            "issuingState": .string(mrz.issuingState), "matched": .string(r.expected != nil ? "expected" : "binding"),
        ]
    }

    private func waitForInput(_ id: String, deadline: Date) async -> Input {
        if operations[id]?.cancelled == true { return .cancelled }
        if let early = operations[id]?.pending {
            operations[id]?.pending = nil
            operations[id]?.waiting = false
            return early
        }
        let timer = Task { [clock] in
            let seconds = max(0, deadline.timeIntervalSince(clock()))
            try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            if !Task.isCancelled { self.deliver(id, .expired) }
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Input, Never>) in
                operations[id]?.waiter = c
            }
        } onCancel: {
            Task { await self.deliver(id, .cancelled) }
        }
    }

    private func deliver(_ id: String, _ input: Input) {
        guard let waiter = operations[id]?.waiter else {
            // Asked for but not awaited yet: kept for `waitForInput`.
            if operations[id]?.waiting == true, operations[id]?.pending == nil { operations[id]?.pending = input }
            return
        }
        operations[id]?.waiter = nil
        operations[id]?.waiting = false
        waiter.resume(returning: input)
    }

    /// The stored step-up, if `caller` may act on it (`sessionId` must be the step-up's when it has one).
    private func authorized(_ id: String, sessionId: String?, caller: EnrollmentCaller) async throws(TesseraError)
        -> StepUpRow
    {
        guard let row = try await store.row(id: id) else {
            throw TesseraError(.passkeyNotFound, "no step-up \(id)", details: ["stepUpId": .string(id)])
        }
        guard caller.owns(row.ownerUid) else {
            throw TesseraError(.stepUpAuthSessionMismatch, "step-up \(id) belongs to another user")
        }
        if let expected = row.sessionId, sessionId != expected {
            throw TesseraError(.stepUpAuthSessionMismatch, "the crossPlatformSessionId does not match step-up \(id)")
        }
        return row
    }

    /// `stepup.submit`: the document's access key for a step-up of this process that waits for it (→ nil: its
    /// `stepup.start` answers), or the continuation of a step-up interrupted by a restart (→ its answer, with
    /// `resumed: true`; the answer again when it had succeeded). `pin`/`allowFinalPinTry` are for the assertion
    /// of a continued step-up.
    public func submit(
        _ id: String, payload: JSONValue?, sessionId: String?, pin: String? = nil, allowFinalPinTry: Bool = false,
        caller: EnrollmentCaller
    ) async throws(TesseraError) -> JSONValue? {
        var row = try await authorized(id, sessionId: sessionId, caller: caller)
        if operations[id] != nil {
            guard operations[id]?.waiting == true else {
                throw TesseraError(.stepNotExpected, "step-up \(id) is not waiting for input")
            }
            guard let payload else {
                throw Self.keyNeeded(id)
            }
            deliver(id, .document(payload))
            return nil
        }
        if let ended = try ended(row) { return ended }
        guard !resuming.contains(id) else {
            throw TesseraError(.busy, "step-up \(id) is being continued", retryable: true)
        }
        resuming.insert(id)
        defer { resuming.remove(id) }
        var r = try Request(persisted: row)
        r.documentKey = payload
        r.pin = pin
        r.allowFinalPinTry = allowFinalPinTry
        let prepared: (CredentialRecord, IdentityBinding?)
        do throws(TesseraError) {
            if row.deadline <= clock() || r.expiresAt.map({ $0 <= clock() }) == true {
                throw TesseraError(
                    .challengeExpired, "the challenge of step-up \(id) expired at \(row.deadline.iso8601Seconds)")
            }
            let record = try PasskeyService.firstActive([try await passkeys.credential(id: [UInt8](row.credentialId))])
            prepared = (record, record.identityBinding.flatMap(IdentityBinding.init(text:)))
        } catch {
            row.end(error.code, at: clock())
            try await store.save(row)
            throw error
        }
        if row.stage == .waitingForDocument, r.documentRequired, payload == nil {
            throw Self.keyNeeded(id)
        }
        logger.notice("continuing an interrupted step-up", metadata: ["stepUp": "\(id)", "stage": "\(row.stage)"])
        var out = try await finish(&row, r, record: prepared.0, binding: prepared.1, caller: caller).objectValue ?? [:]
        out["resumed"] = true
        return .object(out)
    }

    /// The answer of a step-up that succeeded (`resumed: true`), the error it ended with, or nil while it runs.
    private func ended(_ row: StepUpRow) throws(TesseraError) -> JSONValue? {
        switch row.stage {
        case .waitingForDocument, .documentVerified: return nil
        case .succeeded:
            var out = Self.parsed(row.result)?.objectValue ?? [:]
            out["resumed"] = true
            return .object(out)
        case .failed, .cancelled:
            throw TesseraError(
                TesseraError.Code(rawValue: row.failure ?? TesseraError.Code.userCancelled.rawValue),
                "step-up \(row.id) ended (\(row.stage.rawValue)); start a new one", retryable: false,
                details: ["stepUpId": .string(row.id), "state": .string(row.stage.rawValue)])
        }
    }

    /// Ends a step-up that has not succeeded with `USER_CANCELLED` (`stepup.cancel`); false when it was over.
    public func cancel(_ id: String, sessionId: String?, caller: EnrollmentCaller) async throws(TesseraError) -> Bool {
        var row = try await authorized(id, sessionId: sessionId, caller: caller)
        if operations[id] != nil {
            operations[id]?.cancelled = true
            deliver(id, .cancelled)
            return true
        }
        guard !row.stage.isFinal, !resuming.contains(id) else { return false }
        row.end(.userCancelled, at: clock())
        return try await store.save(row)
    }

    /// `stepup.status`: the stored step-up for its owner or an administrator (others: `UNAUTHORIZED`).
    public func status(_ id: String, caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        guard let row = try await store.row(id: id) else {
            throw TesseraError(.passkeyNotFound, "no step-up \(id)", details: ["stepUpId": .string(id)])
        }
        guard caller.owns(row.ownerUid) else {
            throw TesseraError(.unauthorized, "step-up \(id) belongs to another uid")
        }
        var out: [String: JSONValue] = [
            "stepUpId": .string(id), "state": .string(row.stage.rawValue), "rpId": .string(row.rpId),
            "credentialId": .string(Base64URL.encode(row.credentialId)),
            "running": .bool(operations[id] != nil || resuming.contains(id)),
            "waitingForInput": .bool(operations[id]?.waiting == true),
            "startedAt": .string(row.startedAt.iso8601Seconds), "updatedAt": .string(row.updatedAt.iso8601Seconds),
            "deadline": .string(row.deadline.iso8601Seconds),
        ]
        if let failure = row.failure { out["error"] = ["code": .string(failure)] }
        if let document = Self.parsed(row.document) { out["document"] = document }
        if let result = Self.parsed(row.result) { out["result"] = result }
        return .object(out)
    }
}

extension StepUpRow {
    /// Ends the step-up with `code`: `cancelled` for USER_CANCELLED, `failed` otherwise.
    fileprivate mutating func end(_ code: TesseraError.Code, at date: Date) {
        stage = code == .userCancelled ? .cancelled : .failed
        failure = code.rawValue
        updatedAt = date
    }
}
