import CLISupport
import FoundationEssentials
import RPC
import TesseraCore

/// What the session's single loop reacts to, in arrival order.
private enum StationEvent: Sendable {
    case notification(RPCNotification)
    case connectionClosed
    /// A line of standard input; nil at end of input.
    case line(String?)
    case interrupt
}

/// The questions for one required step: one alternative of the schema, field by field.
private struct PendingStep {
    var key: String
    var alternatives: [[FormField]]
    /// Index into `alternatives` once chosen.
    var chosen: Int?
    var fieldIndex = 0
    var values: [String: JSONValue] = [:]
    /// Lines of a multi-line MRZ typed one after the other.
    var mrzLines: [String] = []
    /// An empty line at a one-time code asks for a new one (`{resend: true}`).
    var offersResend: Bool
    /// When set, only this field is asked again (after INVALID_INPUT naming it).
    var onlyField: String?
    /// A step without input fields is confirmed with Enter.
    var confirmed = false

    var fields: [FormField] { chosen.map { alternatives[$0] } ?? [] }
}

/// The interactive loop: notifications, terminal input and signals are handled one at a time, in arrival order.
final class StationSession {
    enum Start {
        case start(JSONValue)
        case deepLink(String)
        case resume
    }

    private enum SubmitResult { case accepted, askAgain(field: String?), over }

    private let client: RPCClient
    private let json: Bool
    private let out: StationRenderer
    private let answers: AnswerBook
    private let events: AsyncStream<StationEvent>
    private let sink: AsyncStream<StationEvent>.Continuation
    private let terminal: StationTerminal

    private var enrollmentId: String?
    private var stepCount = 0
    private var pending: PendingStep?
    /// The input schema of each step asked for (to ask again after a rejected answer).
    private var schemas: [String: JSONValue] = [:]
    /// Answers from the file already given: each is used once (a step asked again is asked on the terminal).
    private var usedAnswers: Set<String> = []
    /// The `enrollment.finished` params while "retry? [y/N]" waits for its answer.
    private var retryQuestion: JSONValue?
    private var cancelling = false

    init(client: RPCClient, json: Bool, answers: AnswerBook) {
        self.client = client
        self.json = json
        self.out = StationRenderer(json: json)
        self.answers = answers
        let (events, sink) = AsyncStream.makeStream(of: StationEvent.self)
        self.events = events
        self.sink = sink
        terminal = StationTerminal(lines: { sink.yield(.line($0)) })
    }

    func run(_ start: Start) async -> Int32 {
        let sink = self.sink
        let notifications = client.notifications
        let forward = Task {
            for await n in notifications { sink.yield(.notification(n)) }
            sink.yield(.connectionClosed)
        }
        let stopInterrupts = StationTerminal.onInterrupt { sink.yield(.interrupt) }
        defer {
            forward.cancel()
            stopInterrupts()
            terminal.restore()
            out.clearProgress()
        }

        guard await call("enrollment.subscribe", [:]) != nil else { return callFailureStatus }
        let started: JSONValue
        switch start {
        case .start(let params):
            guard let r = await call("enrollment.start", params) else { return callFailureStatus }
            started = r
        case .resume:
            guard let r = await call("enrollment.resume", [:]) else { return callFailureStatus }
            started = r
            if !json {
                let done = r["completedSteps"]?.arrayValue?.count ?? 0
                out.say(
                    "resuming enrollment \(r["enrollmentId"]?.stringValue ?? "?") (workflow \(r["workflow"]?.stringValue ?? "?"))"
                        + " at \(r["step"]?.stringValue ?? "?"); \(done) step\(done == 1 ? "" : "s") done before")
            }
        case .deepLink(let url):
            guard let r = await call("enrollment.handleDeepLink", ["url": .string(url)]) else {
                return callFailureStatus
            }
            guard r["consumed"]?.boolValue == true else {
                if !json {
                    out.say("the deep link was not consumed (not a link for this station, or no step waiting for it)")
                }
                return 1
            }
            guard r["action"]?.stringValue == "start" else {
                if !json { out.say("one-time code accepted (enrollment \(r["enrollmentId"]?.stringValue ?? "?"))") }
                return 0
            }
            started = r
        }
        enrollmentId = started["enrollmentId"]?.stringValue
        stepCount = started["steps"]?.arrayValue?.count ?? 0

        for await event in events {
            let status: Int32?
            switch event {
            case .notification(let n):
                status = await handle(n)
            case .line(let text):
                status = await handleLine(text)
            case .interrupt:
                if cancelling { return 130 }
                status = await cancel()
            case .connectionClosed:
                terminal.restore()
                out.clearProgress()
                out.stderr(
                    "error: DAEMON_UNAVAILABLE: the connection to tesserad closed;"
                        + " `tessera enroll-station --resume` continues the enrollment\n")
                status = 3
            }
            if let status { return status }
        }
        return 3
    }

    // MARK: Notifications

    private func handle(_ n: RPCNotification) async -> Int32? {
        guard n.method.hasPrefix("enrollment.") else { return nil }
        let p = n.params
        if let id = p["enrollmentId"]?.stringValue, let enrollmentId, id != enrollmentId { return nil }
        out.render(n, stepCount: stepCount)
        switch n.method {
        case "enrollment.started":
            if let steps = p["steps"]?.arrayValue { stepCount = steps.count }
        case "enrollment.stepRequired":
            guard let key = p["key"]?.stringValue else { return nil }
            await require(key, p["input"] ?? .null)
        case "enrollment.stepCompleted":
            if let key = pending?.key, key == p["key"]?.stringValue { dropPending(answeredElsewhere: true) }
        case "enrollment.busy":
            if let key = pending?.key, key != p["step"]?.stringValue { dropPending(answeredElsewhere: true) }
        case "enrollment.finished":
            dropPending(answeredElsewhere: false)
            return await finished(p)
        default:
            break
        }
        return nil
    }

    private func finished(_ p: JSONValue) async -> Int32? {
        switch p["outcome"]?.stringValue ?? "" {
        case "success":
            return outcome(p, 0)
        case "cancelled", "interrupted":
            return outcome(p, 6)
        case "failedWithRetryPossibility" where !cancelling:
            if let retry = answers.retry, !usedAnswers.contains("retry") {
                usedAnswers.insert("retry")
                return retry ? await retryEnrollment(p) : outcome(p, 5)
            }
            retryQuestion = p
            ask("retry? [y/N] ", secret: false)
            return nil
        case "failedWithRetryPossibility":
            return outcome(p, 5)
        default:
            return outcome(p, 4)
        }
    }

    /// The last line with --json; the exit status.
    private func outcome(_ p: JSONValue, _ status: Int32) -> Int32 {
        out.outcome(p, status)
        return status
    }

    private func retryEnrollment(_ finished: JSONValue) async -> Int32? {
        retryQuestion = nil
        guard let r = await call("enrollment.retry", [:]) else { return outcome(finished, 5) }
        if let id = r["enrollmentId"]?.stringValue { enrollmentId = id }
        if !json { out.say("retrying at \(r["step"]?.stringValue ?? "?")") }
        return nil
    }

    private func cancel() async -> Int32? {
        cancelling = true
        retryQuestion = nil
        pending = nil
        terminal.restore()
        out.clearProgress()
        out.stderr("cancelling…\n")
        guard await call("enrollment.cancel", [:]) != nil else { return 3 }
        return nil  // enrollment.finished (cancelled) follows
    }

    // MARK: Steps

    private func require(_ key: String, _ schema: JSONValue) async {
        dropPending(answeredElsewhere: false)
        schemas[key] = schema
        if let payload = answers.payloads[key], !usedAnswers.contains(key) {
            usedAnswers.insert(key)
            switch await submit(key, payload) {
            case .accepted, .over: return
            case .askAgain: break
            }
        }
        await startForm(key)
    }

    private func startForm(_ key: String, keeping previous: PendingStep? = nil, onlyField: String? = nil) async {
        var (alternatives, resend) = InputForm.alternatives(schemas[key] ?? .null)
        if alternatives.isEmpty { alternatives = [[]] }
        var step = PendingStep(
            key: key, alternatives: alternatives, chosen: alternatives.count == 1 ? 0 : nil,
            offersResend: resend)
        if let previous, let onlyField {
            step.chosen = previous.chosen
            step.values = previous.values
            step.onlyField = onlyField
            step.values[onlyField] = nil
        }
        pending = step
        await advance()
    }

    /// Asks the next question of the pending step, or submits it once every field has its value.
    private func advance() async {
        guard var step = pending else { return }
        guard let chosen = step.chosen else {
            let menu = step.alternatives.enumerated().map { i, fields in
                "\(i + 1)) "
                    + (fields.isEmpty ? "nothing" : fields.filter { !$0.optional }.map(\.name).joined(separator: ", "))
            }
            ask("  choose: \(menu.joined(separator: "  ")): ", secret: false)
            return
        }
        let fields = step.alternatives[chosen]
        while step.fieldIndex < fields.count {
            let f = fields[step.fieldIndex]
            if let only = step.onlyField, f.name != only {
                step.fieldIndex += 1
                continue
            }
            if let c = f.constant, f.kind != .boolean {
                step.values[f.name] = c
                step.fieldIndex += 1
                continue
            }
            pending = step
            var label = "  \(f.label)"
            if !f.choices.isEmpty { label += " [\(f.choices.joined(separator: "/"))]" }
            if f.kind == .boolean { label += " [y/n]" }
            if f.kind == .imageFiles { label += " (image files, separated by spaces)" }
            if step.offersResend, f.name == "otp" {
                label += " (empty line: send a new code)"
            } else if f.optional {
                label += " (optional)"
            }
            if f.name == "mrz", !step.mrzLines.isEmpty { label = "  mrz line \(step.mrzLines.count + 1)" }
            ask(label + ": ", secret: f.secret)
            return
        }
        if fields.isEmpty, !step.confirmed {
            pending = step
            ask("  press Enter to continue: ", secret: false)
            return
        }
        pending = nil
        await submitAndFollow(step, .object(step.values))
    }

    private func submitAndFollow(_ step: PendingStep, _ payload: JSONValue) async {
        switch await submit(step.key, payload) {
        case .accepted, .over:
            return
        case .askAgain(let field):
            let known = field.flatMap { f in step.fields.contains { $0.name == f } ? f : nil }
            await startForm(step.key, keeping: step, onlyField: known)
        }
    }

    private func handleLine(_ text: String?) async -> Int32? {
        terminal.restore()
        if let finished = retryQuestion {
            let yes = ["y", "yes"].contains((text ?? "").trimmingWhitespace().lowercased())
            return yes ? await retryEnrollment(finished) : outcome(finished, 5)
        }
        guard var step = pending else { return nil }
        guard let text else {
            out.stderr("end of input: ")
            return await cancel()
        }
        let trimmed = text.trimmingWhitespace()
        guard let chosen = step.chosen else {
            if let n = Int(trimmed), (1...step.alternatives.count).contains(n) {
                step.chosen = n - 1
            } else {
                out.stderr("  answer 1 to \(step.alternatives.count)\n")
            }
            pending = step
            await advance()
            return nil
        }
        let fields = step.alternatives[chosen]
        if fields.isEmpty {
            step.confirmed = true
        } else if fields[step.fieldIndex].name == "otp", step.offersResend, trimmed.isEmpty {
            pending = nil
            await submitAndFollow(step, ["resend": true])
            return nil
        } else {
            let f = fields[step.fieldIndex]
            switch InputForm.parse(trimmed, f, mrzLines: &step.mrzLines) {
            case .value(let v) where f.kind == .imageFiles:
                do {
                    step.values[f.name] = .array(try (v?.arrayValue ?? []).compactMap(\.stringValue).map(faceImageFile))
                    step.fieldIndex += 1
                } catch {
                    out.stderr("  \(error.message)\n")
                }
            case .value(let v):
                step.values[f.name] = v
                step.fieldIndex += 1
            case .more:
                break
            case .invalid(let why):
                out.stderr("  \(why)\n")
            }
        }
        pending = step
        await advance()
        return nil
    }

    private func submit(_ key: String, _ payload: JSONValue) async -> SubmitResult {
        do {
            let r = try await client.call("enrollment.submit", ["stepKey": .string(key), "payload": payload])
            out.callResult("enrollment.submit", r)
            return .accepted
        } catch {
            out.report(error, call: "enrollment.submit")
            switch error.code.rawValue {
            case "INVALID_INPUT", "OTP_INVALID", "PIN_INVALID", "MRZ_INVALID":
                return .askAgain(field: error.details["field"]?.stringValue)
            case "OTP_EXPIRED", "OTP_ATTEMPTS_EXCEEDED", "STEP_NOT_EXPECTED", "NO_ACTIVE_ENROLLMENT":
                return .over
            default:
                // Still waiting for this step? Then ask again; otherwise the notifications tell what happened.
                guard let s = try? await client.call("enrollment.status"), s["state"]?.stringValue == "waitingForInput",
                    s["required"]?["key"]?.stringValue == key
                else { return .over }
                return .askAgain(field: nil)
            }
        }
    }

    private func dropPending(answeredElsewhere: Bool) {
        guard pending != nil else { return }
        pending = nil
        terminal.restore()
        if answeredElsewhere, !json { out.stderr("(answered elsewhere)\n") }
    }

    // MARK: Input and output

    private func ask(_ prompt: String, secret: Bool) {
        terminal.ask(prompt, secret: secret)
    }

    /// The error of the last call that failed.
    private var lastCallError: TesseraError?

    /// Exit status after a failed call: 3 when the daemon is unreachable, else 2.
    private var callFailureStatus: Int32 { lastCallError?.code == .daemonUnavailable ? 3 : 2 }

    private func call(_ method: String, _ params: JSONValue) async -> JSONValue? {
        do {
            let r = try await client.call(method, params)
            out.callResult(method, r)
            return r
        } catch {
            lastCallError = error
            out.report(error, call: method)
            return nil
        }
    }
}
