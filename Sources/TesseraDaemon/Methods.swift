import CredentialStore
import Enrollment
import FoundationEssentials
import KeyStores
import MRZ
import Ownership
import Passkeys
import RPC
import TesseraCore

/// The daemon's JSON-RPC method table. Every method and error code is documented in docs/API.md.
final class MethodTable: RPCDispatcher {
    /// Handlers throw `TesseraError`; anything else surfaces as INTERNAL.
    typealias Handler = @Sendable (Params, RPCConnection) async throws -> JSONValue
    /// Answers a request straight from its frame, or nil to leave it to the method's `Handler`.
    typealias DirectHandler =
        nonisolated(nonsending) @Sendable (DirectRequest, RPCConnection) async throws(TesseraError)
        -> DirectAnswer?
    private var handlers: [String: (Permission, Handler)] = [:]
    private var directHandlers: [(method: String, permission: Permission, inline: Bool, handler: DirectHandler)] = []
    private var closeHooks: [@Sendable (RPCConnection) -> Void] = []
    let policy: Policy

    init(policy: Policy) { self.policy = policy }

    func register(_ method: String, _ permission: Permission, _ handler: @escaping Handler) {
        handlers[method] = (permission, handler)
    }

    /// Registers the direct form of `method` (registered with `register` too, with the same permission): it
    /// answers the plainest requests without `JSONValue`s (`DirectRequest`) and must give the `Handler`'s answer.
    /// `inline`: it runs in its connection's task (`RPCDispatcher.answersInline`).
    func registerDirect(
        _ method: String, _ permission: Permission, inline: Bool = false, _ handler: @escaping DirectHandler
    ) {
        directHandlers.append((method, permission, inline, handler))
    }

    func answersInline(_ request: DirectRequest) -> Bool {
        directHandlers.first { request.isMethod($0.method) }?.inline ?? false
    }

    var methods: [String] { handlers.keys.sorted() }

    /// Registers `daemon.methods`: the methods this table serves, read when it is called.
    func registerIntrospection() {
        register("daemon.methods", .read) { [unowned self] _, _ in
            ["methods": .array(methods.map { .string($0) })]
        }
    }

    /// Runs `hook` for every connection that closes (e.g. to drop its subscriptions): as soon as it closes, while its
    /// requests may still run, and again after they end, so a hook must be idempotent.
    func onClose(_ hook: @escaping @Sendable (RPCConnection) -> Void) { closeHooks.append(hook) }

    func connectionClosed(_ connection: RPCConnection) async {
        for hook in closeHooks { hook(connection) }
    }

    nonisolated(nonsending) func answerDirectly(_ request: DirectRequest, from connection: RPCConnection) async
        -> DirectAnswer?
    {
        guard let direct = directHandlers.first(where: { request.isMethod($0.method) }) else { return nil }
        do throws(TesseraError) {
            try policy.check(direct.permission, peer: connection.peer)
            return try await direct.handler(request, connection)
        } catch {
            return DirectAnswer(to: request, error: error)
        }
    }

    func handle(_ request: RPCRequest, from connection: RPCConnection) async throws(TesseraError) -> JSONValue {
        guard let (permission, handler) = handlers[request.method] else {
            throw TesseraError(.methodNotFound, "unknown method '\(request.method)'")
        }
        try policy.check(permission, peer: connection.peer)
        if case .array = request.params {
            throw TesseraError.invalidInput("params must be an object (named parameters)")
        }
        let params = try Params(request.params)
        do {
            return try await handler(params, connection)
        } catch let error as TesseraError {
            throw error
        } catch {
            throw TesseraError(.internalError, "\(request.method): \(error)")
        }
    }
}

// The table is fully built before the server starts and never changes afterwards.
extension MethodTable: @unchecked Sendable {}

extension RPCConnection {
    /// The peer as the PIN rules see it.
    var pinCaller: PINCaller { PINCaller(uid: peer.uid, pid: peer.pid) }
}

/// JSON views of service results (binary as base64url).
enum Views {
    static func credential(_ r: CredentialRecord) -> JSONValue {
        var o: [String: JSONValue] = [
            "credentialId": .string(Base64URL.encode(r.credentialId)),
            "rpId": .string(r.rpId),
            "user": [
                "id": .string(Base64URL.encode(r.userId)), "name": .string(r.userName),
                "displayName": .string(r.userDisplayName),
            ],
            "tokenId": .string(r.tokenId),
            "backend": .string(r.backend),
            "publicKey": .string(Base64URL.encode(r.publicKey)),
            "createdAt": .string(r.createdAt.iso8601Seconds),
            "ownerUid": .number(Double(r.ownerUid)),
        ]
        if let used = r.lastUsedAt { o["lastUsedAt"] = .string(used.iso8601Seconds) }
        lifecycle(r, into: &o)
        return .object(o)
    }

}

extension MethodTable {
    /// Registers the passkey and credential methods.
    /// `storeStatus`: extra members of the `tokens.list` result, one per key store that reports a status
    /// (e.g. `piv`: whether pcscd is reachable and which readers hold PIV cards).
    /// `documentReads`: the connections' authentic reads, for `passkey.enroll {documentBinding: true}`.
    func registerPasskeys(
        _ service: PasskeyService, storeStatus: [String: @Sendable () -> JSONValue] = [:],
        documentReads: VerifiedDocumentReads? = nil
    ) {
        let policy = policy
        register("tokens.list", .read) { _, _ in
            var result: [String: JSONValue] = ["tokens": .array(await Views.tokens(service))]
            for (name, status) in storeStatus { result[name] = status() }
            return .object(result)
        }
        register("passkey.enroll", .enroll) { p, connection in
            let user = try p.object("user")
            let exclude = try Self.credentialIDs(
                p.optionalArray("excludeCredentials") ?? [], name: "excludeCredentials")
            let att = try p.optionalString("attestation") ?? "none"
            guard let attestation = PasskeyService.Attestation(rawValue: att) else {
                throw TesseraError.invalidInput("attestation must be \"none\" or \"packed\"")
            }
            var binding: IdentityBinding?
            if try p.optionalBool("documentBinding") ?? false {
                guard let documentReads else { throw TesseraError.invalidInput("documentBinding is not available") }
                binding = try documentReads.takeBinding(connection)
            }
            let r = try await service.enroll(
                .init(
                    rpId: p.string("rpId"), userId: user.bytes("id"), userName: user.string("name"),
                    userDisplayName: user.optionalString("displayName") ?? user.string("name"),
                    challenge: p.bytes("challenge"), origin: p.optionalString("origin"), excludeCredentials: exclude,
                    tokenId: p.optionalString("tokenId"), pin: p.optionalString("pin"), attestation: attestation,
                    userVerification: Self.userVerification(p), caller: connection.pinCaller,
                    allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false,
                    provisioning: ProvisioningRule(replace: p.optionalBool("replace") ?? false),
                    identityBinding: binding?.text, requester: policy.requester(connection)))
            return [
                "credentialId": .string(Base64URL.encode(r.credentialId)),
                "attestationObject": .string(Base64URL.encode(r.attestationObject)),
                "clientDataJSON": .string(Base64URL.encode(r.clientDataJSON)),
                "authenticatorData": .string(Base64URL.encode(r.authenticatorData)),
                "publicKey": .string(Base64URL.encode(r.publicKey)),
                "tokenId": .string(r.tokenId),
                "userVerified": .bool(r.userVerified),
            ]
        }
        register("passkey.authenticate", .sign) { p, connection in
            guard let allow = try p.optionalArray("allowCredentials") else {
                throw TesseraError.invalidInput("allowCredentials is required and must not be empty")
            }
            let a = try await service.authenticate(
                .init(
                    rpId: p.string("rpId"), challenge: p.bytes("challenge"),
                    allowCredentials: try Self.credentialIDs(allow, name: "allowCredentials"),
                    origin: p.optionalString("origin"), pin: p.optionalString("pin"),
                    userVerification: Self.userVerification(p), caller: connection.pinCaller,
                    allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false,
                    requester: policy.requester(connection)))
            return .object(a.json)
        }
        // The same method for the plainest requests (base64url ids, no escapes): read from the frame and answered
        // into it, with no JSON tree either way; any other request takes the handler above. Inline: a connection's
        // assertions follow one another (one signing each; a client wanting several at once opens connections).
        registerDirect("passkey.authenticate", .sign, inline: true) { r, connection throws(TesseraError) in
            guard
                let request = Self.directAuthenticateRequest(
                    r, caller: connection.pinCaller, requester: policy.requester(connection))
            else { return nil }
            let a = try await service.authenticate(request)
            var answer = DirectAnswer(
                to: r,
                capacity: 200 + 4
                    * (a.authenticatorData.count + a.clientDataJSON.count + a.credentialId.count
                        + a.signature.count + a.userHandle.count) / 3)
            answer.base64URL("authenticatorData", a.authenticatorData)
            answer.base64URL("clientDataJSON", a.clientDataJSON)
            answer.base64URL("credentialId", a.credentialId)
            answer.integer("signCount", a.signCount)
            answer.base64URL("signature", a.signature)
            answer.base64URL("userHandle", a.userHandle)
            answer.bool("userVerified", a.userVerified)
            return answer
        }
        register("credentials.list", .read) { p, connection in
            let list = try await service.credentials(
                rpId: p.optionalString("rpId"), userId: p.optionalBytes("userId"),
                requester: policy.requester(connection))
            return ["credentials": .array(list.map(Views.credential))]
        }
        register("credentials.get", .read) { p, connection in
            Views.credential(
                try await service.credential(id: p.bytes("credentialId"), requester: policy.requester(connection)))
        }
        register("credentials.delete", .enroll) { p, connection in
            let id = try p.bytes("credentialId")
            let deleted = try await service.delete(
                id: id, pin: p.optionalString("pin"), caller: connection.pinCaller,
                allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false,
                requester: policy.requester(connection))
            return [
                "deleted": true, "credentialId": .string(Base64URL.encode(id)), "credential": Views.credential(deleted),
            ]
        }
    }

    func registerDocuments() {
        register("mrz.parse", .read) { p, _ in
            let mrz = try MRZ.parse(p.string("text"))
            return Views.mrz(mrz)
        }
    }

    /// The `passkey.authenticate` request of a direct frame whose parameters all read as the handler reads them
    /// without an error; nil for any other (the handler then answers it, with its error if it has one).
    static func directAuthenticateRequest(_ r: DirectRequest, caller: PINCaller, requester: Requester)
        -> PasskeyService.AuthenticateRequest?
    {
        func optionalString(_ v: DirectRequest.Value?) -> String?? {
            switch v {
            case .none, .null?: return .some(nil)
            case .string(let s)?: return s
            default: return nil
            }
        }
        guard case .string(let rpId)? = r["rpId"], case .string(let challengeText)? = r["challenge"],
            let challenge = Base64URL.decode(challengeText), case .strings(let allow)? = r["allowCredentials"],
            !allow.isEmpty, let origin = optionalString(r["origin"]), let pin = optionalString(r["pin"]),
            let uvText = optionalString(r["userVerification"]),
            let uv = PasskeyService.UserVerification(rawValue: uvText ?? "preferred")
        else { return nil }
        let allowFinalPinTry: Bool
        switch r["allowFinalPinTry"] {
        case .none, .null?: allowFinalPinTry = false
        case .bool(let b)?: allowFinalPinTry = b
        default: return nil
        }
        var ids: [[UInt8]] = []
        ids.reserveCapacity(allow.count)
        for text in allow {
            guard let id = Base64URL.decode(text), !id.isEmpty else { return nil }
            ids.append(id)
        }
        return .init(
            rpId: rpId, challenge: challenge, allowCredentials: ids, origin: origin, pin: pin, userVerification: uv,
            caller: caller, allowFinalPinTry: allowFinalPinTry, requester: requester)
    }

    /// Accepts credential ids as base64url strings or as {type: "public-key", id} descriptors.
    static func credentialIDs(_ items: [JSONValue], name: String) throws(TesseraError) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for item in items {
            let text: String?
            switch item {
            case .string(let s): text = s
            case .object(let o): text = o["id"]?.stringValue
            default: text = nil
            }
            guard let text, let bytes = Base64URL.decode(text), !bytes.isEmpty else {
                throw TesseraError.invalidInput("\(name) items must be base64url credential ids or {type, id} objects")
            }
            out.append(bytes)
        }
        return out
    }

    static func userVerification(_ p: Params) throws(TesseraError) -> PasskeyService.UserVerification {
        let s = try p.optionalString("userVerification") ?? "preferred"
        guard let uv = PasskeyService.UserVerification(rawValue: s) else {
            throw TesseraError.invalidInput("userVerification must be required, preferred or discouraged")
        }
        return uv
    }
}

extension Views {
    /// Every present token's `tokens.list` entry.
    static func tokens(_ service: PasskeyService) async -> [JSONValue] {
        var list: [JSONValue] = []
        for t in await service.freshTokens() { list.append(await t.describe()) }
        return list
    }

    /// The `mrz` object of the public contract (dates as printed, YYMMDD) plus the format and full dates.
    static func mrz(_ m: MRZ) -> JSONValue {
        var o = m.jsonFields().mapValues { JSONValue.string($0) }
        o["format"] = .string(m.format.rawValue)
        if let b = m.birthDate() { o["birthDate"] = .string(b.description) }
        if let e = m.expiryDate() { o["expiryDate"] = .string(e.description) }
        return .object(o)
    }
}
