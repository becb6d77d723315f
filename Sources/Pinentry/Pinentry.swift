import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// What a pinentry dialog shows, and where.
public struct PinentryPrompt: Sendable {
    public var title: String
    public var description: String
    /// The label in front of the PIN field (GETPIN only).
    public var prompt: String
    /// The terminal pinentry-curses/-tty use (`OPTION ttyname`); nil: pinentry's own choice (its display).
    public var ttyname: String?
    /// The terminal's type (`OPTION ttytype`), with `ttyname`.
    public var ttytype: String?
    /// The buttons' labels (`SETOK`, `SETCANCEL`; `_` marks the key that presses it); nil: pinentry's own.
    public var ok: String?
    public var cancel: String?

    public init(
        title: String, description: String, prompt: String = "PIN:", ttyname: String? = nil, ttytype: String? = nil,
        ok: String? = nil, cancel: String? = nil
    ) {
        self.title = title; self.description = description; self.prompt = prompt; self.ttyname = ttyname
        self.ttytype = ttytype; self.ok = ok; self.cancel = cancel
    }
}

/// How a pinentry dialog ended. A PIN is never printed (`description` redacts it).
public enum PinentryOutcome: Sendable, Equatable, CustomStringConvertible {
    /// GETPIN: what the user typed (possibly empty).
    case pin(String)
    /// CONFIRM: the user pressed OK.
    case confirmed
    /// The user pressed Cancel (or closed the dialog).
    case cancelled
    /// Nobody answered within the timeout.
    case timedOut

    public var description: String {
        switch self {
        case .pin: "pin(redacted)"
        case .confirmed: "confirmed"
        case .cancelled: "cancelled"
        case .timedOut: "timedOut"
        }
    }
}

/// One pinentry dialog as Assuan requests and the reading of its answers (pure).
///
/// pinentry reads its requests one after the other from standard input, so a whole dialog is written at once:
/// OPTIONs, SETTIMEOUT, SETTITLE, SETDESC, SETPROMPT, SETOK/SETCANCEL, then GETPIN or CONFIRM, then BYE. The answers come back in the
/// same order after the greeting; an `ERR` to an OPTION (an option this pinentry does not know) is ignored, as
/// gpg-agent does.
public struct PinentryDialog: Sendable {
    public enum Action: String, Sendable {
        case getPIN = "GETPIN"
        case confirm = "CONFIRM"
    }

    public let action: Action
    /// The request lines, without newlines.
    public let requests: [String]

    public init(_ action: Action, _ prompt: PinentryPrompt, timeoutSeconds: Int) {
        var lines: [String] = []
        if let tty = prompt.ttyname {
            lines.append(Assuan.request("OPTION", "ttyname=\(tty)"))
            lines.append(Assuan.request("OPTION", "ttytype=\(prompt.ttytype ?? "xterm")"))
        }
        lines.append("SETTIMEOUT \(max(1, timeoutSeconds))")
        lines.append(Assuan.request("SETTITLE", prompt.title))
        lines.append(Assuan.request("SETDESC", prompt.description))
        if action == .getPIN { lines.append(Assuan.request("SETPROMPT", prompt.prompt)) }
        if let ok = prompt.ok { lines.append(Assuan.request("SETOK", ok)) }
        if let cancel = prompt.cancel { lines.append(Assuan.request("SETCANCEL", cancel)) }
        lines.append(action.rawValue)
        lines.append("BYE")
        self.action = action
        self.requests = lines
    }

    /// What pinentry reads on standard input.
    public var input: [UInt8] { Array(requests.map { $0 + "\n" }.joined().utf8) }

    /// The outcome from pinentry's standard output; nil when the output ends before the action was answered.
    /// PIN_ENTRY_FAILED when the program does not speak Assuan or answers the action with another error.
    public func outcome(_ output: [UInt8]) throws(TesseraError) -> PinentryOutcome? {
        let actionIndex = requests.count - 2
        var greeted = false
        var answered = -1  // the index of the last request answered
        var data: [UInt8] = []
        for raw in output.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            var line = Array(raw)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard let response = Assuan.parse(String(decoding: line, as: UTF8.self)) else {
                throw TesseraError(.pinEntryFailed, "the pinentry program does not speak Assuan")
            }
            switch response {
            case .data(let bytes):
                if greeted && answered + 1 == actionIndex { data += bytes }
            case .inquire(let keyword):
                throw TesseraError(.pinEntryFailed, "the pinentry program asked for \(keyword), which is not given")
            case .error(let code, let text):
                guard greeted else {
                    throw TesseraError(.pinEntryFailed, "the pinentry program refused to start: \(text) (\(code))")
                }
                answered += 1
                if answered == actionIndex { return try Self.failure(code, text) }
            case .ok:
                guard greeted else {
                    greeted = true
                    continue
                }
                answered += 1
                guard answered == actionIndex else { continue }
                switch action {
                case .confirm: return .confirmed
                case .getPIN:
                    guard let pin = String(validating: data, as: UTF8.self) else {
                        throw TesseraError(.pinEntryFailed, "the pinentry program returned a PIN that is not UTF-8")
                    }
                    return .pin(pin)
                }
            case .status, .comment: continue
            }
        }
        return nil
    }

    private static func failure(_ code: UInt32, _ text: String) throws(TesseraError) -> PinentryOutcome {
        switch Assuan.errorCode(code) {
        case Assuan.errorCancelled, Assuan.errorNotConfirmed: return .cancelled
        case Assuan.errorTimeout: return .timedOut
        default: throw TesseraError(.pinEntryFailed, "the pinentry program answered ERR \(code) \(text)")
        }
    }
}

/// A pinentry program (gpg's `pinentry`, `pinentry-gnome3`, `pinentry-curses`, …) run once per dialog through
/// `ProgramRunner`: the dialog on its standard input, its answers (the PIN among them) read back from its output, never
/// through argv or the environment.
public struct Pinentry: Sendable {
    /// A program name looked up on PATH when the dialog starts, or a path.
    public var program: String
    /// Longest wait for the user (pinentry's own SETTIMEOUT; the program is stopped 5 s later).
    public var timeout: Duration
    /// Variables set for the program over the daemon's own (DISPLAY, WAYLAND_DISPLAY, XAUTHORITY, …).
    public var environment: [String: String]

    public init(program: String = "pinentry", timeout: Duration = .seconds(60), environment: [String: String] = [:]) {
        self.program = program; self.timeout = timeout; self.environment = environment
    }

    /// Asks for a PIN. PIN_ENTRY_FAILED when the program cannot be found or run, or breaks the protocol.
    public func getPIN(_ prompt: PinentryPrompt) async throws(TesseraError) -> PinentryOutcome {
        try await run(PinentryDialog(.getPIN, prompt, timeoutSeconds: seconds))
    }

    /// Asks the user to confirm (OK / Cancel).
    public func confirm(_ prompt: PinentryPrompt) async throws(TesseraError) -> PinentryOutcome {
        try await run(PinentryDialog(.confirm, prompt, timeoutSeconds: seconds))
    }

    /// The path of `program`: as given when it has a slash, else the first executable of that name on `searchPath`
    /// (PATH's syntax).
    public static func locate(_ program: String, searchPath: String?) -> String? {
        if program.contains("/") { return FileManager.default.isExecutableFile(atPath: program) ? program : nil }
        for directory in (searchPath ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(program)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// The terminal on standard input of process `pid`, when that process runs as `uid` and `uid` is this process's
    /// own (a per-user daemon asking on its user's terminal); nil otherwise. Another user's terminal is never used.
    public static func clientTerminal(pid: Int32, uid: UInt32) -> String? {
        guard pid > 0, uid == geteuid() else { return nil }
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/0"),
            target.hasPrefix("/dev/pts/") || target.hasPrefix("/dev/tty"),
            case var st = stat(), stat(target, &st) == 0, st.st_uid == uid
        else { return nil }
        return target
    }

    /// Whether a dialog has somewhere to appear: a terminal, or a `DISPLAY` / `WAYLAND_DISPLAY` in the program's
    /// environment (`environment` over this process's).
    public func canShow(ttyname: String?) -> Bool {
        if ttyname != nil { return true }
        let inherited = ProcessInfo.processInfo.environment
        return ["DISPLAY", "WAYLAND_DISPLAY"].contains { name in
            !(environment[name] ?? inherited[name] ?? "").isEmpty
        }
    }

    private var seconds: Int { max(1, Int(timeout.components.seconds)) }

    private func run(_ dialog: PinentryDialog) async throws(TesseraError) -> PinentryOutcome {
        let environmentPath = environment["PATH"] ?? ProcessInfo.processInfo.environment["PATH"]
        guard let path = Self.locate(program, searchPath: environmentPath) else {
            throw TesseraError(
                .pinEntryFailed, "no pinentry program '\(program)' (install pinentry or set pinentry.program)")
        }
        let completion: ProgramRunner.Completion
        do throws(TesseraError) {
            completion = try await ProgramRunner.capture(
                [path], input: dialog.input, environment: environment, timeout: timeout + .seconds(5))
        } catch {
            throw TesseraError(.pinEntryFailed, "cannot run \(path): \(error.message)")
        }
        if completion.cancelled { return .cancelled }
        if let outcome = try dialog.outcome(completion.stdout) { return outcome }
        if completion.timedOut { return .timedOut }
        let reason =
            String(decoding: completion.stderr.prefix(200), as: UTF8.self)
            .split(separator: "\n").first.map(String.init) ?? ""
        throw TesseraError(
            .pinEntryFailed,
            "\(path) ended (status \(completion.status.map { "\($0)" } ?? "unknown")) before answering"
                + (reason.isEmpty ? "" : ": \(reason)"))
    }
}
