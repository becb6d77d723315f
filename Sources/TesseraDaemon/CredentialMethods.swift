import AccessControl
import CredentialStore
import Enrollment
import FoundationEssentials
import KeyStores
import Passkeys
import RPC
import TesseraCore

extension MethodTable {
    /// Registers the credential lifecycle methods (docs/LIFECYCLE.md): suspend, resume, deactivate, lifecycle
    /// commands, the audit trail and the provisioning check.
    /// With `badgesFollowed` (a door of a building), a badge's lifecycle belongs to the office: REGISTRY_READ_ONLY.
    func registerCredentialLifecycle(
        _ service: PasskeyService, commands: LifecycleCommandVerifier, badgesFollowed: RegistryFollower? = nil
    ) {
        let policy = policy
        @Sendable func local(_ ids: [[UInt8]], rpId: String? = nil) async throws(TesseraError) {
            guard let badgesFollowed else { return }
            var followed = rpId == BadgeRegistry.rpId
            for id in ids where !followed { followed = await badgesFollowed.knows(badgeId: Base64URL.encode(id)) }
            if followed {
                throw TesseraError(
                    .registryReadOnly, "this door follows the badge office's list: badges change at the office")
            }
        }
        let admin: [(String, CredentialState)] = [
            ("credentials.suspend", .suspended), ("credentials.resume", .active),
            ("credentials.deactivate", .deactivated),
        ]
        for (method, state) in admin {
            register(method, .admin) { p, connection in
                let reason = try p.optionalString("reason")
                if let reason, reason.utf8.count > 1024 {
                    throw TesseraError.invalidInput("reason is longer than 1024 bytes")
                }
                let id = try p.bytes("credentialId")
                try await local([id])
                let t = try await service.transition(
                    ids: [id], to: state, actor: "uid:\(connection.peer.uid)", reason: reason)
                return ["credential": Views.credential(t[0].record), "changed": .bool(t[0].changed)]
            }
        }
        register("credentials.applyLifecycle", .enroll) { p, connection in
            let command = try commands.verify(p.string("command"), now: Date())
            try await local(command.credentialId.map { [$0] } ?? [], rpId: command.rpId)
            let ids: [[UInt8]]
            if let id = command.credentialId {
                ids = [id]
            } else {
                ids = try await service.credentials(rpId: command.rpId, userId: command.userId)
                    .filter { !$0.state.isFinal || command.action == .deactivate && $0.state == .deactivated }
                    .map { [UInt8]($0.credentialId) }
            }
            let state: CredentialState
            switch command.action {
            case .suspend: state = .suspended
            case .resume: state = .active
            case .deactivate: state = .deactivated
            }
            let t = try await service.transition(
                ids: ids, to: state,
                actor: "issuer:\(command.issuer) jti:\(command.jti) via uid:\(connection.peer.uid)",
                reason: command.reason, command: (jti: command.jti, issuer: command.issuer))
            return [
                "action": .string(command.action.rawValue), "jti": .string(command.jti),
                "credentials": .array(t.map { Views.credential($0.record) }),
                "changed": .array(t.filter(\.changed).map { .string(Base64URL.encode($0.record.credentialId)) }),
            ]
        }
        register("credentials.chown", .admin) { p, connection in
            let owner = try Policy.uid(p.string("owner"))
            let record = try await service.chown(
                id: p.bytes("credentialId"), to: owner, actor: "uid:\(connection.peer.uid)")
            return ["credential": Views.credential(record)]
        }
        register("credentials.history", .admin) { p, _ in
            let limit = try p.optionalInt("limit") ?? 1000
            guard (1...100_000).contains(limit) else { throw TesseraError.invalidInput("limit must be 1 to 100000") }
            let events = try await service.history(credentialId: p.optionalBytes("credentialId"), limit: limit)
            return ["events": .array(events.map(Views.credentialEvent))]
        }
        register("credentials.provisioningCheck", .read) { p, connection in
            let check = try await service.provisioningCheck(
                rpId: p.string("rpId"), userId: p.bytes("userId"),
                tokenId: p.optionalString("tokenId"), requester: policy.requester(connection))
            return [
                "decision": .string(check.decision.rawValue),
                "credentials": .array(check.credentials.map(Views.credential)),
            ]
        }
    }
}

extension Views {
    static func credentialEvent(_ e: CredentialEvent) -> JSONValue {
        var o: [String: JSONValue] = [
            "credentialId": .string(Base64URL.encode(e.credentialId)),
            "at": .string(e.at.iso8601Seconds), "to": .string(e.toState),
            "actor": .string(e.actor),
        ]
        if let from = e.fromState { o["from"] = .string(from) }
        if let reason = e.reason { o["reason"] = .string(reason) }
        return .object(o)
    }

    /// The lifecycle members of a credential's view.
    static func lifecycle(_ r: CredentialRecord, into o: inout [String: JSONValue]) {
        o["state"] = .string(r.state.rawValue)
        if let at = r.stateChangedAt { o["stateChangedAt"] = .string(at.iso8601Seconds) }
        if let binding = r.identityBinding.flatMap({ try? JSONValue.parse(Array($0.utf8)) }) {
            // Only that a binding exists and the issuing state: the hashes stay in the daemon.
            var b: [String: JSONValue] = [:]
            if let state = binding["issuingState"] { b["issuingState"] = state }
            o["identityBinding"] = .object(b)
        }
    }
}

/// The last authentic `documents.read` of each connection, for `passkey.enroll {documentBinding: true}` (within
/// `maxAge`) and for a `stepup.start` with `document.maxAgeSeconds` on the same connection (each takes it once), and
/// the daemon secret the binding hashes are keyed with.
final class VerifiedDocumentReads: Sendable {
    private let reads = Locked<[UInt64: AuthenticRead]>([:])
    let secret: [UInt8]
    let maxAge: TimeInterval

    init(secret: [UInt8], maxAge: TimeInterval = 600) {
        self.secret = secret
        self.maxAge = maxAge
    }

    /// Keeps an authentic read; any other read (nil) forgets the connection's previous one.
    func record(_ connection: RPCConnection, _ read: AuthenticRead?) {
        reads.withLock { $0[connection.id] = read }
    }

    func forget(_ connection: RPCConnection) { _ = reads.withLock { $0.removeValue(forKey: connection.id) } }

    /// The connection's last authentic read when it is at most `maxAge` seconds old (taken: used once); nil when
    /// there is none or it is older (kept).
    func take(_ connection: RPCConnection, maxAge: TimeInterval) -> AuthenticRead? {
        let now = Date()
        return reads.withLock { reads in
            guard let read = reads[connection.id], now.timeIntervalSince(read.at) <= maxAge else { return nil }
            reads[connection.id] = nil
            return read
        }
    }

    /// The binding of the connection's last authentic read (consumed); INVALID_INPUT without one.
    func takeBinding(_ connection: RPCConnection) throws(TesseraError) -> IdentityBinding {
        guard let read = take(connection, maxAge: maxAge) else {
            throw TesseraError(
                .invalidInput,
                "documentBinding needs an authentic documents.read on this connection "
                    + "in the last \(Int(maxAge)) seconds", details: ["field": "documentBinding"])
        }
        return IdentityBinding(identity: DocumentIdentity(mrz: read.mrz), secret: secret, enrollmentId: nil)
    }
}

extension MethodTable {
    /// Registers `stepup.start`, `stepup.submit`, `stepup.cancel` and `stepup.status` (docs/LIFECYCLE.md, "Step-up").
    /// `documentReads`: the connections' recent authentic reads (`document.maxAgeSeconds`).
    func registerStepUp(
        _ service: StepUpService, subscribers: EnrollmentSubscribers, documentReads: VerifiedDocumentReads
    ) {
        register("stepup.start", .enroll) { [policy] p, connection in
            guard let allow = try p.optionalArray("allowCredentials"), !allow.isEmpty else {
                throw TesseraError.invalidInput("allowCredentials is required and must not be empty")
            }
            var context: JSONValue?
            if p.has("operationContext") {
                let c = try p.object("operationContext")
                guard let content = try c.optionalString("contentB64"),
                    Data(base64Encoded: content) != nil
                        || Base64URL.decode(content) != nil, content.utf8.count <= 65_536
                else {
                    throw TesseraError(
                        .invalidInput, "operationContext.contentB64 must be base64 (at most 64 KiB)",
                        details: ["field": "operationContext.contentB64"])
                }
                context = [
                    "contentB64": .string(content), "mime": .string(try c.optionalString("mime") ?? "application/json"),
                ]
            }
            let document = try p.has("document") ? p.object("document") : Params(.object([:]))
            let maxAge = try document.optionalInt("maxAgeSeconds")
            if let maxAge, maxAge < 0 {
                throw TesseraError(
                    .invalidInput, "document.maxAgeSeconds must not be negative",
                    details: ["field": "document.maxAgeSeconds"])
            }
            var expected: ExpectedAttributes?
            if let e = document.value["expected"], !e.isNull { expected = try ExpectedAttributes(json: e) }
            let hasKey = document.has("mrz") || document.has("can") || document.has("documentNumber")
            let allowCredentials = try Self.credentialIDs(allow, name: "allowCredentials")
            let rpId = try p.string("rpId")
            let challenge = try p.bytes("challenge")
            subscribers.add(connection)
            let caller = policy.enrollmentCaller(connection)
            // Taken last: a request refused while parsing leaves the connection's read for another one.
            let required = try document.optionalBool("required") ?? true
            let recent = required ? maxAge.flatMap { documentReads.take(connection, maxAge: TimeInterval($0)) } : nil
            return try await service.run(
                .init(
                    rpId: rpId, challenge: challenge, allowCredentials: allowCredentials,
                    origin: p.optionalString("origin"),
                    pin: p.optionalString("pin"), userVerification: Self.userVerification(p),
                    allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false, operationContext: context,
                    expiresAt: try Self.date(p, "expiresAt"),
                    documentRequired: required,
                    expected: expected, documentKey: hasKey ? .object(document.value) : nil,
                    reader: document.optionalString("reader"),
                    evidence: document.optionalBool("evidence") ?? false,
                    crossPlatformSessionId: p.optionalString("crossPlatformSessionId"), recentRead: recent,
                    id: p.optionalString("stepUpId")),
                caller: caller)
        }
        register("stepup.submit", .enroll) { [policy] p, connection in
            var payload: JSONValue?
            if let given = p.value["payload"], !given.isNull {
                guard given.objectValue != nil else {
                    throw TesseraError(.invalidInput, "payload must be an object", details: ["field": "payload"])
                }
                payload = given
            }
            let id = try p.string("stepUpId")
            let continued = try await service.submit(
                id, payload: payload, sessionId: p.optionalString("crossPlatformSessionId"),
                pin: p.optionalString("pin"), allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false,
                caller: policy.enrollmentCaller(connection))
            guard case .object(var out)? = continued else { return ["accepted": true, "stepUpId": .string(id)] }
            out["accepted"] = true
            return .object(out)
        }
        register("stepup.cancel", .enroll) { [policy] p, connection in
            let id = try p.string("stepUpId")
            let cancelled = try await service.cancel(
                id, sessionId: p.optionalString("crossPlatformSessionId"),
                caller: policy.enrollmentCaller(connection))
            return ["cancelled": .bool(cancelled), "stepUpId": .string(id)]
        }
        register("stepup.status", .enroll) { [policy] p, connection in
            try await service.status(p.string("stepUpId"), caller: policy.enrollmentCaller(connection))
        }
    }

    /// An optional instant given as seconds since the epoch or an ISO 8601 string.
    static func date(_ p: Params, _ name: String) throws(TesseraError) -> Date? {
        guard let v = p.value[name], !v.isNull else { return nil }
        if let n = v.doubleValue, n.isFinite { return Date(timeIntervalSince1970: n) }
        if let s = v.stringValue, let d = Date(rfc3339: s) { return d }
        throw TesseraError(
            .invalidInput, "\(name) must be seconds since the epoch or an ISO 8601 time",
            details: ["field": .string(name)])
    }
}

extension MethodTable {
    /// Registers `recovery.start` and `recovery.cancel` (docs/LIFECYCLE.md, "Recovery").
    func registerRecovery(_ service: RecoveryService) {
        register("recovery.start", .enroll) { p, connection in
            var document: JSONValue?
            if let d = p.value["document"], !d.isNull {
                guard d.objectValue != nil else {
                    throw TesseraError(.invalidInput, "document must be an object", details: ["field": "document"])
                }
                document = d
            }
            return try await service.start(
                .init(
                    attemptId: p.string("recoveryAttemptId"), token: p.string("recoveryToken"),
                    tokenId: p.optionalString("tokenId"), pin: p.optionalString("pin"),
                    allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false, document: document,
                    origin: p.optionalString("origin"), challenge: p.optionalBytes("challenge"),
                    caller: connection.pinCaller))
        }
        register("recovery.cancel", .enroll) { [policy] p, connection in
            let id = try p.string("recoveryAttemptId")
            let cancelled = try await service.cancel(attemptId: id, caller: policy.enrollmentCaller(connection))
            return ["cancelled": .bool(cancelled), "recoveryAttemptId": .string(id)]
        }
    }
}
