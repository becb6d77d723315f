import FoundationEssentials
import Pinentry
import TesseraCore
import TesseraRuntime
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The Assuan line codec, pinentry dialogs read from recorded answers, and whole dialogs with programs: the e2e
/// tests' scripted pinentry and Debian's own `pinentry-tty`.
struct AssuanTests {
    @Test func escapesPercentAndControlCharacters() {
        #expect(Assuan.escape("50%\nok\r") == "50%25%0Aok%0D")
        #expect(Assuan.escape("Grüße 1234") == "Grüße 1234")
        #expect(Assuan.unescape(Array("12%2534%0A".utf8)) == Array("12%34\n".utf8))
        #expect(Assuan.unescape(Array("%2".utf8)) == nil)
        #expect(Assuan.unescape(Array("%zz".utf8)) == nil)
    }

    @Test func parsesEveryResponseForm() {
        #expect(Assuan.parse("OK Pleased to meet you") == .ok("Pleased to meet you"))
        #expect(Assuan.parse("OK") == .ok(""))
        #expect(
            Assuan.parse("ERR 83886179 Operation cancelled <Pinentry>")
                == .error(code: 83_886_179, text: "Operation cancelled <Pinentry>"))
        #expect(Assuan.parse("D 12%2534") == .data(Array("12%34".utf8)))
        #expect(Assuan.parse("S PASSWORD_FROM_CACHE") == .status(keyword: "PASSWORD_FROM_CACHE", text: ""))
        #expect(Assuan.parse("# a comment") == .comment)
        #expect(Assuan.parse("INQUIRE QUALITY x") == .inquire("QUALITY"))
        #expect(Assuan.parse("ERR notanumber") == nil)
        #expect(Assuan.parse("HELLO") == nil)
        // 83886179 is GPG_ERR_SOURCE_PINENTRY (5 << 24) | GPG_ERR_CANCELED (99).
        #expect(Assuan.errorCode(83_886_179) == Assuan.errorCancelled)
    }

    @Test func requestLinesFitTheLineLimitWithoutSplittingAnEscape() {
        let long = String(repeating: "%", count: 2000)
        let line = Assuan.request("SETDESC", long)
        #expect(line.utf8.count + 1 <= Assuan.maxLineBytes)
        #expect(line.hasSuffix("%25"))
        let words = String(repeating: "é", count: 1000)
        let cut = Assuan.request("SETDESC", words)
        #expect(cut.utf8.count + 1 <= Assuan.maxLineBytes)
        #expect(String(cut.dropFirst("SETDESC ".count)).allSatisfy { $0 == "é" })
        #expect(Assuan.request("GETPIN") == "GETPIN")
    }
}

struct PinentryDialogTests {
    let prompt = PinentryPrompt(title: "T", description: "line 1\nline 2", prompt: "PIN:", ttyname: "/dev/pts/7")

    @Test func writesTheDialogInOrder() {
        let dialog = PinentryDialog(.getPIN, prompt, timeoutSeconds: 30)
        #expect(
            dialog.requests == [
                "OPTION ttyname=/dev/pts/7", "OPTION ttytype=xterm", "SETTIMEOUT 30", "SETTITLE T",
                "SETDESC line 1%0Aline 2", "SETPROMPT PIN:", "GETPIN", "BYE",
            ])
        let confirm = PinentryDialog(.confirm, PinentryPrompt(title: "T", description: "D"), timeoutSeconds: 5)
        #expect(confirm.requests == ["SETTIMEOUT 5", "SETTITLE T", "SETDESC D", "CONFIRM", "BYE"])
    }

    private func answers(_ lines: [String]) -> [UInt8] { Array(lines.map { $0 + "\n" }.joined().utf8) }

    @Test func readsThePINAndIgnoresRefusedOptions() throws {
        let dialog = PinentryDialog(.getPIN, prompt, timeoutSeconds: 30)
        let out = answers([
            "OK Pleased to meet you", "ERR 83886254 Unknown option <Pinentry>", "OK", "OK", "OK", "OK", "OK",
            "S PIN_REPEATED", "D 12%2534", "D 56", "OK", "OK closing connection",
        ])
        let outcome = try dialog.outcome(out)
        #expect(outcome == .pin("12%3456"))
        #expect("\(outcome!)" == "pin(redacted)")
    }

    @Test func cancelTimeoutAndNotConfirmed() throws {
        let getPIN = PinentryDialog(.getPIN, PinentryPrompt(title: "T", description: "D"), timeoutSeconds: 5)
        let before = ["OK Pleased to meet you", "OK", "OK", "OK", "OK"]
        #expect(try getPIN.outcome(answers(before + ["ERR 83886179 Operation cancelled <Pinentry>"])) == .cancelled)
        #expect(try getPIN.outcome(answers(before + ["ERR 83886142 Timeout <Pinentry>"])) == .timedOut)
        // An empty PIN is an answer too (the caller refuses it with PIN_EMPTY).
        #expect(try getPIN.outcome(answers(before + ["OK"])) == .pin(""))
        #expect(try getPIN.outcome(answers(Array(before.prefix(3)))) == nil)
        let confirm = PinentryDialog(.confirm, PinentryPrompt(title: "T", description: "D"), timeoutSeconds: 5)
        let head = ["OK Pleased to meet you", "OK", "OK", "OK"]
        #expect(try confirm.outcome(answers(head + ["OK"])) == .confirmed)
        #expect(try confirm.outcome(answers(head + ["ERR 83886194 Not confirmed <Pinentry>"])) == .cancelled)
    }

    @Test func aProgramThatIsNoPinentryFails() {
        let dialog = PinentryDialog(.getPIN, PinentryPrompt(title: "T", description: "D"), timeoutSeconds: 5)
        for output in [["hello world"], ["ERR 1 no"], ["OK", "OK", "OK", "OK", "OK", "ERR 83918950 ioctl <Pinentry>"]] {
            #expect {
                try dialog.outcome(answers(output))
            } throws: { ($0 as? TesseraError)?.code == .pinEntryFailed }
        }
    }
}

/// Dialogs with real programs run through `ProgramRunner`.
struct PinentrySessionTests {
    /// The e2e tests' scripted pinentry (Tests/e2e/scripted_pinentry.py) behind a wrapper that names its state.
    static func scripted(answer: String) throws -> (Pinentry, URL) {
        let dir = URL(fileURLWithPath: Scratch.directory("pinentry"))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("e2e/scripted_pinentry.py").path
        try answer.write(to: dir.appendingPathComponent("answer"), atomically: true, encoding: .utf8)
        let wrapper = dir.appendingPathComponent("pinentry")
        try "#!/bin/sh\nexec python3 '\(script)' '\(dir.path)'\n".write(to: wrapper, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: wrapper.path)
        return (Pinentry(program: wrapper.path, timeout: .seconds(10)), dir)
    }

    @Test func scriptedPinentryGivesThePINAndCounts() async throws {
        let (pinentry, dir) = try Self.scripted(answer: "pin:12%34 56")
        let outcome = try await pinentry.getPIN(PinentryPrompt(title: "Tessera", description: "Token\nPIN please"))
        #expect(outcome == .pin("12%34 56"))
        let log = try String(contentsOf: dir.appendingPathComponent("log"), encoding: .utf8)
        #expect(log.contains("SETDESC Token%0APIN please\n"))
        #expect(try String(contentsOf: dir.appendingPathComponent("asked"), encoding: .utf8) == "1\n")
    }

    @Test func scriptedCancelAndConfirm() async throws {
        let (cancelling, _) = try Self.scripted(answer: "cancel")
        #expect(try await cancelling.getPIN(PinentryPrompt(title: "T", description: "D")) == .cancelled)
        #expect(try await cancelling.confirm(PinentryPrompt(title: "T", description: "D")) == .cancelled)
        let (confirming, _) = try Self.scripted(answer: "ok")
        #expect(try await confirming.confirm(PinentryPrompt(title: "T", description: "D")) == .confirmed)
    }

    @Test func aMissingProgramFailsClearly() async {
        await #expect {
            try await Pinentry(program: "tessera-no-such-pinentry").getPIN(PinentryPrompt(title: "T", description: "D"))
        } throws: { ($0 as? TesseraError)?.code == .pinEntryFailed }
        #expect(Pinentry.locate("sh", searchPath: "/nonexistent:/bin") == "/bin/sh")
        #expect(Pinentry.locate("/nonexistent/pinentry", searchPath: nil) == nil)
    }

    /// GETINFO version: the greeting, a `D` line with the version, OK.
    static func handshake(_ path: String) async throws {
        let version = try await ProgramRunner.capture(
            [path], input: Array("GETINFO version\nBYE\n".utf8), timeout: .seconds(10))
        let lines = String(decoding: version.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines.first.flatMap(Assuan.parse) == .ok("Pleased to meet you"), "\(path)")
        #expect(lines.contains { if case .data = Assuan.parse($0) { true } else { false } }, "\(path)")
    }

    /// Debian's pinentry-curses speaks the same handshake (its dialog needs a terminal: the e2e tests type into
    /// pinentry-tty's).
    @Test func debianPinentryCursesHandshakes() async throws {
        guard let path = Pinentry.locate("pinentry-curses", searchPath: ProcessInfo.processInfo.environment["PATH"])
        else {
            Issue.record("pinentry-curses is not installed (scripts/setup.sh installs it)")
            return
        }
        try await Self.handshake(path)
    }

    /// Debian's pinentry-tty (apt: pinentry-tty) on a "terminal" that cannot answer (/dev/null, so a test run from a
    /// terminal never prompts): it speaks the same protocol, answers CONFIRM with "not confirmed" and GETPIN with
    /// "cancelled". The e2e tests type a PIN into it through a pseudo-terminal.
    @Test func debianPinentryTTYSpeaksTheProtocol() async throws {
        guard let path = Pinentry.locate("pinentry-tty", searchPath: ProcessInfo.processInfo.environment["PATH"]) else {
            Issue.record("pinentry-tty is not installed (scripts/setup.sh installs it)")
            return
        }
        try await Self.handshake(path)
        let pinentry = Pinentry(program: path, timeout: .seconds(5))
        let nowhere = PinentryPrompt(title: "T", description: "D", ttyname: "/dev/null")
        #expect(try await pinentry.confirm(nowhere) == .cancelled)
        #expect(try await pinentry.getPIN(nowhere) == .cancelled)
    }
}
