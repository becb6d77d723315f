import Enrollment
import FoundationEssentials
import Ownership
import Passkeys
import RPC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Connections that receive `enrollment.*` notifications (`enrollment.subscribe`, or by starting/resuming).
/// An event's full params go to the uid that started the enrollment and to administrators; the others get it
/// without personal data (`EnrollmentEvent.redacted`).
final class EnrollmentSubscribers: Sendable {
    private struct Subscriber { var connection: RPCConnection; var isAdmin: Bool }
    private let connections = Locked<[UInt64: Subscriber]>([:])
    private let policy: Policy

    init(policy: Policy) { self.policy = policy }

    func add(_ c: RPCConnection) {
        // The policy's answer is taken once, when the connection subscribes.
        let isAdmin = policy.grants(.admin, to: c.peer)
        connections.withLock { $0[c.id] = Subscriber(connection: c, isAdmin: isAdmin) }
    }

    func remove(_ c: RPCConnection) { _ = connections.withLock { $0.removeValue(forKey: c.id) } }

    /// Sends a notification to the subscribed connections of `uid` only, except `skipping` (which got it already):
    /// e.g. `mdoc.request`, which only that uid may answer.
    func send(_ method: String, _ params: JSONValue, toUid uid: UInt32, skipping: RPCConnection? = nil) async {
        for s in connections.withLock({ Array($0.values) })
        where s.connection.peer.uid == uid && s.connection != skipping {
            await s.connection.notify(method, params)
        }
    }

    func send(_ event: EnrollmentEvent) async {
        var redacted: JSONValue?
        for s in connections.withLock({ Array($0.values) }) {
            if s.isAdmin || s.connection.peer.uid == event.owner {
                await s.connection.notify(event.method, event.params)
            } else {
                if redacted == nil { redacted = event.redacted }
                await s.connection.notify(event.method, redacted ?? .object([:]))
            }
        }
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
        register("enrollment.start", .enroll) { [policy] p, connection in
            let type = try p.object("type")
            let start: EnrollmentEngine.StartType
            // The candidate is its workflow name or the object enrollment.candidates returned; the token is the
            // compact JWS or {token}.
            if type.has("remote") {
                let remote = try type.object("remote")
                let candidate =
                    try remote.has("candidate") && remote.value["candidate"]?.objectValue != nil
                    ? remote.object("candidate").string("workflow") : remote.string("candidate")
                start = .remote(candidate: candidate)
            } else if type.has("activationToken") {
                let token =
                    type.value["activationToken"]?.objectValue != nil
                    ? try type.object("activationToken").string("token") : try type.string("activationToken")
                start = .activationToken(token)
            } else {
                throw TesseraError(
                    .invalidInput, "type must be {remote: {candidate}} or {activationToken}", details: ["field": "type"]
                )
            }
            var custom: [WorkflowStep] = []
            for item in try p.optionalArray("customSteps") ?? [] {
                custom.append(try WorkflowStep.custom(item))
            }
            subscribers.add(connection)
            return try await engine.start(
                start, customSteps: custom,
                userVerification: p.optionalString("userVerification") ?? "preferred",
                force: p.optionalBool("force") ?? false,
                caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.status", .enroll) { [policy] _, connection in
            await engine.status(caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.canResume", .enroll) { _, _ in try await engine.canResume() }
        register("enrollment.resume", .enroll) { [policy] _, connection in
            subscribers.add(connection)
            return try await engine.resume(caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.submit", .enroll) { [policy] p, connection in
            guard let payload = p.value["payload"] else {
                throw TesseraError(.invalidInput, "missing parameter 'payload'", details: ["field": "payload"])
            }
            return try await engine.submit(
                stepKey: p.string("stepKey"), payload: payload,
                caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.retry", .enroll) { [policy] _, connection in
            subscribers.add(connection)
            return try await engine.retry(caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.cancel", .enroll) { [policy] _, connection in
            try await engine.cancel(caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.handleDeepLink", .enroll) { [policy] p, connection in
            subscribers.add(connection)
            return try await engine.handleDeepLink(p.string("url"), caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.transactionData", .enroll) { [policy] _, connection in
            try await engine.transactionData(caller: policy.enrollmentCaller(connection))
        }
        register("enrollment.audit", .admin) { p, _ in
            ["records": try await engine.audit(limit: p.optionalInt("limit") ?? 100)]
        }
    }
}

extension Policy {
    /// Whether the policy grants `permission` to `peer`.
    func grants(_ permission: Permission, to peer: PeerCredentials) -> Bool {
        (try? check(permission, peer: peer)) != nil
    }

    /// The caller of a method as the owner rule sees it (docs/API.md, "Owners"): its uid, and whether it is an
    /// administrator.
    func requester(_ connection: RPCConnection) -> Requester {
        Requester(uid: connection.peer.uid, pid: connection.peer.pid, isAdmin: grants(.admin, to: connection.peer))
    }

    /// The caller of an `enrollment.*` method.
    func enrollmentCaller(_ connection: RPCConnection) -> EnrollmentCaller { requester(connection) }
}
