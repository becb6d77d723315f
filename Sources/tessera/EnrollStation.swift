import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

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

            Face steps (FACE_MATCHING, LIVENESS_CHALLENGE_PHASE, MID_SELFIE_MATCHING) ask for the captures as image file paths separated by spaces (JPEG, JPEG 2000 or PNG), sent as the step's {images: [{mediaType, data}]}.

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
              step PASSKEY_CREATION: Your token PIN (token p11-3f2a…)
                pin:
              done: PASSKEY_CREATION (8/8)
              enrollment succeeded
                passkey 5x2mX… for badge.example.com on token p11-3f2a…
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
    @Option(
        help: ArgumentHelp(
            "Start this configured workflow without an activation token (a remote workflow; see enrollment.candidates).",
            valueName: "NAME"))
    var workflow: String?
    @Option(help: ArgumentHelp("Start the workflow named by this activation token (a compact JWS).", valueName: "JWS"))
    var token: String?
    @Option(
        name: .customLong("deep-link"),
        help: ArgumentHelp(
            "Hand a tessera:// link to the daemon (enrollment.handleDeepLink): tessera://enroll?token=… starts and is followed; tessera://phone-binding?otp=… submits the code and exits.",
            valueName: "URL"))
    var deepLink: String?
    @Flag(help: "Continue the active enrollment, or the one a daemon restart suspended (enrollment.resume).")
    var resume = false
    @Flag(help: "Interrupt an active enrollment first (its outcome becomes interrupted).")
    var force = false
    @Option(
        name: .customLong("user-verification"),
        help: ArgumentHelp(
            "required, preferred or discouraged: for the passkey step (default: the daemon's, preferred).",
            valueName: "V"))
    var userVerification: String?
    @Option(
        help: ArgumentHelp(
            "JSON object of answers: step key → submit payload (and \"retry\": true|false).", valueName: "FILE"))
    var answers: String?

    func validate() throws {
        let modes = [workflow != nil, token != nil, deepLink != nil, resume].filter { $0 }.count
        guard modes == 1 else {
            throw ValidationError("give exactly one of --workflow, --token, --deep-link or --resume")
        }
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
            OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
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
        do { value = try JSONValue.parse([UInt8](data)) } catch {
            throw ValidationError("answers file \(path) is not JSON")
        }
        guard var object = value.objectValue else {
            throw ValidationError("answers file \(path) must hold a JSON object")
        }
        var book = AnswerBook()
        if let r = object.removeValue(forKey: "retry") {
            guard let b = r.boolValue else { throw ValidationError("\"retry\" in \(path) must be true or false") }
            book.retry = b
        }
        for (key, payload) in object {
            guard payload.objectValue != nil else {
                throw ValidationError("the answer for \(key) in \(path) must be a JSON object")
            }
        }
        book.payloads = object
        return book
    }
}
