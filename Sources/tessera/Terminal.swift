import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The terminal side of `tessera enroll-station`: questions on stderr, lines of standard input (read on a thread
/// of their own from the first question on), no echo while a secret is typed, and Ctrl-C (SIGINT, SIGTERM).
final class StationTerminal: Sendable {
    private let echo = TerminalEcho()
    private let lines: @Sendable (String?) -> Void
    private let reading = Locked(false)

    /// `lines` receives each line of standard input, then nil at its end.
    init(lines: @escaping @Sendable (String?) -> Void) {
        self.lines = lines
    }

    /// Shows a question on stderr (echo off for a secret) and starts reading standard input if not yet.
    func ask(_ prompt: String, secret: Bool) {
        let start = reading.withLock { started in
            defer { started = true }
            return !started
        }
        if start {
            let lines = self.lines
            DedicatedThread.detach(name: "tessera.stdin") {
                while let text = readLine(strippingNewline: true) { lines(text) }
                lines(nil)
            }
        }
        if secret { echo.disableEcho() }
        OpenFile.standardError.write(prompt)
    }

    /// Echo back on (after a secret line, or before leaving).
    func restore() {
        echo.restore()
    }

    /// Calls `interrupt` at each SIGINT or SIGTERM until the returned stop closure is called.
    static func onInterrupt(_ interrupt: @escaping @Sendable () -> Void) -> () -> Void {
        let installed = LabSignals.install()
        let signals = installed.0
        let task = Task {
            for await _ in signals { interrupt() }
        }
        let sources = installed.1
        return {
            task.cancel()
            for source in sources { source.cancel() }
        }
    }
}

/// One secret asked on the terminal, as ssh-add asks for a passphrase: the question on stderr, echo off while it
/// is typed, echo back on after the line, at Ctrl-D and at Ctrl-C.
enum TerminalPrompt {
    /// Whether standard input is a terminal.
    static var isTerminal: Bool { isatty(0) == 1 }

    /// The typed line; nil at the end of input.
    static func secret(_ prompt: String) async -> String? {
        let echo = TerminalEcho()
        echo.disableEcho()
        OpenFile.standardError.write(prompt)
        let stop = StationTerminal.onInterrupt {
            echo.restore()
            exit(130)
        }
        defer {
            stop()
            echo.restore()
            // Ctrl-C ends the command again as usual once the secret is typed.
            signal(SIGINT, SIG_DFL)
            signal(SIGTERM, SIG_DFL)
        }
        return await DedicatedThread.run { readLine(strippingNewline: true) }
    }
}

/// Turns terminal echo off for secrets and back on afterwards (only when standard input is a terminal).
final class TerminalEcho: Sendable {
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
        guard
            var t = saved.withLock({ s -> termios? in
                defer { s = nil }; return s
            })
        else { return }
        tcsetattr(0, TCSANOW, &t)
        OpenFile.standardError.write("\n")
    }
}
