import APDU
import Emulation
import FoundationEssentials
import NFC
import RPC
import ServiceLifecycle
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Card emulation sessions on libnfc devices, keyed by connstring.
final class LabSessions: Sendable {
    private let running = Locked<[String: NFCCardEmulator]>([:])

    func add(_ connstring: String, _ emulator: NFCCardEmulator) throws(TesseraError) {
        let added = running.withLock { r -> Bool in
            guard r[connstring] == nil else { return false }
            r[connstring] = emulator
            return true
        }
        guard added else { throw TesseraError(.deviceBusy, "\(connstring) is already emulating a card") }
    }

    func remove(_ connstring: String) { running.withLock { _ = $0.removeValue(forKey: connstring) } }

    /// Stops the session on `connstring`; false when there is none.
    func stop(_ connstring: String) -> Bool {
        guard let emulator = running.withLock({ $0[connstring] }) else { return false }
        emulator.stop()
        return true
    }
}

extension MethodTable {
    /// Registers `lab.emulate` and `lab.stop` (docs/API.md, "Lab: card emulation").
    ///
    /// Both need `admin`: a session seizes a reader for minutes, reads the profile or script and writes the trace
    /// at paths the caller names with the daemon's rights, and `enroll`/`sign` are open to every socket client by
    /// default.
    func registerLab() {
        let sessions = LabSessions()
        register("lab.emulate", .admin) { p, connection in
            let request = try LabEmulateRequest(p)
            let card: any VirtualCard
            switch request.source {
            case .profile(let directory):
                card = EmulatedPassport(profile: try DocumentProfile.load(directory: directory))
            case .script(let path): card = try ScriptedCard.load(path: path)
            }
            let trace = try request.trace.map { path throws(TesseraError) in try APDUTraceWriter(path: path) }
            defer { trace?.close() }
            let device = try await NFCDevice.open(request.device, context: try NFCContext.shared())
            let emulator: NFCCardEmulator
            do {
                emulator = try NFCCardEmulator(device: device, card: card, identity: request.identity, trace: trace)
                try sessions.add(request.device, emulator)
            } catch {
                await device.close()
                throw error
            }
            defer { sessions.remove(request.device) }
            let (events, sink) = AsyncStream.makeStream(
                of: NFCEmulationEvent.self, bufferingPolicy: .bufferingNewest(4096))
            let forwarder = Task {
                for await event in events {
                    let (method, params) = LabViews.notification(event, device: request.device)
                    await connection.notify(method, params)
                }
            }
            let outcome = await withGracefulShutdownHandler { () async -> Result<NFCEmulationSummary, TesseraError> in
                do throws(TesseraError) {
                    return .success(try await emulator.run(for: .seconds(request.durationSeconds)) { sink.yield($0) })
                } catch {
                    return .failure(error)
                }
            } onGracefulShutdown: {
                emulator.stop()
            }
            sink.finish()
            await forwarder.value
            await device.close()
            let summary = try outcome.get()
            var result: [String: JSONValue] = [
                "device": .string(request.device), "reason": .string(summary.reason.rawValue),
                "exchanges": .number(Double(summary.exchanges)), "activations": .number(Double(summary.activations)),
            ]
            if let path = request.trace { result["trace"] = .string(path) }
            return .object(result)
        }
        register("lab.stop", .admin) { p, _ in
            ["stopped": .bool(sessions.stop(try p.string("device")))]
        }
    }
}

/// `lab.emulate` params: device, exactly one of profile / script, trace?, durationSeconds?, uid?, historicalBytes?.
struct LabEmulateRequest {
    enum Source { case profile(String), script(String) }
    var device: String
    var source: Source
    var trace: String?
    var durationSeconds: Int
    var identity: NFCCardIdentity

    static let defaultDuration = 600

    init(_ p: Params) throws(TesseraError) {
        device = try p.string("device")
        let profile = try p.optionalString("profile"), script = try p.optionalString("script")
        switch (profile, script) {
        case (let dir?, nil): source = .profile(try Self.absolute(dir, "profile"))
        case (nil, let path?): source = .script(try Self.absolute(path, "script"))
        default: throw TesseraError.invalidInput("give exactly one of profile (a document profile directory) or script")
        }
        trace = try p.optionalString("trace").map { path throws(TesseraError) in try Self.absolute(path, "trace") }
        durationSeconds = try p.optionalInt("durationSeconds") ?? Self.defaultDuration
        guard (1...86_400).contains(durationSeconds) else {
            throw TesseraError(.invalidInput, "durationSeconds must be 1…86400", details: ["field": "durationSeconds"])
        }
        identity = NFCCardIdentity()
        if let uid = try p.optionalBytes("uid") { identity.uid = uid }
        if let historical = try p.optionalBytes("historicalBytes") { identity.historicalBytes = historical }
    }

    /// The daemon's working directory means nothing to a client: paths must be absolute.
    static func absolute(_ path: String, _ field: String) throws(TesseraError) -> String {
        guard path.hasPrefix("/") else {
            throw TesseraError(.invalidInput, "\(field) must be an absolute path", details: ["field": .string(field)])
        }
        return path
    }
}

enum LabViews {
    static func time(_ date: Date) -> JSONValue {
        .string(CivilTime(date).rfc3339(milliseconds: true))
    }

    /// `lab.apdu` for exchanges, `lab.event` for the rest.
    static func notification(_ event: NFCEmulationEvent, device: String) -> (String, JSONValue) {
        switch event {
        case .waiting(let at):
            return ("lab.event", ["device": .string(device), "event": "waiting", "time": time(at)])
        case .activated(let at):
            return ("lab.event", ["device": .string(device), "event": "activated", "time": time(at)])
        case .fieldLost(let at, let pending, let reason):
            var o: [String: JSONValue] = [
                "device": .string(device), "event": "fieldLost", "time": time(at),
                "reason": .string(reason),
            ]
            if let pending { o["pendingCommand"] = .string(Base64URL.encode(pending)) }
            return ("lab.event", .object(o))
        case .exchange(let x):
            return (
                "lab.apdu",
                [
                    "device": .string(device), "command": .string(Base64URL.encode(x.command)),
                    "response": .string(Base64URL.encode(x.response)), "delivered": .bool(x.delivered),
                    "commandTime": time(x.commandTime), "responseTime": time(x.responseTime),
                ]
            )
        }
    }
}
