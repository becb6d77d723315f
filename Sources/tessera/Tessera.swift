import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

@main
enum Main {
    /// Accepts the global options before the command too (`tessera --socket PATH status`), as documented.
    static func main() async {
        await Tessera.main(GlobalOptions.hoistingLeadingGlobals(Array(CommandLine.arguments.dropFirst())))
    }
}

struct Tessera: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tessera",
        abstract: "Command-line client of tesserad: passkeys on hardware tokens, documents, lab tools.",
        discussion: """
            Every command talks to tesserad over its Unix socket (JSON-RPC 2.0; docs/API.md). With --json a command prints the method's JSON result verbatim; otherwise a summary for humans. Errors are printed on stderr as "error: CODE: message"; the exit status is 2 for daemon errors, 3 when the daemon is unreachable, 64 for usage errors. Values in base64url (credential ids, challenges) may begin with '-'; options take them as they are, and positional ones go after `--`.

            SOCKET
              --socket PATH (before or after the command), else $TESSERA_SOCKET, else the per-user daemon's $XDG_RUNTIME_DIR/tessera/tesserad.sock when it exists, else the system daemon's /run/tesserad/tesserad.sock (docs/INSTALL.md).

            When a command cannot reach the daemon, pcscd or a token, `tessera doctor` checks the host and says what to fix.

            PINS
              On a terminal, --pin-stdin asks "PIN: " without echo, and a command given no PIN asks for it when the daemon answers PIN_REQUIRED (then sends the request once more). In scripts, --pin-stdin reads the first line of standard input. An empty PIN is refused with PIN_EMPTY (exit 2), never taken as no PIN; Ctrl-D at the prompt is PIN_ENTRY_CANCELLED.

            EXAMPLES
              tessera status
              tessera doctor
              tessera enroll --rp-id example.com --user-name alice --pin-stdin
              tessera authenticate --rp-id example.com --credential <id> --pin-stdin
              tessera credentials list --rp-id example.com
              tessera mrz parse 'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<' 'L898902C36UTO7408122F1204159ZE184226B<<<<<10'
              tessera passport read --number L898902C3 --birth 740812 --expiry 120415 --save-photo face.jpg
              tessera enroll-station --workflow employee-badge
              tessera kiosk --listen 127.0.0.1:8080 --workflow employee-badge
              tessera face compare portrait.jpg capture.jpg
              tessera lab make-profile /tmp/doc --mrz "$MRZ" --pace default
              tessera call daemon.status '{}'
            """,
        subcommands: [
            Status.self, Tokens.self, Enroll.self, Authenticate.self, Credentials.self, MRZCommand.self,
            Passport.self, Trust.self, EnrollStation.self, Kiosk.self, SSH.self, Lab.self, Call.self, MDocCommand.self,
            StepUpCommand.self, RecoverCommand.self, CTAPCommand.self, DoctorCommand.self, FaceCommand.self,
            AccessCommand.self,
        ])
}

/// Options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "tesserad's socket. Default: $TESSERA_SOCKET, else $XDG_RUNTIME_DIR/tessera/tesserad.sock when it exists, else /run/tesserad/tesserad.sock.",
            valueName: "PATH"))
    var socket: String?

    @Flag(name: .long, help: "Print the method's JSON result verbatim.")
    var json = false

    /// Moves `--socket PATH`, `--socket=PATH` and `--json` given before the command name to the end
    /// (before a `--` terminator, if any, so they stay options).
    static func hoistingLeadingGlobals(_ args: [String]) -> [String] {
        var leading: [String] = []
        var rest = args[...]
        while let first = rest.first {
            if first == "--json" || first.hasPrefix("--socket=") {
                leading.append(first); rest = rest.dropFirst()
            } else if first == "--socket", rest.count >= 2 {
                leading += rest.prefix(2); rest = rest.dropFirst(2)
            } else {
                break
            }
        }
        var out = Array(rest)
        out.insert(contentsOf: leading, at: out.firstIndex(of: "--") ?? out.endIndex)
        return out
    }

    var socketPath: String {
        socket
            ?? DaemonPaths.clientSocket(environment: ProcessInfo.processInfo.environment) {
                FileManager.default.fileExists(atPath: $0)
            }
    }

    /// Calls one method and prints the result (JSON or the human rendering).
    /// `pin`: the command's PIN options; on a terminal, a request sent without a PIN that the daemon answers
    /// PIN_REQUIRED asks for the PIN (no echo) and is sent once more with it.
    func run(
        _ method: String, _ params: JSONValue, pin: PINOptions? = nil, human: (JSONValue) -> String
    ) async throws {
        let result = try await call(method, params, pin: pin)
        if json { print(String(decoding: result.serialized(), as: UTF8.self)) } else { print(human(result)) }
    }

    func call(_ method: String, _ params: JSONValue, pin: PINOptions? = nil) async throws -> JSONValue {
        do throws(TesseraError) {
            do throws(TesseraError) {
                return try await send(method, params)
            } catch  where error.code == .pinRequired && pin?.asksWhenRequired(params) == true {
                var retry = params.objectValue ?? [:]
                retry["pin"] = .string(try await PINOptions.prompt("\(error.message)\nPIN: "))
                return try await send(method, .object(retry))
            }
        } catch {
            throw Self.fail(error)
        }
    }

    private func send(_ method: String, _ params: JSONValue) async throws(TesseraError) -> JSONValue {
        let client = try await RPCClient.connect(path: socketPath)
        defer { Task { await client.close() } }
        return try await client.call(method, params)
    }

    /// Prints "error: CODE: message" on stderr; the exit status for it (3 when the daemon is unreachable, else 2).
    static func fail(_ error: TesseraError) -> ExitCode {
        OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
        return ExitCode(error.code == .daemonUnavailable ? 3 : 2)
    }
}

/// The PIN of a command: --pin, --pin-stdin (a line of standard input, or the terminal's no-echo prompt), or on a
/// terminal the prompt when the daemon says the PIN is required. A PIN that is given and empty is refused (PIN_EMPTY),
/// never taken as no PIN.
struct PINOptions: ParsableArguments {
    @Option(
        name: .long,
        help: "Token PIN (verifies the user: sets UV). Visible to other users in ps: prefer --pin-stdin or the prompt.")
    var pin: String?

    @Flag(
        name: .customLong("pin-stdin"),
        help:
            "Read the PIN from the first line of standard input (for scripts); on a terminal, ask for it without echo. An empty PIN is refused (PIN_EMPTY). Without --pin or --pin-stdin, a command on a terminal asks for the PIN when the daemon answers that it is required."
    )
    var pinStdin = false

    @Flag(
        name: .customLong("allow-final-pin-try"),
        help: "Let the daemon try the PIN even when the token has one try left (a wrong PIN then locks it).")
    var allowFinalPinTry = false

    /// The PIN given (nil: none). Prints the error and exits 2 for an empty PIN or a cancelled prompt.
    func value() async throws -> String? {
        do throws(TesseraError) {
            if let pin {
                guard !pin.isEmpty else { throw Self.empty("--pin") }
                return pin
            }
            guard pinStdin else { return nil }
            return try await Self.read("PIN: ", option: "--pin-stdin")
        } catch {
            throw GlobalOptions.fail(error)
        }
    }

    /// Adds `pin` and `allowFinalPinTry` to request parameters.
    func add(to params: inout [String: JSONValue]) async throws {
        if let pin = try await value() { params["pin"] = .string(pin) }
        if allowFinalPinTry { params["allowFinalPinTry"] = true }
    }

    /// Whether a request without a PIN that needs one asks for it: no PIN given and standard input is a terminal.
    func asksWhenRequired(_ params: JSONValue) -> Bool {
        pin == nil && !pinStdin && params["pin"] == nil && TerminalPrompt.isTerminal
    }

    /// A PIN for a `*-stdin` option: the no-echo `prompt` on a terminal, else the next line of standard input.
    /// PIN_EMPTY for an empty line or none.
    static func read(_ prompt: String, option: String) async throws(TesseraError) -> String {
        if TerminalPrompt.isTerminal { return try await Self.prompt(prompt) }
        let line = await DedicatedThread.run { readLine(strippingNewline: true) }
        guard let line, !line.isEmpty else { throw empty(option) }
        return line
    }

    /// Asks on the terminal without echo. PIN_EMPTY for an empty answer, PIN_ENTRY_CANCELLED at Ctrl-D.
    static func prompt(_ text: String) async throws(TesseraError) -> String {
        guard let typed = await TerminalPrompt.secret(text) else {
            throw TesseraError(.pinEntryCancelled, "no PIN was typed (end of input): nothing was sent")
        }
        guard !typed.isEmpty else { throw empty("the prompt") }
        return typed
    }

    private static func empty(_ source: String) -> TesseraError {
        TesseraError(
            .pinEmpty,
            "the PIN from \(source) is empty: type the token's PIN, or leave out --pin-stdin to go without one")
    }
}

func decodeBase64URL(_ s: String, _ what: String) throws -> [UInt8] {
    guard let b = Base64URL.decode(s) else { throw ValidationError("\(what) is not base64url") }
    return b
}
