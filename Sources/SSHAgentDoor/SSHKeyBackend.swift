import CredentialStore
import FoundationEssentials
import KeyStores
import Logging
import Ownership
import PKCS11
import Passkeys
import Pinentry
import Presence
import RPC
import SSHAgent
import ServiceLifecycle
import TesseraCore

/// The SSH agent's view of the daemon's key stores (the same tokens as passkeys, never a passkey's key).
///
/// Which keys: every P-256 and RSA public key object (or, without one, X.509 certificate) on a PKCS#11 token,
/// and the keys of PIV slots 9A and 9E that hold a P-256 or RSA certificate, except keys of another purpose
/// (`KeyPurpose`): passkeys (`CKA_LABEL` `tessera:…`, or a credential's key), mdoc device keys, the badge CA's key
/// (`ConfiguredKey`s, e.g. `accessControl.issuer`) or any key recorded for a purpose other than `ssh`. Keys made by `ssh.keygen` carry `CKA_LABEL` `ssh:COMMENT` (`ssh-confirm:COMMENT` when every
/// signature needs the presence broker's confirmation); other keys are offered with their label as comment. A key
/// that needs its token's PIN signs only after `ssh-add -s` for that token, unless the token has a PIN file
/// (`needsUnlock`); with a `pinentry`, the agent asks for that PIN itself (once per signature, `askPIN`).
///
/// REQUEST_IDENTITIES always lists the tokens afresh; SIGN_REQUEST finds its key (and token) in the cache that
/// listing fills, so a signature is one token operation. The cache is dropped on token events (PIV hotplug,
/// pcscd), after `ssh.keygen`, and when a signature fails because the token or key is gone.
public struct SSHKeyBackend: SSHAgentBackend {
    public static let sshLabelPrefix = "ssh:"
    public static let confirmLabelPrefix = "ssh-confirm:"
    public static let passkeyLabelPrefix = "tessera:"
    /// `MDocHolderService.labelPrefix` (that module is above this one).
    static let mdocLabelPrefix = "tessera:mdoc:"

    public let passkeys: PasskeyService
    let logger: Logger
    /// Asked (door `ssh`) for each signature with a `confirm` key.
    let presence: PresenceBroker
    /// Whose the keys `ssh.keygen` made are; every other key is the daemon's uid's.
    public let owners: SSHKeyOwnerStore
    /// Asked for a token's PIN when a key needs an unlock the client's uid does not hold (nil: `ssh-add -s` only).
    let pinentry: Pinentry?
    /// The keys' recorded purposes (nil: the labels' and `configuredKeys`' only).
    let purposes: KeyPurposeStore?
    /// Keys the configuration names for a purpose (the badge CA's): never offered.
    let configuredKeys: [ConfiguredKey]
    private let cache = IdentityCache()

    public init(
        passkeys: PasskeyService, logger: Logger, presence: PresenceBroker, owners: SSHKeyOwnerStore,
        pinentry: Pinentry? = nil, purposes: KeyPurposeStore? = nil, configuredKeys: [ConfiguredKey] = []
    ) {
        self.passkeys = passkeys; self.logger = logger; self.presence = presence; self.owners = owners
        self.pinentry = pinentry; self.purposes = purposes; self.configuredKeys = configuredKeys
    }

    /// The purposes a key's label says (Tessera's own labels).
    static func labelPurposes(_ label: String) -> Set<KeyPurpose> {
        if label.hasPrefix(mdocLabelPrefix) { return [.mdocDevice] }
        if label.hasPrefix(passkeyLabelPrefix) { return [.passkey] }
        if label.hasPrefix(sshLabelPrefix) || label.hasPrefix(confirmLabelPrefix) { return [.ssh] }
        return []
    }

    /// Whether the agent offers a key with these purposes: `ssh` and a PIV card's own 9A/9E keys, and keys with
    /// none (a key a user put on the token, as OpenSSH's PKCS#11 provider would offer it); never one with any other.
    static func offers(_ purposes: Set<KeyPurpose>) -> Bool { purposes.isSubset(of: [.ssh, .pivSlot]) }

    /// The offered keys by blob, with their tokens; `generation` makes a listing that raced an invalidation
    /// not refill the cache with what it saw before.
    final class IdentityCache: Sendable {
        private struct State {
            var generation: UInt64 = 0
            var byBlob: [ByteKey: AgentIdentity]?
            var tokens: [String: any KeyStoreToken] = [:]
        }
        private let state = Locked(State())

        var generation: UInt64 { state.withLock { $0.generation } }
        func lookup(_ blob: [UInt8]) -> AgentIdentity?? {
            state.withLock { s in s.byBlob.map { $0[ByteKey(blob)] } }
        }
        /// The token of a listed key (nil after an invalidation).
        func token(_ id: String) -> (any KeyStoreToken)? { state.withLock { $0.tokens[id] } }
        func fill(_ entries: [(identity: AgentIdentity, token: any KeyStoreToken)], generation: UInt64) {
            state.withLock { s in
                guard s.generation == generation else { return }
                var map: [ByteKey: AgentIdentity] = [:]
                var tokens: [String: any KeyStoreToken] = [:]
                for e in entries {
                    let key = ByteKey(e.identity.key.blob)
                    guard map[key] == nil else { continue }
                    map[key] = e.identity
                    tokens[e.token.id] = e.token
                }
                s.byBlob = map
                s.tokens = tokens
            }
        }
        func invalidate() {
            state.withLock {
                $0.generation &+= 1; $0.byBlob = nil; $0.tokens = [:]
            }
        }
    }

    /// `ssh.keygen`: a P-256 key on `token` labelled `ssh:COMMENT` (`ssh-confirm:COMMENT` with `confirm`), owned by
    /// the caller's uid. With `pin`, the token is logged in under the PIN rules first.
    public func keygen(
        token: any KeyStoreToken, comment: String, confirm: Bool, pin: String?, allowFinalTry: Bool, caller: PINCaller
    ) async throws(TesseraError) -> (handle: [UInt8], key: SSHPublicKey) {
        let handle = SecureRandom.bytes(16)
        let label = (confirm ? Self.confirmLabelPrefix : Self.sshLabelPrefix) + comment
        // The owner first: a key generation that fails leaves an unused row, never a key with no owner.
        try await owners.record(SSHKeyOwnerRecord(tokenId: token.id, keyHandle: handle, ownerUid: caller.uid))
        let point: [UInt8]
        if let pin {
            point = try await passkeys.pinRules.withCallerPIN(
                pin, caller: caller, allowFinalTry: allowFinalTry, tokenId: token.id
            ) { attempt throws(TesseraError) in
                try await token.generateP256Key(handle: handle, label: label, pin: attempt)
            }
        } else {
            point = try await token.generateP256Key(handle: handle, label: label, pin: nil)
        }
        invalidate()
        return (handle, .ecdsaP256(point: point))
    }

    /// Records the purposes of the configured keys on the tokens present (at start-up: they then stay refused even
    /// if the agent first lists keys after the configuration no longer names them).
    public func recordConfiguredPurposes() async {
        guard !configuredKeys.isEmpty else { return }
        _ = await list()
    }

    /// Drops the cached keys (token events, new keys).
    public func invalidate() { cache.invalidate() }

    public func identities() async -> [AgentIdentity] { await list().map(\.identity) }

    public func identity(blob: [UInt8]) async -> AgentIdentity? {
        if let cached = cache.lookup(blob) { return cached }
        return await list().first { $0.identity.key.blob == blob }?.identity
    }

    private func list() async -> [(identity: AgentIdentity, token: any KeyStoreToken)] {
        let generation = cache.generation
        var out: [(identity: AgentIdentity, token: any KeyStoreToken)] = []
        let recorded: [String: [Data: UInt32]]
        do { recorded = try await owners.owners() } catch {
            // Without the owners nobody but the daemon's uid and administrators would see a key: list none.
            logger.error("ssh-agent: cannot read the keys' owners: \(error)")
            return []
        }
        var known: [String: [Data: Set<KeyPurpose>]] = [:]
        if let purposes {
            do { known = try await purposes.purposes() } catch {
                // Without the purposes a badge CA's or another door's key could be offered: list none.
                logger.error("ssh-agent: cannot read the keys' purposes: \(error)")
                return []
            }
        }
        for token in await passkeys.tokens() {
            let keys: [TokenKey]
            do { keys = try await token.publicKeys() } catch {
                logger.debug("ssh-agent: cannot list keys of token \(token.id): \(error)")
                continue
            }
            for key in keys {
                var keyPurposes = known[token.id]?[Data(key.handle)] ?? []
                keyPurposes.formUnion(Self.labelPurposes(key.label))
                if token.backend == "piv", key.label.hasPrefix("PIV ") { keyPurposes.insert(.pivSlot) }
                for configured in configuredKeys where configured.tokenId == token.id && configured.label == key.label {
                    if !keyPurposes.contains(configured.purpose) {
                        await record(configured.purpose, token: token.id, key: key)
                        keyPurposes.insert(configured.purpose)
                    }
                }
                guard Self.offers(keyPurposes) else { continue }
                var comment = key.label, confirm = false
                if key.label.hasPrefix(Self.sshLabelPrefix) {
                    comment = String(key.label.dropFirst(Self.sshLabelPrefix.count))
                } else if key.label.hasPrefix(Self.confirmLabelPrefix) {
                    comment = String(key.label.dropFirst(Self.confirmLabelPrefix.count))
                    confirm = true
                }
                let sshKey: SSHPublicKey =
                    switch key.value {
                    case .p256(let point): .ecdsaP256(point: point)
                    case .rsa(let modulus, let exponent): .rsa(exponent: exponent, modulus: modulus)
                    }
                out.append(
                    (
                        AgentIdentity(
                            key: sshKey, comment: comment, tokenID: token.id, handle: key.handle,
                            confirm: confirm, needsUnlock: key.needsPIN && !token.hasConfiguredPIN,
                            ownerUid: recorded[token.id]?[Data(key.handle)] ?? Requester.daemonUID), token
                    ))
            }
        }
        cache.fill(out, generation: generation)
        return out
    }

    /// Records a configured key's purpose, so that it stays when the configuration no longer names the key.
    private func record(_ purpose: KeyPurpose, token: String, key: TokenKey) async {
        do {
            try await purposes?.record(KeyPurposeRecord(tokenId: token, keyHandle: key.handle, purpose: purpose))
        } catch {
            logger.warning("ssh-agent: cannot record the purpose of key '\(key.label)' on token \(token): \(error)")
        }
    }

    /// ECDSA P-256, or RSA PKCS#1 v1.5 with SHA-512 / SHA-256 for the `rsa-sha2-512` / `rsa-sha2-256` flags and
    /// SHA-1 (`ssh-rsa`) without one, as OpenSSH's agent does.
    public func sign(_ identity: AgentIdentity, data: [UInt8], flags: UInt32) async throws(TesseraError) -> [UInt8] {
        let token: any KeyStoreToken
        if let cached = cache.token(identity.tokenID) {
            token = cached
        } else {
            token = try await passkeys.chooseToken(identity.tokenID)
        }
        do throws(TesseraError) {
            switch identity.key {
            case .ecdsaP256:
                let raw = try await token.signP256(handle: identity.handle, message: data, pin: nil)
                return try SSHSignature.ecdsaP256(raw: raw)
            case .rsa:
                let algorithm: String, hash: RSASignatureHash
                if flags & AgentSignFlags.rsaSHA2_512 != 0 {
                    (algorithm, hash) = ("rsa-sha2-512", .sha512)
                } else if flags & AgentSignFlags.rsaSHA2_256 != 0 {
                    (algorithm, hash) = ("rsa-sha2-256", .sha256)
                } else {
                    (algorithm, hash) = ("ssh-rsa", .sha1)
                }
                let signature = try await token.signRSA(handle: identity.handle, message: data, hash: hash)
                return SSHSignature.rsa(algorithm: algorithm, signature: signature)
            }
        } catch {
            switch error.code {
            case .tokenNotPresent, .tokenRemoved, .passkeyNotFound, .cardReset, .pcscUnavailable, .shuttingDown:
                cache.invalidate()
            default: break
            }
            throw error
        }
    }

    public func unlock(readerID: String, pin: String, peer: AgentPeer) async throws(TesseraError) -> String {
        let token = try await passkeys.token(named: readerID)
        // `ssh-add -s` cannot say "allow the final try": the agent never spends a token's last PIN try.
        try await passkeys.pinRules.withCallerPIN(
            pin, caller: PINCaller(uid: peer.uid, pid: peer.pid),
            allowFinalTry: false, tokenId: token.id
        ) { attempt throws(TesseraError) in
            try await token.login(pin: attempt)
        }
        return token.id
    }

    public func tokenID(readerID: String) async -> String? { try? await passkeys.token(named: readerID).id }

    /// Logs the token out, unless the daemon holds its PIN (a PIN file): that login is the daemon's, not the agent's.
    public func forget(tokenID: String) async {
        guard let token = await passkeys.tokens().first(where: { $0.id == tokenID }), !token.hasConfiguredPIN else {
            return
        }
        await token.logout()
    }

    public func confirm(_ identity: AgentIdentity, peer: AgentPeer, forwarded: Bool) async -> Bool {
        let details: [String: JSONValue] = [
            "type": "ssh-sign", "key": .string(identity.key.authorizedKeysLine(comment: identity.comment)),
            "tokenId": .string(identity.tokenID), "connection": .number(Double(peer.connectionID)),
            "forwarded": .bool(forwarded),
        ]
        do throws(TesseraError) {
            let answer = try await presence.ask(
                PresenceQuestion(door: .ssh, uid: peer.uid, pid: peer.pid, details: details))
            return answer == .confirmed
        } catch {
            logger.notice("ssh-agent: presence for \(identity.comment): \(error)")
            return false
        }
    }

    /// Asks the pinentry for the PIN of the key's token: on the client's terminal when the daemon runs as the client's
    /// uid, else on the daemon's display. Not asked while the uid's PIN back-off runs or when the token has its final
    /// try left or is locked (nothing would be tried), nor without a terminal or a display to show the dialog on.
    public func askPIN(_ identity: AgentIdentity, peer: AgentPeer) async -> AgentPINAnswer {
        guard let pinentry else { return .unavailable }
        do throws(TesseraError) {
            try passkeys.pinRules.checkBackoff(PINCaller(uid: peer.uid, pid: peer.pid))
        } catch {
            logger.notice("ssh-agent: no PIN asked for token \(identity.tokenID): \(error.message)")
            return .unavailable
        }
        let terminal = Pinentry.clientTerminal(pid: peer.pid, uid: peer.uid)
        guard pinentry.canShow(ttyname: terminal) else {
            logger.info("ssh-agent: no terminal of the client and no display for a PIN dialog")
            return .unavailable
        }
        var name = identity.tokenID
        if let token = cache.token(identity.tokenID) {
            let described = await token.describe()
            // The agent never spends a token's final try (as for ssh-add -s): no use asking for a PIN it would not try.
            if described["flags"]?["pinFinalTry"]?.boolValue == true
                || described["flags"]?["pinLocked"]?.boolValue == true
            {
                logger.notice(
                    """
                    ssh-agent: token \(identity.tokenID) has one PIN try left or is locked: no PIN is asked; the agent \
                    never spends the final try (tessera … --allow-final-pin-try does, or the token's own tools)
                    """)
                return .unavailable
            }
            if let label = described["label"]?.stringValue { name = "\(label) (\(identity.tokenID))" }
        }
        let prompt = PinentryPrompt(
            title: "Tessera SSH agent",
            description: """
                The SSH key "\(identity.comment)" is on token \(name), which needs its PIN.
                Signature requested by uid \(peer.uid) pid \(peer.pid).
                A wrong PIN counts against the token's tries.
                """,
            prompt: "PIN:", ttyname: terminal)
        do throws(TesseraError) {
            switch try await pinentry.getPIN(prompt) {
            case .pin(let pin): return .pin(pin)
            case .cancelled, .confirmed: return .cancelled
            case .timedOut:
                logger.notice("ssh-agent: pinentry for token \(identity.tokenID) timed out")
                return .cancelled
            }
        } catch {
            logger.warning("ssh-agent: pinentry: \(error)")
            return .unavailable
        }
    }

    public func log(_ level: AgentLogLevel, _ message: String) {
        switch level {
        case .info: logger.info("\(message)")
        case .notice: logger.notice("\(message)")
        case .warning: logger.warning("\(message)")
        }
    }
}

/// Who may do what on the agent socket, as the daemon's policy decides: `maySign` (signing, unlocking and
/// locking; `sign`) and `isAdmin` (every key is an administrator's).
public struct SSHAgentAccess: Sendable {
    let maySign: @Sendable (PeerCredentials) -> Bool
    let isAdmin: @Sendable (PeerCredentials) -> Bool

    public init(
        maySign: @escaping @Sendable (PeerCredentials) -> Bool, isAdmin: @escaping @Sendable (PeerCredentials) -> Bool
    ) {
        self.maySign = maySign
        self.isAdmin = isAdmin
    }
}

/// Connects the agent socket to the agent, with the main socket's policy: listing for anyone who can connect,
/// signing, unlocking and locking for holders of `sign`.
public struct SSHAgentFrames: FrameHandler {
    let agent: SSHAgent
    let access: SSHAgentAccess

    public init(agent: SSHAgent, access: SSHAgentAccess) {
        self.agent = agent
        self.access = access
    }

    public func handle(_ frame: [UInt8], connectionID: UInt64, peer: PeerCredentials) async -> [UInt8] {
        await agent.handle(
            frame,
            from: AgentPeer(
                connectionID: connectionID, uid: peer.uid, pid: peer.pid, maySign: access.maySign(peer),
                isAdmin: access.isAdmin(peer)))
    }

    public func closed(connectionID: UInt64) async { agent.closed(connectionID: connectionID) }
}

/// The agent socket as a lifecycle service.
public struct SSHAgentSocketService: Service {
    let server: LengthPrefixedServer
    let address: RPCListenAddress
    let logger: Logger

    public init(server: LengthPrefixedServer, address: RPCListenAddress, logger: Logger) {
        self.server = server
        self.address = address
        self.logger = logger
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.run(on: address) {
                logger.info("ssh-agent ready", metadata: ["address": "\(address)"])
            }
        } onGracefulShutdown: {
            server.shutdown()
        }
    }
}
