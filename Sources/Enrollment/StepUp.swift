import CredentialStore
import Documents
import Foundation
import Logging
import MRZ
import Passkeys
import TesseraCore

/// Step-up (vendor documents 002 and 004; docs/LIFECYCLE.md, "Step-up"): an assertion that first shows the
/// operation to the station's UI clients, reads and verifies the person's document and checks it against the
/// credential's identity binding (or the expected attributes). Operations live in memory: a daemon restart
/// ends them (the caller starts again with a fresh challenge).
public actor StepUpService {
    let passkeys: PasskeyService
    let documents: DocumentService
    let secret: [UInt8]
    let logger: Logger
    let sink: EnrollmentEventSink
    let clock: @Sendable () -> Date
    private var operations: [String: Operation] = [:]

    struct Operation {
        var owner: UInt32
        var sessionId: String?
        var waiter: CheckedContinuation<Input, Never>?
        /// Input was asked for (`stepup.inputRequired` sent) and not delivered yet.
        var waiting = false
        /// Input delivered before the waiter was in place.
        var pending: Input?
        var cancelled = false
    }

    enum Input: Sendable { case document(JSONValue), cancelled, expired }

    public init(
        passkeys: PasskeyService, documents: DocumentService, secret: [UInt8], logger: Logger,
        clock: @escaping @Sendable () -> Date = { Date() }, emit: @escaping EnrollmentEventSink
    ) {
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

        public init(
            rpId: String, challenge: [UInt8], allowCredentials: [[UInt8]], origin: String? = nil,
            pin: String? = nil, userVerification: PasskeyService.UserVerification = .preferred,
            allowFinalPinTry: Bool = false, operationContext: JSONValue? = nil, expiresAt: Date? = nil,
            documentRequired: Bool = true, expected: ExpectedAttributes? = nil, documentKey: JSONValue? = nil,
            reader: String? = nil, evidence: Bool = false, crossPlatformSessionId: String? = nil,
            inputTimeout: TimeInterval = 300
        ) {
            self.rpId = rpId; self.challenge = challenge; self.allowCredentials = allowCredentials; self.origin = origin
            self.pin = pin; self.userVerification = userVerification; self.allowFinalPinTry = allowFinalPinTry
            self.operationContext = operationContext; self.expiresAt = expiresAt
            self.documentRequired = documentRequired; self.expected = expected; self.documentKey = documentKey
            self.reader = reader; self.evidence = evidence; self.crossPlatformSessionId = crossPlatformSessionId
            self.inputTimeout = inputTimeout
        }
    }

    /// Runs one step-up to its end and returns the assertion, `stepUpId`, the document verdict and the
    /// post-operation context. Announces `stepup.context`, `stepup.inputRequired` (without `documentKey`) and
    /// `stepup.finished`.
    public func run(_ r: Request, caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        let id = UUID().uuidString.lowercased()
        if let expiresAt = r.expiresAt, expiresAt <= clock() {
            throw TesseraError(.challengeExpired, "the challenge expired at \(expiresAt.iso8601Seconds)")
        }
        guard !r.allowCredentials.isEmpty else { throw .invalidInput("allowCredentials must not be empty") }
        var found: [CredentialRecord] = []
        for cid in r.allowCredentials {
            if let rec = try? await passkeys.credential(id: cid), rec.rpId == r.rpId { found.append(rec) }
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
        operations[id] = Operation(owner: caller.uid, sessionId: r.crossPlatformSessionId)
        defer { operations[id] = nil }
        do {
            let result = try await perform(id, r, record: record, binding: binding, caller: caller)
            await sink(
                EnrollmentEvent(
                    method: "stepup.finished", params: ["stepUpId": .string(id), "outcome": "success"],
                    owner: caller.uid))
            return result
        } catch {
            let outcome = error.code == .userCancelled ? "cancelled" : "failed"
            await sink(
                EnrollmentEvent(
                    method: "stepup.finished",
                    params: [
                        "stepUpId": .string(id), "outcome": .string(outcome),
                        "error": [
                            "code": .string(error.code.rawValue), "message": .string(error.message),
                            "retryable": .bool(error.retryable),
                        ],
                    ], owner: caller.uid))
            logger.notice("step-up did not succeed", metadata: ["stepUp": "\(id)", "code": "\(error.code.rawValue)"])
            throw error
        }
    }

    private func perform(
        _ id: String, _ r: Request, record: CredentialRecord, binding: IdentityBinding?,
        caller: EnrollmentCaller
    ) async throws(TesseraError) -> JSONValue {
        var context: [String: JSONValue] = [
            "stepUpId": .string(id), "rpId": .string(r.rpId),
            "user": ["name": .string(record.userName), "displayName": .string(record.userDisplayName)],
            "documentRequired": .bool(r.documentRequired),
        ]
        if let c = r.operationContext { context["operationContext"] = c }
        if let e = r.expiresAt { context["expiresAt"] = .string(e.iso8601Seconds) }
        await sink(EnrollmentEvent(method: "stepup.context", params: .object(context), owner: caller.uid))

        var document: JSONValue?
        if r.documentRequired {
            var key = r.documentKey
            if key == nil {
                operations[id]?.waiting = true
                await sink(
                    EnrollmentEvent(
                        method: "stepup.inputRequired",
                        params: [
                            "stepUpId": .string(id), "key": "DOCUMENT",
                            "prompt": .string(
                                "The MRZ or the CAN of the identity document of \(record.userDisplayName)"),
                            "input": [
                                "type": "object", "properties": ["mrz": ["type": "string"], "can": ["type": "string"]],
                            ],
                        ], owner: caller.uid))
                switch await waitForInput(id, deadline: r.expiresAt ?? clock().addingTimeInterval(r.inputTimeout)) {
                case .document(let payload): key = payload
                case .cancelled: throw TesseraError(.userCancelled, "the step-up was cancelled")
                case .expired:
                    throw TesseraError(.challengeExpired, "no document was presented before the challenge expired")
                }
            }
            document = try await readAndMatch(key ?? .null, r, binding: binding)
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
                allowFinalPinTry: r.allowFinalPinTry))
        var out = a.json
        out["stepUpId"] = .string(id)
        if let document { out["document"] = document }
        if let c = r.operationContext { out["postOperationContext"] = c }
        return .object(out)
    }

    /// Reads the document with `keyParams`, requires `authentic`, and compares it with `expected` or the binding.
    private func readAndMatch(_ keyParams: JSONValue, _ r: Request, binding: IdentityBinding?)
        async throws(TesseraError) -> JSONValue
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
        var out: [String: JSONValue] = [
            "verdict": .string(verdict.verdict.rawValue),
            "chipAuthenticity": .string(verdict.chipAuthenticity.rawValue),
            "issuingState": .string(mrz.issuingState), "matched": .string(r.expected != nil ? "expected" : "binding"),
        ]
        if r.evidence, let evidence = result.evidence { out["evidence"] = evidence.json }
        return .object(out)
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

    private func authorize(_ id: String, sessionId: String?, caller: EnrollmentCaller) throws(TesseraError) {
        guard let op = operations[id] else {
            throw TesseraError(.passkeyNotFound, "no step-up \(id) is running", details: ["stepUpId": .string(id)])
        }
        guard caller.owns(op.owner) else {
            throw TesseraError(.stepUpAuthSessionMismatch, "step-up \(id) belongs to another user")
        }
        if let expected = op.sessionId, sessionId != expected {
            throw TesseraError(.stepUpAuthSessionMismatch, "the crossPlatformSessionId does not match step-up \(id)")
        }
    }

    /// The document's access key for a waiting step-up (`stepup.submit`).
    public func submit(_ id: String, payload: JSONValue, sessionId: String?, caller: EnrollmentCaller)
        throws(TesseraError)
    {
        try authorize(id, sessionId: sessionId, caller: caller)
        guard operations[id]?.waiting == true else {
            throw TesseraError(.stepNotExpected, "step-up \(id) is not waiting for input")
        }
        deliver(id, .document(payload))
    }

    /// Ends a running step-up with `USER_CANCELLED` (`stepup.cancel`).
    public func cancel(_ id: String, sessionId: String?, caller: EnrollmentCaller) throws(TesseraError) {
        try authorize(id, sessionId: sessionId, caller: caller)
        operations[id]?.cancelled = true
        deliver(id, .cancelled)
    }
}
