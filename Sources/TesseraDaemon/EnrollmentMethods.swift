import Enrollment
import Passkeys
import Foundation
import RPC
import Synchronization
import TesseraCore

/// Connections that receive `enrollment.*` notifications (`enrollment.subscribe`, or by starting/resuming).
final class EnrollmentSubscribers: Sendable {
    private let connections = Mutex<[UInt64: RPCConnection]>([:])

    func add(_ c: RPCConnection) { connections.withLock { $0[c.id] = c } }
    func remove(_ c: RPCConnection) { _ = connections.withLock { $0.removeValue(forKey: c.id) } }

    func send(_ method: String, _ params: JSONValue) async {
        for c in connections.withLock({ Array($0.values) }) { await c.notify(method, params) }
    }
}

extension MethodTable {
    /// Registers the `enrollment.*` methods (docs/ENROLLMENT.md).
    func registerEnrollment(_ engine: EnrollmentEngine, subscribers: EnrollmentSubscribers) {
        onClose { subscribers.remove($0) }
        register("enrollment.candidates", .enroll) { _, _ in
            ["candidates": await engine.candidates()]
        }
        register("enrollment.subscribe", .enroll) { _, connection in
            subscribers.add(connection)
            return ["subscribed": true]
        }
        register("enrollment.start", .enroll) { p, connection in
            let type = try p.object("type")
            let start: EnrollmentEngine.StartType
            // The candidate is its workflow name or the object enrollment.candidates returned; the token is the
            // compact JWS or {token}.
            if type.has("remote") {
                let remote = try type.object("remote")
                let candidate = try remote.has("candidate") && remote.value["candidate"]?.objectValue != nil
                    ? remote.object("candidate").string("workflow") : remote.string("candidate")
                start = .remote(candidate: candidate)
            } else if type.has("activationToken") {
                let token = type.value["activationToken"]?.objectValue != nil
                    ? try type.object("activationToken").string("token") : try type.string("activationToken")
                start = .activationToken(token)
            } else {
                throw TesseraError(.invalidInput, "type must be {remote: {candidate}} or {activationToken}", details: ["field": "type"])
            }
            var custom: [WorkflowStep] = []
            for item in try p.optionalArray("customSteps") ?? [] {
                custom.append(try WorkflowStep.custom(item))
            }
            subscribers.add(connection)
            return try await engine.start(start, customSteps: custom,
                                          userVerification: p.optionalString("userVerification") ?? "preferred",
                                          force: p.optionalBool("force") ?? false, owner: connection.peer.uid)
        }
        register("enrollment.status", .enroll) { _, _ in await engine.status() }
        register("enrollment.canResume", .enroll) { _, _ in try await engine.canResume() }
        register("enrollment.resume", .enroll) { _, connection in
            subscribers.add(connection)
            return try await engine.resume()
        }
        register("enrollment.submit", .enroll) { p, connection in
            guard let payload = p.value["payload"] else {
                throw TesseraError(.invalidInput, "missing parameter 'payload'", details: ["field": "payload"])
            }
            return try await engine.submit(stepKey: p.string("stepKey"), payload: payload, caller: connection.pinCaller)
        }
        register("enrollment.retry", .enroll) { _, connection in
            subscribers.add(connection)
            return try await engine.retry()
        }
        register("enrollment.cancel", .enroll) { _, _ in try await engine.cancel() }
        register("enrollment.handleDeepLink", .enroll) { p, connection in
            subscribers.add(connection)
            return try await engine.handleDeepLink(p.string("url"), owner: connection.peer.uid)
        }
        register("enrollment.transactionData", .enroll) { [policy] _, connection in
            let isAdmin = (try? policy.check(.admin, peer: connection.peer)) != nil
            return try await engine.transactionData(uid: connection.peer.uid, isAdmin: isAdmin)
        }
        register("enrollment.audit", .admin) { p, _ in
            ["records": try await engine.audit(limit: p.optionalInt("limit") ?? 100)]
        }
    }
}
