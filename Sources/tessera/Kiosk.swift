import ArgumentParser
import FoundationEssentials
import KioskStation
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera kiosk`: serves the kiosk station's screen (docs/KIOSK.md) and bridges it to tesserad.
struct Kiosk: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kiosk",
        abstract: "Serve the kiosk station's screen for one enrollment workflow to a local browser.",
        discussion: """
            Serves the station's web page on --listen (a loopback address) and bridges it to tesserad's socket: a browser in kiosk mode on the same machine (e.g. chromium --kiosk "$(cat /run/user/$UID/kiosk.url)") shows one screen per step of the workflow, in the order the daemon asks: start (or an activation code), the MRZ entry (check digits checked as typed), "place your document on the reader" with the progress through the data groups, the camera, one-time codes, consent, the token PIN, and the result with the chip's portrait beside the capture. Retryable failures offer "Try again"; after --idle-timeout seconds without a touch or key while the station waits for the person, the enrollment is cancelled and the page wiped.

            The page can only start the one --workflow (or an activation token naming it), answer the step the daemon asks for, retry, and cancel: the command calls enrollment.subscribe, start, submit, retry, cancel and transactionData and nothing else. It runs as the station's uid (the enrollments and passkeys are that uid's, docs/ENROLLMENT.md) and needs the enroll permission. Everything the page shows comes from this binary: no file from the network. Answers, captures and the portrait stay in memory for the session; the log (stderr) holds step keys, outcomes and error codes only.

            The screen is the station's browser's alone. Each start makes a secret (256 random bits) and prints the URL with it on the "kiosk: serving" line (or writes it to --url-file, a file only this uid can read): http://127.0.0.1:PORT/?token=SECRET. The browser that opens it exchanges the secret for a session cookie (HttpOnly, SameSite=Strict) and is sent on to /; the page, its events and its actions need that cookie, and a second browser cannot take the secret while one holds the session (with --take-over it can: the new browser replaces the old one, whose cookie stops working). Listening on anything but a loopback address is refused. A request must be addressed to the loopback name it listens on (127.0.0.1, localhost or [::1] with the port), and a POST must come from the page's own origin. At most 8 connections are open (a new one closes the oldest without the cookie); a request's headers must arrive within 10 s and its body within 30 s; a body larger than the step needs (4 MiB while the camera shows, else 64 KiB) is refused from its Content-Length; an event stream whose reader stops reading is closed.

            The page's hooks for automation and accessibility: each screen's root has data-step (the step key, or start, done, error), inputs are named after the step's fields, the primary button is data-action="continue" (retry is data-action="retry", cancel data-action="cancel").

            EXIT STATUS
              0 stopped by SIGINT or SIGTERM
              2 the listen address cannot be used, or the daemon refused enrollment.subscribe
              3 tesserad is unreachable or went away
              64 usage error

            EXAMPLES
              tessera kiosk --workflow employee-badge
              tessera kiosk --listen 127.0.0.1:8080 --workflow employee-badge --idle-timeout 90
              tessera kiosk --workflow employee-badge --take-over
              tessera kiosk --workflow employee-badge --url-file /run/user/$UID/kiosk.url
              tessera kiosk --workflow employee-badge --language de
            """)

    @OptionGroup var globals: GlobalOptions
    @Option(
        help: ArgumentHelp(
            "Loopback address and port to serve the page on (port 0: any free port, printed at start).",
            valueName: "HOST:PORT"))
    var listen = "127.0.0.1:8080"
    @Option(
        name: .customLong("url-file"),
        help: ArgumentHelp(
            "Write the page's URL with its secret to PATH (mode 0600, replaced atomically, removed at exit) instead of printing the secret.",
            valueName: "PATH"))
    var urlFile: String?
    @Option(
        help: ArgumentHelp(
            "The configured workflow this station runs (activation tokens must name it too).", valueName: "NAME"))
    var workflow: String
    @Option(
        name: .customLong("idle-timeout"),
        help: ArgumentHelp(
            "Seconds without a touch or key, while the station waits for the person, before the enrollment is cancelled and the page wiped.",
            valueName: "SECONDS"))
    var idleTimeout = 60
    @Flag(
        name: .customLong("take-over"),
        help:
            "Take over what a previous station left: an enrollment of this uid left active (by a kiosk that stopped mid-way, or another client) is interrupted instead of refusing the start with ENROLLMENT_ACTIVE, and a restarted browser may exchange the URL's secret again (the previous browser's session ends)."
    )
    var takeOver = false
    @Option(
        help: ArgumentHelp(
            "The page's language (a catalogue's code: \(KioskCatalogues.languages.joined(separator: ", "))) whatever the browser asks for; without it, the browser's Accept-Language chooses, else English. The person can switch on the start screen; the idle wipe returns to this one.",
            valueName: "CODE"))
    var language: String?

    func validate() throws {
        guard let (host, _) = Self.split(listen) else {
            throw ValidationError("--listen must be HOST:PORT, e.g. 127.0.0.1:8080")
        }
        guard host == "localhost" || host == "::1" || host.hasPrefix("127.") else {
            throw ValidationError(
                "--listen must be a loopback address (127.0.0.1, [::1] or localhost): the station's screen is for a browser on this machine only"
            )
        }
        guard idleTimeout > 0 else { throw ValidationError("--idle-timeout must be at least 1") }
        if let language, !KioskCatalogues.languages.contains(language) {
            throw ValidationError(
                "--language must be one of \(KioskCatalogues.languages.joined(separator: ", ")) (no catalogue for \(language))"
            )
        }
    }

    /// `HOST:PORT`, `[v6]:PORT`.
    static func split(_ s: String) -> (host: String, port: Int)? {
        guard let colon = s.lastIndex(of: ":"), let port = Int(s[s.index(after: colon)...]), (0...65535).contains(port)
        else { return nil }
        var host = String(s[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    func run() async throws {
        let (host, port) = Self.split(listen)!
        let log: @Sendable (String) -> Void = { OpenFile.standardError.write(($0 + "\n")) }
        let client: RPCClient
        do {
            client = try await RPCClient.connect(path: globals.socketPath)
        } catch {
            log("error: \(error.code.rawValue): \(error.message)")
            throw ExitCode(3)
        }
        let bridge = KioskBridge(
            client: client, workflow: workflow, idleTimeout: .seconds(idleTimeout), takeOver: takeOver,
            language: language, log: log)
        let access = KioskAccess(takeOver: takeOver)
        let server: KioskHTTPServer
        do {
            server = try await KioskHTTPServer.start(host: host, port: port, bridge: bridge, access: access)
        } catch {
            log("error: \(error.code.rawValue): \(error.message)")
            throw ExitCode(2)
        }
        let url = access.url(host: host, port: server.port)
        var shownURL = url
        if let urlFile {
            // Mode 0600 from its creation, renamed into place: only the kiosk's uid ever reads the secret.
            let slash = urlFile.lastIndex(of: "/")
            let directory = slash.map { $0 == urlFile.startIndex ? "/" : String(urlFile[..<$0]) } ?? "."
            let name = slash.map { String(urlFile[urlFile.index(after: $0)...]) } ?? urlFile
            if case .failure(let error) = AtomicFile.write(
                Array((url + "\n").utf8), directory: directory, name: name, mode: 0o600)
            {
                log("error: cannot write --url-file \(urlFile): \(error.reason)")
                await server.close()
                throw ExitCode(2)
            }
            shownURL = String(url.prefix { $0 != "?" }) + " (its secret in \(urlFile))"
        }
        defer { if let urlFile { unlink(urlFile) } }
        OpenFile.standardOutput.write("kiosk: serving \(shownURL) for workflow \(workflow)\n")
        let (signals, sources) = LabSignals.install()
        defer { for source in sources { source.cancel() } }
        let status: Int32 = await withTaskGroup(of: Int32.self) { group in
            group.addTask {
                do throws(TesseraError) {
                    try await bridge.run()
                    return 3
                } catch {
                    log("error: \(error.code.rawValue): \(error.message)")
                    return error.code == .daemonUnavailable ? 3 : 2
                }
            }
            group.addTask {
                for await _ in signals { break }
                return 0
            }
            let first = await group.next() ?? 0
            group.cancelAll()
            return first
        }
        await server.close()
        await client.close()
        if status != 0 { throw ExitCode(status) }
    }
}
