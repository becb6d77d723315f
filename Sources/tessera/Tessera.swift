import ArgumentParser
import Foundation
import RPC
import TesseraCore

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

            EXAMPLES
              tessera status
              tessera enroll --rp-id example.com --user-name alice --pin-stdin
              tessera authenticate --rp-id example.com --credential <id> --pin-stdin
              tessera credentials list --rp-id example.com
              tessera mrz parse 'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<' 'L898902C36UTO7408122F1204159ZE184226B<<<<<10'
              tessera passport read --number L898902C3 --birth 740812 --expiry 120415 --save-photo face.jpg
              tessera enroll-station --workflow employee-badge
              tessera lab make-profile /tmp/doc --mrz "$MRZ" --pace default
              tessera call daemon.status '{}'
            """,
        subcommands: [
            Status.self, Tokens.self, Enroll.self, Authenticate.self, Credentials.self, MRZCommand.self,
            Passport.self, Trust.self, EnrollStation.self, SSH.self, Lab.self, Call.self, MDocCommand.self,
            StepUpCommand.self, RecoverCommand.self, CTAPCommand.self,
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
    func run(_ method: String, _ params: JSONValue, human: (JSONValue) -> String) async throws {
        let result = try await call(method, params)
        if json { print(String(decoding: result.serialized(), as: UTF8.self)) } else { print(human(result)) }
    }

    func call(_ method: String, _ params: JSONValue) async throws -> JSONValue {
        do {
            let client = try await RPCClient.connect(path: socketPath)
            defer { Task { await client.close() } }
            return try await client.call(method, params)
        } catch {
            FileHandle.standardError.write(Data("error: \(error.code.rawValue): \(error.message)\n".utf8))
            throw ExitCode(error.code == .daemonUnavailable ? 3 : 2)
        }
    }
}

/// Reads a PIN from --pin, or from stdin when --pin-stdin is given (so it stays out of `ps`).
struct PINOptions: ParsableArguments {
    @Option(name: .long, help: "Token PIN (verifies the user: sets UV). Prefer --pin-stdin.")
    var pin: String?

    @Flag(name: .customLong("pin-stdin"), help: "Read the PIN from the first line of standard input.")
    var pinStdin = false

    @Flag(
        name: .customLong("allow-final-pin-try"),
        help: "Let the daemon try the PIN even when the token has one try left (a wrong PIN then locks it).")
    var allowFinalPinTry = false

    func value() -> String? {
        if let pin { return pin }
        guard pinStdin, let line = readLine(strippingNewline: true) else { return nil }
        return line
    }

    /// Adds `pin` and `allowFinalPinTry` to request parameters.
    func add(to params: inout [String: JSONValue]) {
        if let pin = value() { params["pin"] = .string(pin) }
        if allowFinalPinTry { params["allowFinalPinTry"] = true }
    }
}

func decodeBase64URL(_ s: String, _ what: String) throws -> [UInt8] {
    guard let b = Base64URL.decode(s) else { throw ValidationError("\(what) is not base64url") }
    return b
}
