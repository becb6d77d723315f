import CredentialStore
import Documents
import FaceMatching
import FoundationEssentials
import KeyStores
import Logging
import Passkeys
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// Sends an enrollment notification to subscribed clients (the full params only to its owner and administrators).
public typealias EnrollmentEventSink = @Sendable (EnrollmentEvent) async -> Void

/// Runs kiosk enrollments (docs/ENROLLMENT.md), one at a time.
///
/// The state lives in SQLite (`EnrollmentStore`): every step's completion is committed before the next step
/// starts and before `enrollment.stepCompleted` is sent, so a daemon killed at any point restarts with an
/// enrollment that `resume` continues at the first step not completed. Daemon-side work runs in a task of the
/// engine; steps that need a person's input wait for `submit`.
///
/// An enrollment has one terminal outcome: the first terminal transition wins (`finish` forgets the enrollment
/// before its first suspension, and the store never overwrites a finished row), the last step's result and the
/// outcome `success` are one transaction, and a cancel (or forced start) that arrives while PASSKEY_CREATION runs
/// waits for that step to end (`settle`).
public actor EnrollmentEngine {
    public let configuration: EnrollmentConfiguration
    let store: EnrollmentStore
    let passkeys: PasskeyService
    let documents: DocumentService
    /// Reads and verifies mDLs for MDOC_PHASE (nil: the station cannot).
    let mdocReader: MDocReading?
    /// The face matcher of the face steps (nil: workflows with them are unavailable).
    let faceMatcher: FaceMatcher?
    /// Templates kept for MID_SELFIE_MATCHING.
    let faceTemplates: FaceTemplateStore?
    let verifier: ActivationTokenVerifier
    let logger: Logger
    let sink: EnrollmentEventSink
    let clock: @Sendable () -> Date
    /// The daemon's secret: the one-time codes' MAC keys are derived from it.
    let secret: [UInt8]

    /// The active (or failed-retryable) enrollment, mirrored from the database.
    var row: EnrollmentRow?
    /// Its resolved steps.
    var steps: [WorkflowStep] = []
    var phase: Phase = .idle { didSet { wakeSettleWaiters() } }
    /// Terminal transitions waiting for PASSKEY_CREATION or an outcome being recorded to end (`settle`).
    var settleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Outcomes being recorded (`finish` between forgetting the enrollment and announcing its outcome).
    var finishing = 0
    /// Bumped whenever the active enrollment ends or restarts work: results of older work are dropped.
    var generation = 0
    var work: Task<Void, Never>?
    /// The verified portrait of the active enrollment's document (the face steps' reference), by enrollment id:
    /// kept in memory only, never in the database; a daemon restart loses it and the face step reads the document
    /// again (`retry`).
    var portraits: [String: FaceImage] = [:]
    /// The last terminal `enrollment.finished` params and the uid whose enrollment it was, for `status`.
    var lastOutcome: (params: JSONValue, owner: UInt32)?

    enum Phase: Sendable {
        /// No enrollment, or one left by a daemon restart (`suspended`) or failed with retry possible.
        case idle
        case working(step: String)
        case waiting(StepRequest)
    }

    /// `secret`: the daemon's secret (`DaemonSecret`), from which the one-time codes' MAC keys are derived;
    /// `mdocReader`: reads and verifies mDLs for MDOC_PHASE (the daemon's `mdoc.read` path); `faceMatcher`: the
    /// face steps' matcher, `faceTemplates` where FACE_MATCHING keeps templates for MID_SELFIE_MATCHING.
    public init(
        configuration: EnrollmentConfiguration, store: EnrollmentStore, passkeys: PasskeyService,
        documents: DocumentService, mdocReader: MDocReading? = nil, faceMatcher: FaceMatcher? = nil,
        faceTemplates: FaceTemplateStore? = nil, secret: [UInt8], logger: Logger,
        clock: @escaping @Sendable () -> Date = { Date() }, emit: @escaping EnrollmentEventSink
    ) {
        self.configuration = configuration
        self.store = store
        self.passkeys = passkeys
        self.documents = documents
        self.mdocReader = mdocReader
        self.faceMatcher = faceMatcher
        self.faceTemplates = faceTemplates
        self.verifier = ActivationTokenVerifier(issuers: configuration.issuers, stationId: configuration.stationId)
        self.logger = logger
        self.clock = clock
        self.secret = secret
        self.sink = emit
    }

    /// Loads the enrollment a previous daemon left active (it stays suspended until `resume`) and sweeps it
    /// when it has expired.
    public func open() async throws(TesseraError) {
        guard let current = try await store.current() else { return }
        row = current
        steps = try Self.steps(of: current)
        logger.info(
            "enrollment left by a previous run",
            metadata: [
                "enrollment": "\(current.id)", "state": "\(current.state.rawValue)", "step": "\(current.stepIndex)",
            ])
        await sweep()
    }

    // MARK: candidates

    /// `enrollment.candidates`.
    public func candidates() -> JSONValue {
        .array(
            configuration.workflows.map { w in
                let reasons = w.unavailableReasons(notifier: configuration.notifier, faceMatcher: faceMatcher != nil)
                return [
                    "workflow": .string(w.name),
                    "available": .bool(reasons.isEmpty),
                    "remoteEnrollmentAvailable": .bool(reasons.isEmpty && w.remote && !w.needsActivationToken),
                    "unavailableReasons": .array(reasons.map { .string($0) }),
                    "steps": .array(
                        w.steps.map { ["key": .string($0.key), "performedBy": .string($0.kind.performedBy)] }),
                    "needs": .array(w.needs.map { .string($0) }),
                ]
            })
    }

    // MARK: start

    /// How an enrollment is started.
    public enum StartType: Sendable {
        case remote(candidate: String)
        case activationToken(String)
    }

    /// `enrollment.start`.
    public func start(
        _ type: StartType, customSteps: [WorkflowStep] = [], userVerification: String = "preferred",
        force: Bool = false, caller: EnrollmentCaller
    ) async throws(TesseraError) -> JSONValue {
        guard ["required", "preferred", "discouraged"].contains(userVerification) else {
            throw .invalidInput("userVerification must be required, preferred or discouraged")
        }
        let now = clock()
        var parameters: [String: JSONValue] = ["userVerification": .string(userVerification)]
        let workflow: Workflow
        var token: ActivationToken?
        switch type {
        case .remote(let name):
            workflow = try available(name)
            guard workflow.remote else {
                throw TesseraError(
                    .candidateUnavailable, "workflow \(name) needs an activation token (remote is not enabled)",
                    details: ["workflow": .string(name)])
            }
            guard !workflow.needsActivationToken else {
                throw TesseraError(
                    .candidateUnavailable,
                    "workflow \(name) matches attributes but has no expected data: start it with an activation token",
                    details: ["workflow": .string(name)])
            }
            parameters["userHandle"] = .string(Base64URL.encode(SecureRandom.bytes(16)))
        case .activationToken(let compact):
            let verified = try verifier.verify(compact, now: now)
            workflow = try available(verified.workflow)
            if workflow.steps.contains(where: { $0.kind == .attributeMatching }), verified.expected == nil,
                workflow.expected == nil
            {
                throw TesseraError(
                    .candidateUnavailable,
                    "workflow \(workflow.name) matches attributes, but neither the token nor the workflow carries expected data"
                )
            }
            parameters["subject"] = .string(verified.subject)
            parameters["userHandle"] = .string(Base64URL.encode(Array(verified.subject.utf8)))
            if let n = verified.userName { parameters["userName"] = .string(n) }
            if let d = verified.userDisplayName { parameters["userDisplayName"] = .string(d) }
            token = verified
        }
        if let expected = token?.expected ?? workflow.expected { parameters["expected"] = expected.json }
        if let subject = token?.subject, subject.utf8.count > 64 {
            throw TesseraError(
                .activationTokenMalformed, "sub must be at most 64 bytes (it becomes the passkey's user handle)")
        }
        let resolved = try Self.insertCustomSteps(customSteps, into: workflow.steps)

        if let token, try await store.tokenUsed(jti: token.jti) {
            // Checked before a forced start interrupts anything; `insert` checks again atomically.
            throw TesseraError(.activationTokenReplayed, "this activation token was already used")
        }
        if let active = row {
            guard force else {
                throw TesseraError(
                    .enrollmentActive, "enrollment \(active.id) is active; pass force: true to interrupt it",
                    details: ["enrollmentId": .string(active.id)])
            }
            // Interrupting is cancelling: only for the uid that started it, or an administrator.
            try authorize(caller, active)
            await settle()
            if row?.id == active.id { await finish(outcome: "interrupted", error: nil) }
            if let other = row {
                throw TesseraError(
                    .enrollmentActive, "enrollment \(other.id) is active; pass force: true to interrupt it",
                    details: ["enrollmentId": .string(other.id)])
            }
        }
        var new = EnrollmentRow(
            id: UUID().uuidString.lowercased(), workflow: workflow.name,
            kind: token == nil ? "remote" : "activationToken", ownerUid: caller.uid,
            definition: .array(resolved.map(\.json)), parameters: .object(parameters),
            subject: token?.subject, tokenJti: token?.jti, startedAt: now)
        new.updatedAt = now
        try await store.insert(new, token: token.map { ($0.jti, $0.issuer) })
        row = new
        steps = resolved
        lastOutcome = nil
        logger.info(
            "enrollment started",
            metadata: ["enrollment": "\(new.id)", "workflow": "\(workflow.name)", "kind": "\(new.kind)"])
        await emit(
            "enrollment.started",
            event([
                "workflow": .string(workflow.name), "steps": stepKeys,
                "startedAt": .string(now.iso8601Seconds), "resumed": false,
            ]))
        run()
        var answer: [String: JSONValue] = [
            "enrollmentId": .string(new.id), "workflow": .string(workflow.name), "steps": stepKeys,
            "startedAt": .string(now.iso8601Seconds),
        ]
        if let messages = workflow.messages { answer["messages"] = messages }
        return .object(answer)
    }

    private func available(_ name: String) throws(TesseraError) -> Workflow {
        guard let w = configuration.workflow(named: name) else {
            throw TesseraError(
                .candidateUnavailable, "no workflow named \(name) on this station", details: ["workflow": .string(name)]
            )
        }
        let reasons = w.unavailableReasons(notifier: configuration.notifier, faceMatcher: faceMatcher != nil)
        guard reasons.isEmpty else {
            throw TesseraError(
                .candidateUnavailable,
                "workflow \(name) cannot run on this station: \(reasons.joined(separator: "; "))",
                details: ["workflow": .string(name), "reasons": .array(reasons.map { .string($0) })])
        }
        return w
    }

    static func insertCustomSteps(_ custom: [WorkflowStep], into steps: [WorkflowStep]) throws(TesseraError)
        -> [WorkflowStep]
    {
        var out = steps
        let at = out.firstIndex { $0.kind == .passkeyCreation } ?? out.count
        for (i, step) in custom.enumerated() {
            if out.contains(where: { $0.key == step.key }) {
                throw TesseraError(
                    .invalidInput, "customSteps: step \(step.key) is already in the workflow",
                    details: ["field": "customSteps"])
            }
            out.insert(step, at: at + i)
        }
        return out
    }

    // MARK: status, resume, retry, cancel

    /// `enrollment.status`. Callers other than the owner and administrators see the state without personal
    /// data: no `required`, and `error` / `lastOutcome` reduced as in notifications.
    public func status(caller: EnrollmentCaller) -> JSONValue {
        var o: [String: JSONValue] = ["active": .bool(row != nil)]
        if let lastOutcome {
            o["lastOutcome"] =
                caller.owns(lastOutcome.owner)
                ? lastOutcome.params : EnrollmentEvent.redact("enrollment.finished", lastOutcome.params)
        }
        guard let row else { return .object(o) }
        let owner = caller.owns(row.ownerUid)
        o["enrollmentId"] = .string(row.id)
        o["workflow"] = .string(row.workflow)
        o["state"] = .string(stateName)
        if row.stepIndex < steps.count { o["step"] = .string(steps[row.stepIndex].key) }
        if owner, case .waiting(let request) = phase { o["required"] = request.json }
        o["completedSteps"] = .array(row.completedSteps.map { .string($0) })
        o["steps"] = stepKeys
        o["startedAt"] = .string(row.startedAt.iso8601Seconds)
        o["updatedAt"] = .string(row.updatedAt.iso8601Seconds)
        if let failure = row.failure { o["error"] = owner ? failure : EnrollmentEvent.redactError(failure) }
        return .object(o)
    }

    var stateName: String {
        guard let row else { return "none" }
        if row.state == .failedRetryable { return "failedRetryable" }
        switch phase {
        case .idle: return "suspended"
        case .working: return "running"
        case .waiting: return "waitingForInput"
        }
    }

    /// `enrollment.canResume`.
    public func canResume() async throws(TesseraError) -> JSONValue {
        await sweep()
        if let row {
            var o: [String: JSONValue] = [
                "status": "canResume", "enrollmentId": .string(row.id),
                "startedAt": .string(row.startedAt.iso8601Seconds),
            ]
            if row.stepIndex < steps.count { o["step"] = .string(steps[row.stepIndex].key) }
            return .object(o)
        }
        if let latest = try await store.latest(), latest.outcome == "expired" {
            return [
                "status": "expired", "enrollmentId": .string(latest.id),
                "startedAt": .string(latest.startedAt.iso8601Seconds),
            ]
        }
        return ["status": "nothingToResume"]
    }

    /// `enrollment.resume`: continues a suspended or failed enrollment; re-announces a running one.
    public func resume(caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        await sweep()
        guard let current = row else {
            if let latest = try await store.latest(), latest.outcome == "expired" {
                throw TesseraError(
                    .enrollmentExpired, "enrollment \(latest.id) expired after being idle",
                    details: ["enrollmentId": .string(latest.id)])
            }
            throw TesseraError(.nothingToResume, "there is no enrollment to resume")
        }
        try authorize(caller, current)
        switch phase {
        case .waiting(let request):
            await emit("enrollment.stepRequired", event(request.json.objectValue ?? [:]))
        case .working:
            break
        case .idle:
            if current.state == .failedRetryable { try await prepareRetry() }
            await emit(
                "enrollment.started",
                event([
                    "workflow": .string(current.workflow), "steps": stepKeys,
                    "startedAt": .string(current.startedAt.iso8601Seconds), "resumed": true,
                ]))
            run()
        }
        let now = row ?? current
        return [
            "enrollmentId": .string(now.id), "workflow": .string(now.workflow),
            "step": now.stepIndex < steps.count ? .string(steps[now.stepIndex].key) : .null,
            "completedSteps": .array(now.completedSteps.map { .string($0) }),
        ]
    }

    /// `enrollment.retry`: after `failedWithRetryPossibility`, runs the failed step again.
    public func retry(caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        guard let current = row else { throw TesseraError(.noActiveEnrollment, "there is no enrollment to retry") }
        try authorize(caller, current)
        guard current.state == .failedRetryable else {
            throw TesseraError(.notRetryable, "enrollment \(current.id) has not failed with a retry possibility")
        }
        try await prepareRetry()
        guard row?.id == current.id else { throw TesseraError(.noActiveEnrollment, "the enrollment ended") }
        run()
        return [
            "enrollmentId": .string(current.id),
            "step": current.stepIndex < steps.count ? .string(steps[current.stepIndex].key) : .null,
        ]
    }

    private func prepareRetry() async throws(TesseraError) {
        guard var current = row else { return }
        current.state = .active
        current.failure = nil
        current.updatedAt = clock()
        if current.stepIndex < steps.count, [.phoneOTP, .emailOTP].contains(steps[current.stepIndex].kind),
            var state = current.stepState.objectValue
        {
            // A new code is sent; the resend allowance starts again.
            state["otp"] = nil
            state["resends"] = 0
            current.stepState = .object(state)
        }
        try await commit(current)
    }

    /// `enrollment.cancel`. While PASSKEY_CREATION runs, waits for it: when that step ends the enrollment
    /// (`success`), the cancel lost and says so (`cancelled: false` with the outcome).
    public func cancel(caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        guard let current = row else { throw TesseraError(.noActiveEnrollment, "there is no enrollment to cancel") }
        try authorize(caller, current)
        await settle()
        guard row?.id == current.id else {
            var o: [String: JSONValue] = ["cancelled": false, "enrollmentId": .string(current.id)]
            if let last = lastOutcome?.params, last["enrollmentId"]?.stringValue == current.id {
                o["outcome"] = last["outcome"]
            }
            return .object(o)
        }
        await finish(outcome: "cancelled", error: nil)
        return ["cancelled": true, "enrollmentId": .string(current.id)]
    }

    /// `enrollment.transactionData`: for the uid that started the enrollment, or an administrator.
    public func transactionData(caller: EnrollmentCaller) throws(TesseraError) -> JSONValue {
        guard let row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        try authorize(caller, row)
        var data = row.data.objectValue ?? [:]
        if let portrait = portraits[row.id] { data["facePortrait"] = portrait.json }
        return ["enrollmentId": .string(row.id), "data": .object(data)]
    }

    /// UNAUTHORIZED unless `caller` started `row` or is an administrator.
    func authorize(_ caller: EnrollmentCaller, _ row: EnrollmentRow) throws(TesseraError) {
        guard caller.owns(row.ownerUid) else {
            throw TesseraError(
                .unauthorized,
                "enrollment \(row.id) belongs to the uid that started it: only it (or an administrator) may do this")
        }
    }

    /// `enrollment.audit`: finished enrollments, newest first.
    public func audit(limit: Int) async throws(TesseraError) -> JSONValue {
        let rows = try await store.finished(limit: max(1, min(limit, 1000)))
        return .array(
            rows.map { r in
                var o: [String: JSONValue] = [
                    "enrollmentId": .string(r.id), "workflow": .string(r.workflow), "type": .string(r.kind),
                    "outcome": .string(r.outcome ?? "unknown"), "startedAt": .string(r.startedAt.iso8601Seconds),
                    "completedSteps": .array(r.completedSteps.map { .string($0) }),
                ]
                if let f = r.finishedAt { o["finishedAt"] = .string(f.iso8601Seconds) }
                if let j = r.tokenJti { o["tokenId"] = .string(j) }
                if let s = r.subject { o["subject"] = .string(s) }
                if let code = r.failure?["code"]?.stringValue { o["errorCode"] = .string(code) }
                if let c = r.credentialId { o["credentialId"] = .string(Base64URL.encode([UInt8](c))) }
                if let pa = r.passiveAuthentication { o["passiveAuthentication"] = .string(pa) }
                if let checks = r.faceChecks { o["faceChecks"] = checks }
                return .object(o)
            })
    }

    /// Ends an enrollment idle for longer than the configured timeout (not while the daemon works on it).
    public func sweep() async {
        guard let row else { return }
        if case .working = phase { return }
        if clock().timeIntervalSince(row.updatedAt) > configuration.idleTimeout {
            logger.info("enrollment expired", metadata: ["enrollment": "\(row.id)"])
            await finish(outcome: "expired", error: nil)
        }
    }

    // MARK: running steps

    /// Starts (or restarts) the daemon-side run from the current step.
    func run() {
        generation += 1
        let gen = generation
        work?.cancel()
        phase = .working(step: row.flatMap { $0.stepIndex < steps.count ? steps[$0.stepIndex].key : nil } ?? "")
        work = Task { await self.advance(gen) }
    }

    /// Runs steps until one needs input, one fails, or the workflow is done.
    func advance(_ gen: Int) async {
        while gen == generation, let current = row, current.state == .active {
            guard current.stepIndex < steps.count else {
                await finish(outcome: "success", error: nil)
                return
            }
            let step = steps[current.stepIndex]
            phase = .working(step: step.key)
            let result: StepResult
            do {
                result = try await begin(step)
            } catch {
                await fail(step, error, gen: gen)
                return
            }
            guard gen == generation else { return }
            switch result {
            case .completed(let data):
                do { try await complete(step, data: data, gen: gen) } catch {
                    await fail(step, error, gen: gen)
                    return
                }
            case .needsInput(let request):
                phase = .waiting(request)
                await emit("enrollment.idle", event([:]))
                await emit("enrollment.stepRequired", event(request.json.objectValue ?? [:]))
                return
            }
        }
    }

    /// `enrollment.submit`: only the uid that started the enrollment (or an administrator); a PIN in the
    /// payload goes through the PIN rules as the caller's.
    public func submit(stepKey: String, payload: JSONValue, caller: EnrollmentCaller) async throws(TesseraError)
        -> JSONValue
    {
        guard let current = row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        try authorize(caller, current)
        guard case .waiting(let request) = phase, request.key == stepKey else {
            var expected: JSONValue = .null
            if case .waiting(let request) = phase { expected = .string(request.key) }
            throw TesseraError(
                .stepNotExpected, "step \(stepKey) is not waiting for input",
                details: ["expected": expected])
        }
        guard payload.objectValue != nil else {
            throw TesseraError(.invalidInput, "payload must be an object", details: ["field": "payload"])
        }
        let step = steps[current.stepIndex]
        let gen = generation
        phase = .working(step: step.key)
        let result: StepResult
        do {
            result = try await handleInput(step, payload: payload, caller: caller.pinCaller)
        } catch {
            guard gen == generation, row != nil else { throw error }
            if Self.endsStep(error) {
                await fail(step, error, gen: gen)
            } else {
                phase = .waiting(request)
            }
            throw error
        }
        guard gen == generation else { return ["accepted": true, "stepKey": .string(stepKey)] }
        switch result {
        case .completed(let data):
            do { try await complete(step, data: data, gen: gen) } catch {
                await fail(step, error, gen: gen)
                throw error
            }
            if gen == generation, row != nil { run() }
        case .needsInput(let next):
            phase = .waiting(next)
            await emit("enrollment.stepRequired", event(next.json.objectValue ?? [:]))
        }
        return ["accepted": true, "stepKey": .string(stepKey)]
    }

    /// Errors of a submission that end the step (the enrollment fails) rather than leave it waiting.
    static func endsStep(_ error: TesseraError) -> Bool {
        [
            .otpExpired, .otpAttemptsExceeded, .otpDeliveryFailed, .faceMismatch, .faceMatcherUnavailable,
            .livenessFailed, .faceReplay, .faceAttemptsExceeded,
        ]
        .contains(error.code)
    }

    /// `enrollment.handleDeepLink`. A code goes to the active enrollment only for its owner (or an administrator).
    public func handleDeepLink(_ url: String, caller: EnrollmentCaller) async throws(TesseraError) -> JSONValue {
        guard let link = EnrollmentDeepLink(url: url) else { return ["consumed": false] }
        switch link {
        case .otp(let channel, let code):
            let kind: StepKind = channel == .phone ? .phoneOTP : .emailOTP
            guard case .waiting(let request) = phase, let row, steps[row.stepIndex].kind == kind else {
                return ["consumed": false]
            }
            _ = try await submit(stepKey: request.key, payload: ["otp": .string(code)], caller: caller)
            return ["consumed": true, "action": "otp", "enrollmentId": .string(row.id)]
        case .enroll(let token, let force):
            let started = try await start(.activationToken(token), force: force, caller: caller)
            return ["consumed": true, "action": "start", "enrollmentId": started["enrollmentId"] ?? .null]
        }
    }

    // MARK: transitions

    /// Commits a step's completion (its data merged into transactionData), then announces it. The last step's
    /// completion and the outcome `success` are one transaction.
    func complete(_ step: WorkflowStep, data: [String: JSONValue], gen: Int) async throws(TesseraError) {
        guard gen == generation, var current = row else { return }
        var data = data
        if let portrait = data.removeValue(forKey: "facePortrait") {
            portraits = [current.id: try FaceImage(json: portrait, field: "facePortrait")]
        }
        var merged = current.data.objectValue ?? [:]
        for (k, v) in data { merged[k] = v }
        current.data = .object(merged)
        current.completedSteps.append(step.key)
        current.stepIndex += 1
        current.stepState = .null
        current.updatedAt = clock()
        if let id = data["credential"]?["credentialId"]?.stringValue {
            current.credentialId = Base64URL.decode(id).map { Data($0) }
        }
        if let pa = data["document"]?["passiveAuthentication"]?.stringValue { current.passiveAuthentication = pa }
        if current.stepIndex >= steps.count {
            await finish(outcome: "success", error: nil, from: current, completing: step)
            return
        }
        try await commit(current)
        guard gen == generation else { return }
        await emit(
            "enrollment.stepCompleted",
            event(["key": .string(step.key), "index": .number(Double(current.stepIndex - 1))]))
    }

    /// Saves the current step's in-progress state (before the effect it protects).
    func saveStepState(_ state: JSONValue) async throws(TesseraError) {
        guard var current = row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        current.stepState = state
        current.updatedAt = clock()
        try await commit(current)
    }

    /// Makes `updated` the current row and saves it. NO_ACTIVE_ENROLLMENT when the enrollment ended meanwhile
    /// (a finished row is never overwritten).
    func commit(_ updated: EnrollmentRow) async throws(TesseraError) {
        row = updated
        let saved = try await store.save(updated)
        guard saved, row?.id == updated.id else {
            throw TesseraError(.noActiveEnrollment, "enrollment \(updated.id) has ended")
        }
    }

    /// A step failed: retryable failures keep the context for `retry`, others end the enrollment. Ignored when
    /// the run that saw the failure (`gen`) is no longer current.
    func fail(_ step: WorkflowStep, _ error: TesseraError, gen: Int) async {
        guard gen == generation, var current = row else { return }
        logger.info(
            "enrollment step failed",
            metadata: ["enrollment": "\(current.id)", "step": "\(step.key)", "error": "\(error)"])
        let retryable = error.retryable || [.otpExpired, .otpAttemptsExceeded, .accessDenied].contains(error.code)
        guard retryable else {
            await finish(outcome: "failed", error: error)
            return
        }
        if error.code == .accessDenied, let mrzIndex = steps.firstIndex(where: { $0.kind == .nfcMRZ }),
            mrzIndex < current.stepIndex
        {
            // The document key was wrong: the retry asks for it again.
            current.completedSteps = Array(current.completedSteps.prefix(mrzIndex))
            current.stepIndex = mrzIndex
            if var data = current.data.objectValue { data["documentAccess"] = nil; current.data = .object(data) }
            current.stepState = .null
        }
        if [.faceMatching, .livenessPhase].contains(step.kind), portraits[current.id] == nil,
            let readIndex = steps[..<current.stepIndex].lastIndex(where: { [.nfcPhase, .mdocPhase].contains($0.kind) })
        {
            // The portrait is gone (a daemon restart): the retry reads the document again.
            current.completedSteps = Array(current.completedSteps.prefix(readIndex))
            current.stepIndex = readIndex
            current.stepState = .null
        } else if step.kind == .livenessPhase,
            let sessionIndex = steps.firstIndex(where: { $0.kind == .livenessSession }),
            sessionIndex < current.stepIndex
        {
            // A challenge is used once: the retry issues a new one.
            current.completedSteps = Array(current.completedSteps.prefix(sessionIndex))
            current.stepIndex = sessionIndex
            if var data = current.data.objectValue { data["livenessChallenge"] = nil; current.data = .object(data) }
            current.stepState = .null
        }
        current.state = .failedRetryable
        current.failure = Self.errorJSON(error)
        current.updatedAt = clock()
        generation += 1
        let mine = generation
        phase = .idle
        do { try await commit(current) } catch {
            logger.error("cannot record an enrollment failure", metadata: ["error": "\(error)"])
        }
        guard mine == generation, row?.id == current.id else { return }
        await emit("enrollment.idle", event([:]))
        await emit(
            "enrollment.finished",
            event([
                "outcome": "failedWithRetryPossibility", "error": Self.errorJSON(error),
                "step": .string(step.key),
            ]))
    }

    /// Records a terminal outcome (wiping collected data), announces it, and forgets the enrollment.
    /// The first terminal transition wins: the enrollment is forgotten before the first suspension, so any later
    /// one finds nothing to end. `updated`: the row to finish (default the current one); `step`: the step whose
    /// result `updated` carries, announced (`stepCompleted`) once the outcome is saved with it.
    func finish(
        outcome: String, error: TesseraError?, from updated: EnrollmentRow? = nil,
        completing step: WorkflowStep? = nil
    ) async {
        guard var current = updated ?? row else { return }
        row = nil
        steps = []
        finishing += 1
        phase = .idle
        generation += 1
        // `work` may be the caller: it is cancelled only after the outcome is saved and announced.
        let running = work
        work = nil
        var params: [String: JSONValue] = ["outcome": .string(outcome)]
        if outcome == "success" {
            let data = current.data.objectValue ?? [:]
            if let c = data["credential"] { params["credential"] = c }
            if let d = data["document"] { params["document"] = d }
        } else {
            await discardPasskey(&current)
        }
        let now = clock()
        current.state = .finished
        current.outcome = outcome
        if let error { current.failure = Self.errorJSON(error) }
        current.data = .object([:])
        portraits[current.id] = nil
        current.stepState = .null
        current.updatedAt = now
        current.finishedAt = now
        do { _ = try await store.save(current) } catch {
            logger.error("cannot record an enrollment outcome", metadata: ["error": "\(error)"])
        }
        if let error { params["error"] = Self.errorJSON(error) }
        params["enrollmentId"] = .string(current.id)
        if row == nil { lastOutcome = (.object(params), current.ownerUid) }
        logger.info("enrollment finished", metadata: ["enrollment": "\(current.id)", "outcome": "\(outcome)"])
        if let step {
            await emit(
                "enrollment.stepCompleted",
                [
                    "key": .string(step.key), "index": .number(Double(current.stepIndex - 1)),
                    "enrollmentId": .string(current.id),
                ], owner: current.ownerUid)
        }
        await emit("enrollment.finished", .object(params), owner: current.ownerUid)
        finishing -= 1
        wakeSettleWaiters()
        // A cancelled task cannot write to the socket: `work`, which may be the caller, is cancelled last.
        running?.cancel()
    }

    // MARK: one outcome

    /// Whether a terminal transition must wait: PASSKEY_CREATION is running (its key and the outcome are one
    /// transition), or an outcome is being recorded.
    var unsettled: Bool {
        if finishing > 0 { return true }
        guard case .working(let key) = phase else { return false }
        return steps.contains { $0.key == key && $0.kind == .passkeyCreation }
    }

    /// Waits until no step's effect and no outcome is half-way (see `unsettled`).
    func settle() async {
        guard unsettled else { return }
        await Failpoint.reach("enrollment.terminalTransitionWaits")
        while unsettled {
            await withCheckedContinuation { settleWaiters.append($0) }
        }
    }

    func wakeSettleWaiters() {
        guard !settleWaiters.isEmpty, !unsettled else { return }
        let waiters = settleWaiters
        settleWaiters = []
        for w in waiters { w.resume() }
    }

    // MARK: notifications

    /// Sends a notification owned by `owner` (default: the current enrollment's uid).
    func emit(_ method: String, _ params: JSONValue, owner: UInt32? = nil) async {
        await sink(EnrollmentEvent(method: method, params: params, owner: owner ?? row?.ownerUid))
    }

    /// `emit` bound to the current enrollment's owner, for tasks that report outside the actor.
    var emitter: @Sendable (String, JSONValue) async -> Void {
        let sink = self.sink
        let owner = row?.ownerUid
        return { method, params in await sink(EnrollmentEvent(method: method, params: params, owner: owner)) }
    }

    // MARK: helpers

    var stepKeys: JSONValue { .array(steps.map { .string($0.key) }) }

    /// Notification params: `fields` plus the enrollment id.
    func event(_ fields: [String: JSONValue]) -> JSONValue {
        var o = fields
        if let row { o["enrollmentId"] = .string(row.id) }
        return .object(o)
    }

    static func steps(of row: EnrollmentRow) throws(TesseraError) -> [WorkflowStep] {
        var out: [WorkflowStep] = []
        for item in row.definition.arrayValue ?? [] { out.append(try WorkflowStep(stored: item)) }
        return out
    }

    static func errorJSON(_ e: TesseraError) -> JSONValue {
        var o: [String: JSONValue] = [
            "code": .string(e.code.rawValue), "message": .string(e.message), "retryable": .bool(e.retryable),
        ]
        for (k, v) in e.details where o[k] == nil { o[k] = v }
        return .object(o)
    }

}

/// What a step asks of the client (`enrollment.stepRequired`).
struct StepRequest: Sendable {
    var key: String
    var prompt: String
    /// JSON Schema of the `payload` to submit.
    var input: JSONValue
    var extra: [String: JSONValue] = [:]

    var json: JSONValue {
        var o = extra
        o["key"] = .string(key); o["prompt"] = .string(prompt); o["input"] = input
        return .object(o)
    }
}

/// Where a step stands after being run or given input.
enum StepResult: Sendable {
    /// Done: these members are merged into transactionData.
    case completed([String: JSONValue])
    case needsInput(StepRequest)
}
