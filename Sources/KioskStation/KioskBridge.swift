import RPC
import TesseraCore

/// Bridges the station's page to tesserad: the page's actions become the few `enrollment.*` calls of
/// `KioskSession.allowedMethods` for the station's one workflow, and the daemon's notifications become views pushed
/// to every open page. Enforces the idle timeout. Keeps the portrait and every answer in memory only, and logs
/// step keys, outcomes and error codes, never personal data.
public actor KioskBridge {
    private let client: RPCClient
    private let idleTimeout: Duration
    private let log: @Sendable (String) -> Void
    private var session: KioskSession
    private var subscribers: [Int: @Sendable ([UInt8]) -> Void] = [:]
    private var nextSubscriber = 0
    private var lastActivity = ContinuousClock.now
    private let cameraShown = Locked(false)

    /// Whether the page shows the camera now: an action's body may carry images (the server's body bound).
    public nonisolated var acceptsImages: Bool { cameraShown.withLock { $0 } }
    /// The station's language (`--language`): the page starts in it whatever the browser asks for.
    public nonisolated let language: String?

    /// `idleTimeout`: how long the station waits for the person (a step's input, a failure, the result) before it
    /// cancels the enrollment and wipes the page. `takeOver`: starts interrupt an enrollment left active.
    /// `language`: the page's language whatever the browser asks for (nil: its Accept-Language).
    public init(
        client: RPCClient, workflow: String, idleTimeout: Duration, takeOver: Bool = false, language: String? = nil,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.client = client
        self.language = language
        self.idleTimeout = idleTimeout
        self.log = log
        self.session = KioskSession(workflow: workflow, takeOver: takeOver)
    }

    /// Subscribes to the daemon's enrollment notifications and follows them, with the idle timer, until the
    /// connection to tesserad closes.
    public func run() async throws(TesseraError) {
        _ = try await daemon("enrollment.subscribe", [:])
        let idle = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                await self?.checkIdle()
            }
        }
        defer { idle.cancel() }
        for await n in client.notifications {
            await apply(n)
        }
        throw TesseraError(.daemonUnavailable, "the connection to tesserad closed")
    }

    /// The current view; `send` gets it now and every later one (serialized JSON) until `unsubscribe`.
    public func subscribe(_ send: @escaping @Sendable ([UInt8]) -> Void) -> Int {
        nextSubscriber += 1
        subscribers[nextSubscriber] = send
        send(session.view.serialized())
        return nextSubscriber
    }

    public func unsubscribe(_ id: Int) {
        subscribers[id] = nil
    }

    /// Runs one action of the page: `{ok: true}`, or `{error: {code, message}}` when it does not fit the state or
    /// the daemon refused it (a rejected answer also shows on the step's screen).
    public func perform(_ action: KioskAction) async -> JSONValue {
        lastActivity = .now
        let version = session.version
        let call: KioskCall?
        do throws(TesseraError) {
            call = try session.call(for: action)
        } catch {
            return ["error": KioskSession.errorJSON(error)]
        }
        if session.version != version { broadcast() }
        guard let call else { return ["ok": true] }
        do throws(TesseraError) {
            let result = try await daemon(call.method, call.params)
            switch action {
            case .start:
                do throws(TesseraError) {
                    try session.started(result)
                    log("kiosk: enrollment started")
                } catch {
                    // An activation token for another workflow: not this station's to run.
                    _ = try? await daemon("enrollment.cancel", [:])
                    session.wipe(notice: nil)
                    throw error
                }
            case .submit:
                session.submitted()
            default:
                break
            }
            broadcast()
            return ["ok": true]
        } catch {
            log("kiosk: \(call.method) failed: \(error.code.rawValue)")
            session.callFailed(action, error)
            broadcast()
            return ["error": KioskSession.errorJSON(error)]
        }
    }

    /// One camera frame of the MRZ screen (`{mediaType, data}`) to the daemon's MRZ reader (`mrz.read`):
    /// `{valid: true, lines}` when the lines it read pass the MRZ module's check (every check digit), else
    /// `{valid: false}`, or `{error: {code}}` when there is no reader (the page stops sending frames then). Only
    /// while the station waits for the document step's input; the lines are never logged.
    public func readMRZ(_ image: JSONValue) async -> JSONValue {
        guard session.waitsForDocumentAccess else {
            return ["error": KioskSession.errorJSON(TesseraError(.stepNotExpected, "no MRZ asked for now"))]
        }
        do throws(TesseraError) {
            let result = try await daemon("mrz.read", ["image": image])
            let lines = (result["lines"]?.arrayValue ?? []).compactMap(\.stringValue)
            guard !lines.isEmpty, KioskInputCheck.checkMRZ(lines.joined(separator: "\n"))["valid"] == true else {
                return ["valid": false]
            }
            log("kiosk: MRZ read from the camera")
            return ["valid": true, "lines": .array(lines.map { .string($0) })]
        } catch {
            if error.code == .mrzNotFound { return ["valid": false] }
            log("kiosk: mrz.read failed: \(error.code.rawValue)")
            return ["error": KioskSession.errorJSON(error)]
        }
    }

    private func apply(_ n: RPCNotification) async {
        let before = session.waitsForPerson
        let version = session.version
        let effects = session.apply(n)
        guard session.version != version else { return }
        if session.waitsForPerson, !before || n.method == "enrollment.stepRequired" { lastActivity = .now }
        if n.method == "enrollment.stepRequired" || n.method == "enrollment.busy" {
            log(
                "kiosk: \(n.method.dropFirst("enrollment.".count)) \(n.params["key"]?.stringValue ?? n.params["step"]?.stringValue ?? "")"
            )
        }
        broadcast()
        for effect in effects {
            switch effect {
            case .fetchTransactionData:
                if let data = try? await daemon("enrollment.transactionData", [:]) {
                    session.transactionData(data)
                    broadcast()
                }
            case .finished(let outcome, let code):
                log("kiosk: enrollment finished: \(outcome)\(code.map { " (\($0))" } ?? "")")
            }
        }
    }

    private func checkIdle() async {
        guard session.waitsForPerson, ContinuousClock.now - lastActivity >= idleTimeout else { return }
        log("kiosk: idle for \(idleTimeout): cancelling and wiping the page")
        if session.enrollmentActive {
            _ = try? await daemon("enrollment.cancel", [:])
        }
        session.wipe(notice: "notice.idle")
        lastActivity = .now
        broadcast()
    }

    private func broadcast() {
        let view = session.view
        cameraShown.withLock { $0 = view["kind"]?.stringValue == "camera" }
        let bytes = view.serialized()
        for send in subscribers.values { send(bytes) }
    }

    /// The one door to tesserad: only the methods the station needs.
    private func daemon(_ method: String, _ params: JSONValue) async throws(TesseraError) -> JSONValue {
        precondition(KioskSession.allowedMethods.contains(method), "the kiosk never calls \(method)")
        return try await client.call(method, params)
    }
}
