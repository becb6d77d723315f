import CLISupport
import RPC
import TesseraCore

/// What the station's page may ask for. Anything else is refused: the page never names a daemon method.
public enum KioskAction: Sendable, Equatable {
    /// Start the station's workflow (remote), or the workflow an activation token names (it must be the station's).
    case start(activationToken: String?)
    /// Answer the step the daemon asks for now.
    case submit(step: String, payload: JSONValue)
    /// Run the failed step again after a retryable failure.
    case retry
    /// Cancel the enrollment (the person walks away, or presses Cancel).
    case cancel
    /// Back to the start screen from the result or error screen (wipes the page).
    case restart
    /// The person touched the screen or typed: resets the idle timer.
    case touch

    /// Reads the page's request body: `{action: "start"|"submit"|"retry"|"cancel"|"restart"|"touch", …}`.
    public init(json: JSONValue) throws(TesseraError) {
        switch json["action"]?.stringValue {
        case "start":
            let token = json["activationToken"]?.stringValue.map { $0.trimmingWhitespace() }
            self = .start(activationToken: token?.isEmpty == false ? token : nil)
        case "submit":
            guard let step = json["step"]?.stringValue, let payload = json["payload"], payload.objectValue != nil
            else { throw TesseraError(.invalidInput, "submit needs step and an object payload") }
            self = .submit(step: step, payload: payload)
        case "retry": self = .retry
        case "cancel": self = .cancel
        case "restart": self = .restart
        case "touch": self = .touch
        default: throw TesseraError(.invalidInput, "unknown action", details: ["field": "action"])
        }
    }
}

/// The daemon call an action maps to.
public struct KioskCall: Sendable, Equatable {
    public var method: String
    public var params: JSONValue
}

/// The station's state for its one workflow, driven by `enrollment.*` notifications and the page's actions, and
/// the view the page draws from it (`view`). Pure: the bridge does the I/O.
public struct KioskSession: Sendable {
    /// The methods the station ever calls on tesserad; nothing else goes through the bridge.
    public static let allowedMethods: Set<String> = [
        "enrollment.subscribe", "enrollment.start", "enrollment.submit", "enrollment.retry", "enrollment.cancel",
        "enrollment.transactionData", "mrz.read",
    ]
    /// Steps that read a document from a reader ("place your document" with progress).
    static let documentSteps: Set<String> = ["NFC_PHASE", "MDOC_PHASE"]

    enum Phase: Sendable, Equatable {
        case start
        /// `enrollment.start` sent, its answer not yet here.
        case starting
        /// The daemon works on a step (`busy`); `progress` for document reads.
        case working(step: String)
        /// The daemon waits for the person: the step's `stepRequired` params.
        case waiting(step: String, required: JSONValue)
        case failed(error: JSONValue, retryable: Bool)
        case done
    }

    public let workflow: String
    /// Start with `force: true`: an enrollment this uid left active (a kiosk that stopped mid-way) is interrupted.
    public let takeOver: Bool
    private(set) var phase: Phase = .start
    public private(set) var enrollmentId: String?
    private var steps: [String] = []
    private var completed: [String] = []
    /// A rejected answer to the waiting step (code, message, field, attemptsLeft), shown on its screen.
    private var answerError: JSONValue?
    /// The step whose last answer was refused while the daemon went back to waiting for it: a `busy` for it that
    /// arrives after the refusal is stale (the daemon does not ask again with a new `stepRequired`).
    private var refusedStep: String?
    /// The `stepRequired` params of the step asked for last, to ask again after a refused answer.
    private var lastRequired: JSONValue?
    private var progress: DocumentProgress?
    /// The chip's portrait ({mediaType, data}), kept in memory for the result screen.
    private var portrait: JSONValue?
    private var result: JSONValue?
    /// The catalogue key of a line for the start screen after a cancel or timeout (never personal data).
    private var notice: String?
    /// The workflow's own wording (`messages` of its config, from `enrollment.start`): language → key → text.
    private var messages: JSONValue?
    /// Bumped on every change; the page ignores older views.
    public private(set) var version = 0

    public init(workflow: String, takeOver: Bool = false) {
        self.workflow = workflow
        self.takeOver = takeOver
    }

    /// Whether the station waits for the person (the idle timeout runs): a step's input, a failure or the result.
    public var waitsForPerson: Bool {
        switch phase {
        case .waiting, .failed, .done: return true
        case .start, .starting, .working: return false
        }
    }

    /// Whether the station waits for document access data (a step that asks for an MRZ): the camera frames of
    /// its screen may go to the MRZ reader.
    public var waitsForDocumentAccess: Bool {
        guard case .waiting(_, let required) = phase else { return false }
        return InputForm.alternatives(required["input"] ?? .null).alternatives.contains {
            $0.contains { $0.name == "mrz" }
        }
    }

    /// Whether tesserad holds an enrollment this station started and that has not ended.
    public var enrollmentActive: Bool {
        switch phase {
        case .starting, .working, .waiting: return true
        case .failed(_, let retryable): return retryable
        case .start, .done: return false
        }
    }

    // MARK: Actions

    /// The daemon call for `action` in the current state, or nil when the action needs none (`touch`, `restart`).
    /// Throws when the action does not fit the state (a submit for another step, a retry without a retryable
    /// failure, a second start).
    public mutating func call(for action: KioskAction) throws(TesseraError) -> KioskCall? {
        switch action {
        case .touch:
            return nil
        case .restart:
            guard !enrollmentActive else {
                throw TesseraError(.enrollmentActive, "cancel the enrollment first")
            }
            wipe(notice: nil)
            return nil
        case .start(let token):
            guard phase == .start else { throw TesseraError(.enrollmentActive, "an enrollment is running") }
            wipe(notice: nil)
            phase = .starting
            let type: JSONValue =
                token.map { ["activationToken": .string($0)] } ?? ["remote": ["candidate": .string(workflow)]]
            var params: [String: JSONValue] = ["type": type]
            if takeOver { params["force"] = true }
            return KioskCall(method: "enrollment.start", params: .object(params))
        case .submit(let step, let payload):
            guard case .waiting(let waiting, _) = phase, waiting == step else {
                throw TesseraError(
                    .stepNotExpected, "the station does not wait for \(step)", details: ["field": "step"])
            }
            refusedStep = nil
            return KioskCall(
                method: "enrollment.submit", params: ["stepKey": .string(step), "payload": payload])
        case .retry:
            guard case .failed(_, true) = phase else { throw TesseraError(.notRetryable, "nothing to retry") }
            refusedStep = nil
            return KioskCall(method: "enrollment.retry", params: [:])
        case .cancel:
            guard enrollmentActive else { throw TesseraError(.noActiveEnrollment, "no enrollment to cancel") }
            return KioskCall(method: "enrollment.cancel", params: [:])
        }
    }

    /// The answer to `enrollment.start`: the enrollment this station follows from now on.
    public mutating func started(_ result: JSONValue) throws(TesseraError) {
        let started = result["workflow"]?.stringValue
        enrollmentId = result["enrollmentId"]?.stringValue
        steps = (result["steps"]?.arrayValue ?? []).compactMap { $0.stringValue ?? $0["key"]?.stringValue }
        messages = result["messages"]?.objectValue == nil ? nil : result["messages"]
        if started != workflow {
            // An activation token for another workflow: the caller cancels it.
            throw TesseraError(
                .candidateUnavailable, "this station runs the workflow \(workflow), not \(started ?? "?")")
        }
        if phase == .starting { phase = .working(step: steps.first ?? "") }
        changed()
    }

    /// A call the page asked for failed: a rejected answer stays on its step, a failed start shows the error.
    public mutating func callFailed(_ action: KioskAction, _ error: TesseraError) {
        switch action {
        case .start:
            if phase == .starting || enrollmentId == nil {
                phase = .failed(error: Self.errorJSON(error), retryable: false)
            }
        case .submit(let step, _):
            // The daemon waits for the step again unless the error ended the enrollment (`finished` says so).
            switch phase {
            case .waiting(step, _):
                break
            case .working(step):
                guard let lastRequired, lastRequired["key"]?.stringValue == step else { return }
                phase = .waiting(step: step, required: lastRequired)
            default:
                return
            }
            refusedStep = step
            answerError = Self.errorJSON(error)
        default:
            return
        }
        changed()
    }

    /// The answer to a submit was accepted: the step's error line goes.
    public mutating func submitted() {
        answerError = nil
        changed()
    }

    /// Wipes every personal datum: back to the start screen, with `notice` (a catalogue key, e.g. `notice.idle`).
    public mutating func wipe(notice: String?) {
        messages = nil
        phase = .start
        enrollmentId = nil
        steps = []
        completed = []
        answerError = nil
        refusedStep = nil
        lastRequired = nil
        progress = nil
        portrait = nil
        result = nil
        self.notice = notice
        changed()
    }

    /// The portrait from `enrollment.transactionData` after a document step (`facePortrait`, `{mediaType, data}`:
    /// the daemon keeps it when the workflow matches faces). An answer for another enrollment than the one shown
    /// (one that ended while the answer was on its way) is dropped.
    public mutating func transactionData(_ data: JSONValue) {
        guard let enrollmentId, data["enrollmentId"]?.stringValue == enrollmentId,
            let p = data["data"]?["facePortrait"], p["data"]?.stringValue != nil
        else { return }
        portrait = p
        changed()
    }

    // MARK: Notifications

    /// What the bridge does after a notification.
    public enum Effect: Sendable, Equatable {
        /// Fetch `enrollment.transactionData` (a document step completed: the portrait, if kept).
        case fetchTransactionData
        /// The enrollment ended.
        case finished(outcome: String, errorCode: String?)
    }

    /// Applies an `enrollment.*` notification of this station's enrollment; others are ignored.
    public mutating func apply(_ n: RPCNotification) -> [Effect] {
        let p = n.params
        guard n.method.hasPrefix("enrollment."), let id = p["enrollmentId"]?.stringValue else { return [] }
        if let enrollmentId, id != enrollmentId { return [] }
        if enrollmentId == nil {
            // Before the start's answer: only the enrollment this station is starting, which `started` announces
            // first (a forced start's `finished` of the enrollment it interrupted comes before it).
            guard phase == .starting, n.method == "enrollment.started" else { return [] }
            enrollmentId = id
        }
        var effects: [Effect] = []
        switch n.method {
        case "enrollment.started":
            if let s = p["steps"]?.arrayValue {
                steps = s.compactMap { $0.stringValue ?? $0["key"]?.stringValue }
            }
        case "enrollment.busy":
            let step = p["step"]?.stringValue ?? ""
            if refusedStep == step { return [] }
            if case .working(step) = phase {
            } else {
                phase = .working(step: step)
                progress = Self.documentSteps.contains(step) ? DocumentProgress() : nil
            }
            answerError = nil
        case "enrollment.stepRequired":
            guard let key = p["key"]?.stringValue else { return [] }
            if case .waiting(key, _) = phase {} else { answerError = nil }
            phase = .waiting(step: key, required: p)
            lastRequired = p
            refusedStep = nil
            progress = nil
        case "enrollment.progress":
            let step = p["step"]?.stringValue ?? ""
            if refusedStep == step { return [] }
            if case .working(step) = phase {} else { phase = .working(step: step) }
            if progress == nil { progress = DocumentProgress() }
            progress?.apply(p["progress"] ?? .null)
        case "enrollment.stepCompleted":
            let key = p["key"]?.stringValue ?? ""
            if !completed.contains(key) { completed.append(key) }
            if Self.documentSteps.contains(key) { effects.append(.fetchTransactionData) }
            if case .waiting(key, _) = phase { phase = .working(step: "") }
            answerError = nil
        case "enrollment.finished":
            let outcome = p["outcome"]?.stringValue ?? "failed"
            let error = p["error"]
            refusedStep = nil
            effects.append(.finished(outcome: outcome, errorCode: error?["code"]?.stringValue))
            progress = nil
            switch outcome {
            case "success":
                phase = .done
                result = Self.resultSummary(p)
            case "cancelled", "interrupted":
                wipe(notice: "notice.cancelled")
                return effects
            default:
                let retryable = outcome == "failedWithRetryPossibility"
                var e: [String: JSONValue] = [
                    "code": error?["code"] ?? "INTERNAL",
                    "message": error?["message"] ?? .string("the enrollment ended: \(outcome)"),
                ]
                if let step = p["step"] { e["step"] = step }
                phase = .failed(error: .object(e), retryable: retryable)
            }
        default:
            return []
        }
        changed()
        return effects
    }

    private mutating func changed() { version += 1 }

    static func errorJSON(_ e: TesseraError) -> JSONValue {
        var o: [String: JSONValue] = [
            "code": .string(e.code.rawValue), "message": .string(e.message), "retryable": .bool(e.retryable),
        ]
        if let field = e.details["field"] { o["field"] = field }
        if let left = e.details["attemptsLeft"] { o["attemptsLeft"] = left }
        return .object(o)
    }

    /// The result screen's content: the name and document from the chip, the passkey's relying party.
    static func resultSummary(_ p: JSONValue) -> JSONValue {
        var r: [String: JSONValue] = [:]
        if let d = p["document"] {
            for k in [
                "surname", "givenNames", "documentType", "issuingState", "documentNumber", "passiveAuthentication",
            ] {
                if let v = d[k] { r[k] = v }
            }
        }
        if let c = p["credential"] {
            r["rpId"] = c["rpId"] ?? .null
            r["credentialId"] = c["credentialId"] ?? .null
        }
        return .object(r)
    }

    // MARK: The view

    /// The screen the page draws: `screen` is the root's `data-step` (`start`, a step key, `done`, `error`) and
    /// `kind` how it is drawn (`start`, `form`, `camera`, `document`, `working`, `done`, `error`).
    public var view: JSONValue {
        var v: [String: JSONValue] = [
            "version": .number(Double(version)), "workflow": .string(workflow),
            "steps": .array(steps.map { .string($0) }), "completed": .array(completed.map { .string($0) }),
        ]
        if let messages { v["messages"] = messages }
        switch phase {
        case .start:
            v["screen"] = "start"
            v["kind"] = "start"
            if let notice { v["notice"] = .string(notice) }
        case .starting:
            v["screen"] = "start"
            v["kind"] = "working"
        case .working(let step):
            v["screen"] = .string(step.isEmpty ? "working" : step)
            if let progress {
                v["kind"] = "document"
                v["progress"] = progress.json
            } else {
                v["kind"] = "working"
            }
        case .waiting(let step, let required):
            v["screen"] = .string(step)
            let (alternatives, resend) = InputForm.alternatives(required["input"] ?? .null)
            // A step that takes images ({mediaType, data} items, as the face steps do) is the camera.
            let imageField = alternatives.lazy.flatMap { $0 }.first { $0.kind == .imageFiles }
            v["kind"] = imageField == nil ? "form" : "camera"
            var form: [String: JSONValue] = ["prompt": required["prompt"] ?? .string(step)]
            if let imageField { form["imageField"] = .string(imageField.name) }
            form["alternatives"] = .array(
                alternatives.map { fields in .array(fields.filter { $0.kind != .imageFiles }.map(Self.field)) })
            form["offersResend"] = .bool(resend)
            for k in ["to", "expiresAt", "attemptsLeft", "retriesLeft", "challenge", "tokenId"] {
                if let x = required[k] { form[k] = x }
            }
            v["form"] = .object(form)
            if let answerError { v["answerError"] = answerError }
        case .failed(let error, let retryable):
            v["screen"] = "error"
            v["kind"] = "error"
            var e = error.objectValue ?? [:]
            e["retryable"] = .bool(retryable)
            v["error"] = .object(e)
        case .done:
            v["screen"] = "done"
            v["kind"] = "done"
            v["result"] = result ?? [:]
            if let portrait { v["portrait"] = portrait }
        }
        return .object(v)
    }

    static func field(_ f: FormField) -> JSONValue {
        let kind: String
        switch f.kind {
        case .boolean: kind = "boolean"
        case .integer: kind = "integer"
        case .number: kind = "number"
        case .string: kind = "string"
        case .imageFiles: kind = "images"
        }
        var o: [String: JSONValue] = [
            "name": .string(f.name), "label": .string(f.label), "kind": .string(kind), "optional": .bool(f.optional),
            "secret": .bool(f.secret), "choices": .array(f.choices.map { .string($0) }),
        ]
        if let c = f.constant { o["constant"] = c }
        return .object(o)
    }
}

/// Live progress of a document read, in the four stages a person is shown (connecting, details, photo, checking
/// the document is genuine), from the `documents.progress` events. File names stay here: the page never shows them.
struct DocumentProgress: Sendable {
    static let stages = ["connect", "details", "photo", "verify"]
    var waitingForCard = true
    /// Index into `stages`; only moves forward.
    var stage = 0
    /// How far the current stage is, 0…1 (the bytes of the file being read).
    var fraction = 0.0
    /// Files in the order first seen, with bytes read and total.
    var files: [(name: String, read: Int, total: Int)] = []

    mutating func apply(_ event: JSONValue) {
        let step = event["step"]?.stringValue
        if step == "waitingForCard" {
            waitingForCard = true
            return
        }
        waitingForCard = false
        let file = event["file"]?.stringValue
        let next: Int
        switch (step, file) {
        case (_, "DG2"?): next = 2
        case ("verify"?, _): next = 3
        case ("read"?, _): next = 1
        case (nil, _) where event["phase"] != nil: next = 1
        default: next = 0
        }
        if next > stage {
            stage = next
            fraction = 0
        }
        guard let file else { return }
        let read = event["bytesRead"]?.intValue ?? 0
        let total = event["totalBytes"]?.intValue ?? 0
        if let i = files.firstIndex(where: { $0.name == file }) {
            files[i].read = max(files[i].read, read)
            if total > 0 { files[i].total = total }
        } else {
            files.append((file, read, total))
        }
        if next == stage, total > 0 { fraction = min(1, Double(read) / Double(total)) }
    }

    var json: JSONValue {
        [
            "waitingForCard": .bool(waitingForCard), "stage": .string(Self.stages[stage]),
            "stages": .array(Self.stages.map { .string($0) }),
            "percent": .number(
                waitingForCard ? 0 : ((Double(stage) + fraction) * 100 / Double(Self.stages.count)).rounded()),
            "files": .array(
                files.map {
                    [
                        "file": .string($0.name), "bytesRead": .number(Double($0.read)),
                        "totalBytes": .number(Double($0.total)),
                    ]
                }),
        ]
    }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}
