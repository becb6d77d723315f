import ArgumentParser
import Foundation
import RPC
import TesseraCore
#if canImport(Glibc)
import Glibc
#endif

/// `tessera enroll-station`: runs a kiosk enrollment workflow (docs/ENROLLMENT.md) in a terminal.
struct EnrollStation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll-station",
        abstract: "Run a kiosk enrollment workflow in this terminal (enrollment.*).",
        discussion: """
        Starts an enrollment (a configured remote workflow with --workflow, an activation token with --token or a tessera:// deep link with --deep-link) or continues the active or suspended one (--resume), then follows it: every notification of the enrollment is printed as a line (busy, idle, progress of the chip read, each step required and completed), and each step the daemon asks for is answered on the terminal, one line per field of the step's input schema: text as typed, yes/no fields as y or n, PINs and one-time codes without echo when standard input is a terminal. An MRZ is typed as its lines separated by spaces, or one line after the other. At a one-time code an empty line asks for a new code. A rejected answer (INVALID_INPUT, OTP_INVALID with the attempts left, PIN_INVALID) is asked again. Steps answered elsewhere (another client, a deep link) are left alone.

        When the enrollment ends with failedWithRetryPossibility (card removed, wrong MRZ, OTP expired, ...) the command asks "retry? [y/N]" and, on y, runs enrollment.retry and carries on. Ctrl-C (SIGINT, SIGTERM) cancels the enrollment (enrollment.cancel); a second Ctrl-C leaves at once. End of input while a step waits cancels it too.

        --answers FILE answers steps without asking: a JSON object mapping step keys to the enrollment.submit payload, e.g. {"EMAIL_INFO": {"email": "anna@example.com"}, "NFC_MRZ": {"can": "123456"}}; "retry": true or false answers the retry question. Each answer is used once: a step asked again (its answer rejected, or after a retry) and steps not in the file are asked on the terminal.

        --json prints one JSON object per line instead: {"call": METHOD, "result": ...} or {"call": METHOD, "error": ...} for the command's own calls, {"notification": METHOD, "params": ...} for each notification, and last the outcome: the enrollment.finished params plus "exitStatus". Questions go to stderr in both modes.

        EXAMPLE SESSION
          $ tessera enroll-station --workflow employee-badge
          enrollment 2c1f… started: workflow employee-badge (8 steps: EMAIL_INFO, …)
          step EMAIL_INFO: Your email address
            email: anna@example.com
          done: EMAIL_INFO (1/8)
          step PHONE_INFO: Your mobile phone number
            phone: +49 151 2345 6789
          done: PHONE_INFO (2/8)
          step PHONE_OTP: Enter the code sent to +49•••89 (valid until 10:42:07Z, 5 attempts left)
            one-time code (empty line: send a new code):
          error: OTP_INVALID: wrong code (4 attempts left)
            one-time code (empty line: send a new code):
          done: PHONE_OTP (3/8)
          step NFC_MRZ: The MRZ of your document
            choose: 1) mrz  2) documentNumber, dateOfBirth, dateOfExpiry: 2
            documentNumber: L898902C3
            dateOfBirth: 740812
            dateOfExpiry: 120415
          done: NFC_MRZ (4/8)
          working on NFC_PHASE (this can take a while)…
            chip: reading DG2 [##################............] 9000/15324 bytes
          done: NFC_PHASE (5/8)
          …
          step PASSKEY_CREATION: Your token PIN (token softhsm:…)
            pin:
          done: PASSKEY_CREATION (8/8)
          enrollment succeeded
            passkey 5x2mX… for badge.example.com on token softhsm:…
            document P UTO L898902C3: ERIKSSON, ANNA MARIA
            passive authentication: valid

        EXIT STATUS
          0 success
          1 the deep link was not consumed
          2 daemon error (ENROLLMENT_ACTIVE, CANDIDATE_UNAVAILABLE, ACTIVATION_TOKEN_*, ...)
          3 the daemon is unreachable or went away (enroll-station --resume continues an
            enrollment the daemon suspended)
          4 failed or expired
          5 failed with retry possible, and not retried
          6 cancelled or interrupted
          64 usage error

        EXAMPLES
          tessera enroll-station --workflow employee-badge
          tessera enroll-station --token "$JWS" --force
          tessera enroll-station --deep-link 'tessera://enroll?token=eyJ…'
          tessera enroll-station --deep-link 'tessera://phone-binding?otp=123456'
          tessera enroll-station --resume
          tessera enroll-station --workflow employee-badge --answers answers.json --json
        """)

    @OptionGroup var globals: GlobalOptions
    @Option(help: ArgumentHelp("Start this configured workflow without an activation token (a remote workflow; see enrollment.candidates).", valueName: "NAME"))
    var workflow: String?
    @Option(help: ArgumentHelp("Start the workflow named by this activation token (a compact JWS).", valueName: "JWS"))
    var token: String?
    @Option(name: .customLong("deep-link"), help: ArgumentHelp("Hand a tessera:// link to the daemon (enrollment.handleDeepLink): tessera://enroll?token=… starts and is followed; tessera://phone-binding?otp=… submits the code and exits.", valueName: "URL"))
    var deepLink: String?
    @Flag(help: "Continue the active enrollment, or the one a daemon restart suspended (enrollment.resume).")
    var resume = false
    @Flag(help: "Interrupt an active enrollment first (its outcome becomes interrupted).")
    var force = false
    @Option(name: .customLong("user-verification"), help: ArgumentHelp("required, preferred or discouraged: for the passkey step (default: the daemon's, preferred).", valueName: "V"))
    var userVerification: String?
    @Option(help: ArgumentHelp("JSON object of answers: step key → submit payload (and \"retry\": true|false).", valueName: "FILE"))
    var answers: String?

    func validate() throws {
        let modes = [workflow != nil, token != nil, deepLink != nil, resume].filter { $0 }.count
        guard modes == 1 else { throw ValidationError("give exactly one of --workflow, --token, --deep-link or --resume") }
        if let userVerification, !["required", "preferred", "discouraged"].contains(userVerification) {
            throw ValidationError("--user-verification must be required, preferred or discouraged")
        }
        if force || userVerification != nil, workflow == nil, token == nil {
            throw ValidationError("--force and --user-verification go with --workflow or --token")
        }
    }

    func run() async throws {
        let book = try AnswerBook.load(answers)
        let client: RPCClient
        do {
            client = try await RPCClient.connect(path: globals.socketPath)
        } catch {
            FileHandle.standardError.write(Data("error: \(error.code.rawValue): \(error.message)\n".utf8))
            throw ExitCode(3)
        }
        let start: StationSession.Start
        if let workflow {
            start = .start(startParams(["remote": ["candidate": .string(workflow)]]))
        } else if let token {
            start = .start(startParams(["activationToken": .string(token)]))
        } else if let deepLink {
            start = .deepLink(deepLink)
        } else {
            start = .resume
        }
        let session = StationSession(client: client, json: globals.json, answers: book)
        let status = await session.run(start)
        await client.close()
        if status != 0 { throw ExitCode(status) }
    }

    private func startParams(_ type: JSONValue) -> JSONValue {
        var p: [String: JSONValue] = ["type": type]
        if force { p["force"] = true }
        if let userVerification { p["userVerification"] = .string(userVerification) }
        return .object(p)
    }
}

/// `--answers FILE`: step key → payload, and optionally "retry": Bool.
struct AnswerBook {
    var payloads: [String: JSONValue] = [:]
    var retry: Bool?

    static func load(_ path: String?) throws -> AnswerBook {
        guard let path else { return AnswerBook() }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read answers file \(path)")
        }
        let value: JSONValue
        do { value = try JSONValue.parse([UInt8](data)) } catch { throw ValidationError("answers file \(path) is not JSON") }
        guard var object = value.objectValue else { throw ValidationError("answers file \(path) must hold a JSON object") }
        var book = AnswerBook()
        if let r = object.removeValue(forKey: "retry") {
            guard let b = r.boolValue else { throw ValidationError("\"retry\" in \(path) must be true or false") }
            book.retry = b
        }
        for (key, payload) in object {
            guard payload.objectValue != nil else { throw ValidationError("the answer for \(key) in \(path) must be a JSON object") }
        }
        book.payloads = object
        return book
    }
}

/// What the session's single loop reacts to, in arrival order.
private enum StationEvent: Sendable {
    case notification(RPCNotification)
    case connectionClosed
    /// A line of standard input; nil at end of input.
    case line(String?)
    case interrupt
}

/// One field of a step's input form, read from its JSON Schema.
private struct FormField {
    enum Kind { case string, boolean, integer, number }
    var name: String
    var label: String
    var kind: Kind
    var optional: Bool
    var secret: Bool
    var choices: [String]
    var constant: JSONValue?
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
private final class StationSession {
    enum Start {
        case start(JSONValue)
        case deepLink(String)
        case resume
    }

    private enum SubmitResult { case accepted, askAgain(field: String?), over }
    private enum Parsed { case value(JSONValue?), more, invalid(String) }

    private let client: RPCClient
    private let json: Bool
    private let answers: AnswerBook
    private let events: AsyncStream<StationEvent>
    private let sink: AsyncStream<StationEvent>.Continuation
    private let terminal = TerminalEcho()
    private let stdoutIsTerminal = isatty(1) == 1
    private var stdinStarted = false

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
    private var progressShown = false
    private var lastProgress = ""

    init(client: RPCClient, json: Bool, answers: AnswerBook) {
        self.client = client
        self.json = json
        self.answers = answers
        (events, sink) = AsyncStream.makeStream(of: StationEvent.self)
    }

    func run(_ start: Start) async -> Int32 {
        let sink = self.sink
        let notifications = client.notifications
        let forward = Task {
            for await n in notifications { sink.yield(.notification(n)) }
            sink.yield(.connectionClosed)
        }
        let installed = LabSignals.install()
        let signals = installed.0
        let interrupts = Task {
            for await _ in signals { sink.yield(.interrupt) }
        }
        defer {
            forward.cancel()
            interrupts.cancel()
            installed.1.forEach { $0.cancel() }
            terminal.restore()
            clearProgress()
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
                line("resuming enrollment \(r["enrollmentId"]?.stringValue ?? "?") (workflow \(r["workflow"]?.stringValue ?? "?"))"
                     + " at \(r["step"]?.stringValue ?? "?"); \(done) step\(done == 1 ? "" : "s") done before")
            }
        case .deepLink(let url):
            guard let r = await call("enrollment.handleDeepLink", ["url": .string(url)]) else { return callFailureStatus }
            guard r["consumed"]?.boolValue == true else {
                if !json { line("the deep link was not consumed (not a link for this station, or no step waiting for it)") }
                return 1
            }
            guard r["action"]?.stringValue == "start" else {
                if !json { line("one-time code accepted (enrollment \(r["enrollmentId"]?.stringValue ?? "?"))") }
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
                clearProgress()
                FileHandle.standardError.write(Data(("error: DAEMON_UNAVAILABLE: the connection to tesserad closed;"
                    + " `tessera enroll-station --resume` continues the enrollment\n").utf8))
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
        if json { emit(["notification": .string(n.method), "params": p]) } else { render(n) }
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

    private func render(_ n: RPCNotification) {
        let p = n.params
        if n.method != "enrollment.progress" { clearProgress() }
        switch n.method {
        case "enrollment.started":
            let steps = p["steps"]?.arrayValue ?? []
            let names = steps.compactMap { $0.stringValue ?? $0["key"]?.stringValue }
            line("enrollment \(p["enrollmentId"]?.stringValue ?? "?") \(p["resumed"]?.boolValue == true ? "resumed" : "started"):"
                 + " workflow \(p["workflow"]?.stringValue ?? "?") (\(steps.count) steps: \(names.joined(separator: ", ")))")
        case "enrollment.busy":
            let long = p["expectedInterval"]?.stringValue == "long"
            line("working on \(p["step"]?.stringValue ?? "?")\(long ? " (this can take a while)" : "")…")
        case "enrollment.idle":
            line("idle")
        case "enrollment.progress":
            renderProgress(p["progress"] ?? .null)
        case "enrollment.stepRequired":
            let prompt = p["prompt"]?.stringValue ?? ""
            var extras: [String] = []
            if let to = p["to"]?.stringValue, !prompt.contains(to) { extras.append("sent to \(to)") }
            if let exp = p["expiresAt"]?.stringValue {
                extras.append("valid until \(exp.split(separator: "T").last.map(String.init) ?? exp)")
            }
            if let left = p["attemptsLeft"]?.intValue { extras.append("\(left) attempt\(left == 1 ? "" : "s") left") }
            if let token = p["tokenId"]?.stringValue { extras.append("token \(token)") }
            if let left = p["retriesLeft"]?.intValue { extras.append("\(left) PIN retr\(left == 1 ? "y" : "ies") left") }
            line("step \(p["key"]?.stringValue ?? "?")" + (prompt.isEmpty ? "" : ": \(prompt)")
                 + (extras.isEmpty ? "" : " (\(extras.joined(separator: ", ")))"))
        case "enrollment.stepCompleted":
            let index = p["index"]?.intValue.map { stepCount > 0 ? " (\($0 + 1)/\(stepCount))" : " (\($0 + 1))" } ?? ""
            line("done: \(p["key"]?.stringValue ?? "?")\(index)")
        case "enrollment.finished":
            renderFinished(p)
        default:
            line("\(n.method): \(String(decoding: p.serialized(), as: UTF8.self))")
        }
    }

    /// `documents.progress` events of the chip read: a bar redrawn in place on a terminal, else a line per phase/file.
    private func renderProgress(_ e: JSONValue) {
        let step = e["step"]?.stringValue ?? ""
        var text = "chip: \(step)"
        var key = step
        if let file = e["file"]?.stringValue {
            key += " " + file
            text = "chip: reading \(file)"
            if stdoutIsTerminal, let total = e["totalBytes"]?.intValue, total > 0 {
                let done = e["bytesRead"]?.intValue ?? 0
                let width = 30
                let filled = min(width, done * width / total)
                text += " [" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
                    + "] \(done)/\(total) bytes"
            }
        }
        if stdoutIsTerminal {
            FileHandle.standardOutput.write(Data(("\r\u{1B}[K  " + text).utf8))
            progressShown = true
        } else if key != lastProgress {
            line("  " + text)
        }
        lastProgress = key
    }

    private func clearProgress() {
        if progressShown { FileHandle.standardOutput.write(Data("\r\u{1B}[K".utf8)) }
        progressShown = false
        lastProgress = ""
    }

    private func renderFinished(_ p: JSONValue) {
        let outcome = p["outcome"]?.stringValue ?? "?"
        switch outcome {
        case "success": line("enrollment succeeded")
        case "failedWithRetryPossibility": line("enrollment failed (retry possible)")
        default: line("enrollment \(outcome)")
        }
        if let e = p["error"], !e.isNull {
            line("  \(e["code"]?.stringValue ?? "?"): \(e["message"]?.stringValue ?? "")")
            for m in e["mismatches"]?.arrayValue ?? e["data"]?["mismatches"]?.arrayValue ?? [] {
                line("    \(m["attribute"]?.stringValue ?? "?"): expected \(Self.text(m["expected"])),"
                     + " document has \(Self.text(m["actual"]))")
            }
        }
        if let c = p["credential"], !c.isNull {
            line("  passkey \(c["credentialId"]?.stringValue ?? "?") for \(c["rpId"]?.stringValue ?? "?")"
                 + " on token \(c["tokenId"]?.stringValue ?? "?")")
        }
        if let d = p["document"], !d.isNull {
            let name = [d["surname"]?.stringValue, d["givenNames"]?.stringValue].compactMap { $0 }.joined(separator: ", ")
            let pa = d["passiveAuthentication"]?["status"] ?? d["passiveAuthentication"]
            line("  document \(d["documentType"]?.stringValue ?? "?") \(d["issuingState"]?.stringValue ?? "?")"
                 + " \(d["documentNumber"]?.stringValue ?? "?"): \(name)")
            line("  passive authentication: \(Self.text(pa))")
        }
    }

    private static func text(_ v: JSONValue?) -> String {
        guard let v, !v.isNull else { return "-" }
        return v.stringValue ?? String(decoding: v.serialized(), as: UTF8.self)
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
        if json {
            var o = p.objectValue ?? [:]
            o["exitStatus"] = .number(Double(status))
            emit(.object(o))
        }
        return status
    }

    private func retryEnrollment(_ finished: JSONValue) async -> Int32? {
        retryQuestion = nil
        guard let r = await call("enrollment.retry", [:]) else { return outcome(finished, 5) }
        if let id = r["enrollmentId"]?.stringValue { enrollmentId = id }
        if !json { line("retrying at \(r["step"]?.stringValue ?? "?")") }
        return nil
    }

    private func cancel() async -> Int32? {
        cancelling = true
        retryQuestion = nil
        pending = nil
        terminal.restore()
        clearProgress()
        FileHandle.standardError.write(Data("cancelling…\n".utf8))
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
        var (alternatives, resend) = Self.alternatives(schemas[key] ?? .null)
        if alternatives.isEmpty { alternatives = [[]] }
        var step = PendingStep(key: key, alternatives: alternatives, chosen: alternatives.count == 1 ? 0 : nil,
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
                "\(i + 1)) " + (fields.isEmpty ? "nothing" : fields.filter { !$0.optional }.map(\.name).joined(separator: ", "))
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
            let yes = ["y", "yes"].contains((text ?? "").trimmingCharacters(in: .whitespaces).lowercased())
            return yes ? await retryEnrollment(finished) : outcome(finished, 5)
        }
        guard var step = pending else { return nil }
        guard let text else {
            FileHandle.standardError.write(Data("end of input: ".utf8))
            return await cancel()
        }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let chosen = step.chosen else {
            if let n = Int(trimmed), (1...step.alternatives.count).contains(n) {
                step.chosen = n - 1
            } else {
                FileHandle.standardError.write(Data("  answer 1 to \(step.alternatives.count)\n".utf8))
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
            switch Self.parse(trimmed, f, mrzLines: &step.mrzLines) {
            case .value(let v):
                step.values[f.name] = v
                step.fieldIndex += 1
            case .more:
                break
            case .invalid(let why):
                FileHandle.standardError.write(Data("  \(why)\n".utf8))
            }
        }
        pending = step
        await advance()
        return nil
    }

    private static func parse(_ text: String, _ f: FormField, mrzLines: inout [String]) -> Parsed {
        if text.isEmpty {
            return f.optional && mrzLines.isEmpty ? .value(nil) : .invalid("\(f.name) is required")
        }
        switch f.kind {
        case .boolean:
            switch text.lowercased() {
            case "y", "yes", "true", "1": return .value(true)
            case "n", "no", "false", "0": return .value(false)
            default: return .invalid("answer y or n")
            }
        case .integer:
            guard let n = Int(text) else { return .invalid("\(f.name) must be a whole number") }
            return .value(.number(Double(n)))
        case .number:
            guard let n = Double(text) else { return .invalid("\(f.name) must be a number") }
            return .value(.number(n))
        case .string:
            if !f.choices.isEmpty, !f.choices.contains(text) {
                return .invalid("answer one of \(f.choices.joined(separator: ", "))")
            }
            guard f.name == "mrz" else { return .value(.string(text)) }
            // MRZ lines have no spaces: several on one line are split; a full TD1/TD2/TD3 line asks for the next.
            let parts = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            if parts.count > 1, mrzLines.isEmpty { return .value(.string(parts.joined(separator: "\n"))) }
            mrzLines.append(text)
            let first = mrzLines[0].count
            if [30, 36, 44].contains(first), mrzLines.count < (first == 30 ? 3 : 2) { return .more }
            defer { mrzLines = [] }
            return .value(.string(mrzLines.joined(separator: "\n")))
        }
    }

    private func submit(_ key: String, _ payload: JSONValue) async -> SubmitResult {
        do {
            let r = try await client.call("enrollment.submit", ["stepKey": .string(key), "payload": payload])
            if json { emit(["call": "enrollment.submit", "result": r]) }
            return .accepted
        } catch {
            report(error, call: "enrollment.submit")
            switch error.code.rawValue {
            case "INVALID_INPUT", "OTP_INVALID", "PIN_INVALID", "MRZ_INVALID":
                return .askAgain(field: error.details["field"]?.stringValue)
            case "OTP_EXPIRED", "OTP_ATTEMPTS_EXCEEDED", "STEP_NOT_EXPECTED", "NO_ACTIVE_ENROLLMENT":
                return .over
            default:
                // Still waiting for this step? Then ask again; otherwise the notifications tell what happened.
                guard let s = try? await client.call("enrollment.status"), s["state"]?.stringValue == "waitingForInput",
                      s["required"]?["key"]?.stringValue == key else { return .over }
                return .askAgain(field: nil)
            }
        }
    }

    private func dropPending(answeredElsewhere: Bool) {
        guard pending != nil else { return }
        pending = nil
        terminal.restore()
        if answeredElsewhere, !json { FileHandle.standardError.write(Data("(answered elsewhere)\n".utf8)) }
    }

    // MARK: Schema

    /// The alternatives of an input schema (oneOf/anyOf, each merged with the common properties) as fields, and
    /// whether one alternative is just `{resend}` (then offered as an empty line at the code instead).
    private static func alternatives(_ schema: JSONValue) -> ([[FormField]], Bool) {
        let baseProps = schema["properties"]?.objectValue ?? [:]
        let baseRequired = (schema["required"]?.arrayValue ?? []).compactMap(\.stringValue)
        let alts = schema["oneOf"]?.arrayValue ?? schema["anyOf"]?.arrayValue ?? []
        guard !alts.isEmpty else { return ([fields(baseProps, required: baseRequired, listed: Array(baseProps.keys))], false) }
        var result: [[FormField]] = []
        var resend = false
        for alt in alts {
            let ownProps = alt["properties"]?.objectValue ?? [:]
            let props = baseProps.merging(ownProps) { $1 }
            let ownRequired = (alt["required"]?.arrayValue ?? []).compactMap(\.stringValue)
            let required = baseRequired + ownRequired
            // An alternative names its fields by its own properties, else by what it requires.
            var listed = Array(ownProps.keys) + ownRequired
            if listed.isEmpty { listed = Array(props.keys) }
            if Set(listed) == ["resend"] { resend = true; continue }
            result.append(fields(props, required: required, listed: listed))
        }
        return (result, resend)
    }

    /// Required fields first (in schema order), then the optional ones by name.
    private static func fields(_ props: [String: JSONValue], required: [String], listed: [String]) -> [FormField] {
        var names: [String] = []
        for n in required where !names.contains(n) { names.append(n) }
        for n in listed.sorted() where !names.contains(n) { names.append(n) }
        return names.map { name in
            let s = props[name] ?? .null
            let type = s["type"]?.stringValue ?? s["type"]?.arrayValue?.compactMap(\.stringValue).first { $0 != "null" }
            let constant = s["const"]
            let kind: FormField.Kind
            switch type ?? constant.map(typeName) ?? "string" {
            case "boolean": kind = .boolean
            case "integer": kind = .integer
            case "number": kind = .number
            default: kind = .string
            }
            let secret = ["pin", "otp", "code", "can", "password"].contains(name.lowercased())
                || s["format"]?.stringValue == "password" || s["writeOnly"]?.boolValue == true
            let label = name == "otp" ? "one-time code"
                : s["title"]?.stringValue ?? s["description"]?.stringValue.map { "\(name) (\($0))" } ?? name
            return FormField(name: name, label: label, kind: kind, optional: !required.contains(name), secret: secret,
                             choices: (s["enum"]?.arrayValue ?? []).compactMap(\.stringValue), constant: constant)
        }
    }

    private static func typeName(_ v: JSONValue) -> String {
        switch v {
        case .bool: return "boolean"
        case .number: return "number"
        default: return "string"
        }
    }

    // MARK: Input and output

    /// Shows a question on stderr; standard input is read (on its own thread) from the first question on.
    private func ask(_ prompt: String, secret: Bool) {
        if !stdinStarted {
            stdinStarted = true
            let sink = self.sink
            Thread {
                while let text = readLine(strippingNewline: true) { sink.yield(.line(text)) }
                sink.yield(.line(nil))
            }.start()
        }
        if secret { terminal.disableEcho() }
        FileHandle.standardError.write(Data(prompt.utf8))
    }

    /// The error of the last call that failed.
    private var lastCallError: TesseraError?

    /// Exit status after a failed call: 3 when the daemon is unreachable, else 2.
    private var callFailureStatus: Int32 { lastCallError?.code == .daemonUnavailable ? 3 : 2 }

    private func call(_ method: String, _ params: JSONValue) async -> JSONValue? {
        do {
            let r = try await client.call(method, params)
            if json { emit(["call": .string(method), "result": r]) }
            return r
        } catch {
            lastCallError = error
            report(error, call: method)
            return nil
        }
    }

    private func report(_ error: TesseraError, call method: String) {
        clearProgress()
        if json {
            var e: [String: JSONValue] = ["code": .string(error.code.rawValue), "message": .string(error.message),
                                          "retryable": .bool(error.retryable)]
            for (k, v) in error.details { e[k] = v }
            emit(["call": .string(method), "error": .object(e)])
        } else {
            var text = "error: \(error.code.rawValue): \(error.message)"
            if let left = error.details["attemptsLeft"]?.intValue { text += " (\(left) attempt\(left == 1 ? "" : "s") left)" }
            if let field = error.details["field"]?.stringValue { text += " [field \(field)]" }
            if let id = error.details["enrollmentId"]?.stringValue { text += " (enrollment \(id))" }
            FileHandle.standardError.write(Data((text + "\n").utf8))
        }
    }

    private func emit(_ value: JSONValue) {
        var bytes = value.serialized()
        bytes.append(UInt8(ascii: "\n"))
        FileHandle.standardOutput.write(Data(bytes))
    }

    /// Unbuffered, so a reader on a pipe sees each line when it happens.
    private func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }
}

/// Turns terminal echo off for secrets and back on afterwards (only when standard input is a terminal).
private final class TerminalEcho: Sendable {
    private let saved = Locked<termios?>(nil)

    func disableEcho() {
        guard isatty(0) == 1 else { return }
        var t = termios()
        guard tcgetattr(0, &t) == 0 else { return }
        saved.withLock { if $0 == nil { $0 = t } }
        t.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(0, TCSANOW, &t)
    }

    func restore() {
        guard var t = saved.withLock({ s -> termios? in defer { s = nil }; return s }) else { return }
        tcsetattr(0, TCSANOW, &t)
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
