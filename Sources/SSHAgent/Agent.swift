import CryptoPrimitives
import FoundationEssentials
import Ownership
import TesseraCore

/// A key the agent offers: where it lives and how SSH sees it.
public struct AgentIdentity: Sendable, Equatable {
    public var key: SSHPublicKey
    public var comment: String
    /// The token holding the private key (`tokens.list` id).
    public var tokenID: String
    /// The key's handle on that token (PKCS#11 `CKA_ID`).
    public var handle: [UInt8]
    /// Every signature needs the presence command's approval.
    public var confirm: Bool
    /// Signing needs the agent's own unlock of the token (`ssh-add -s`): the key needs the token's PIN and the
    /// daemon holds none for it (no PIN file).
    public var needsUnlock: Bool
    /// The uid the key belongs to (docs/API.md, "Owners"): only it and administrators see and use it.
    public var ownerUid: UInt32

    public init(
        key: SSHPublicKey, comment: String, tokenID: String, handle: [UInt8], confirm: Bool = false,
        needsUnlock: Bool = false, ownerUid: UInt32
    ) {
        self.key = key; self.comment = comment; self.tokenID = tokenID; self.handle = handle; self.confirm = confirm
        self.needsUnlock = needsUnlock; self.ownerUid = ownerUid
    }
}

/// What the agent needs from the daemon's key stores.
public protocol SSHAgentBackend: Sendable {
    /// The SSH keys of every present token (listed afresh).
    func identities() async -> [AgentIdentity]
    /// The offered key with this blob, for a SIGN_REQUEST (may come from a cache the backend keeps current).
    func identity(blob: [UInt8]) async -> AgentIdentity?
    /// Signs `data` for SSH; returns the signature blob. `flags` are SIGN_REQUEST's (RSA hash choice).
    func sign(_ identity: AgentIdentity, data: [UInt8], flags: UInt32) async throws(TesseraError) -> [UInt8]
    /// Resolves `ssh-add -s` reader id (token id or label) and logs that token in with `pin` as `peer`'s PIN
    /// (the daemon's PIN rules: per-uid back-off, final-try guard), exactly one try. Returns the token id.
    func unlock(readerID: String, pin: String, peer: AgentPeer) async throws(TesseraError) -> String
    /// Resolves a reader id to a token id without touching the token.
    func tokenID(readerID: String) async -> String?
    /// Ends the login the agent made on this token.
    func forget(tokenID: String) async
    /// Asks the presence broker to approve a signature by `peer` (`forwarded`: the connection is an
    /// `ssh -A` forwarding); false on refusal, timeout or no presence source.
    func confirm(_ identity: AgentIdentity, peer: AgentPeer, forwarded: Bool) async -> Bool
    /// A line for the daemon log.
    func log(_ level: AgentLogLevel, _ message: String)
    /// Asks the user of `peer` for the PIN of `identity`'s token (pinentry), for a key that needs an unlock `peer`'s
    /// uid does not hold. Asked once per signature, never again behind the user's back.
    func askPIN(_ identity: AgentIdentity, peer: AgentPeer) async -> AgentPINAnswer
}

extension SSHAgentBackend {
    public func askPIN(_ identity: AgentIdentity, peer: AgentPeer) async -> AgentPINAnswer { .unavailable }
}

/// The answer of a PIN dialog for the agent. A PIN is never printed (`description` redacts it).
public enum AgentPINAnswer: Sendable, Equatable, CustomStringConvertible {
    case pin(String)
    /// The user cancelled (or did not answer in time).
    case cancelled
    /// No dialog could be shown (none configured, none found, no PIN may be tried now); the reason is logged.
    case unavailable

    public var description: String {
        switch self {
        case .pin: "pin(redacted)"
        case .cancelled: "cancelled"
        case .unavailable: "unavailable"
        }
    }
}

public enum AgentLogLevel: Sendable { case info, notice, warning }

/// What one connected client may do (decided from its peer credentials when it connects).
public struct AgentPeer: Sendable {
    public var connectionID: UInt64
    public var uid: UInt32
    public var pid: Int32
    /// Policy `sign`: signing, unlocking tokens, locking.
    public var maySign: Bool
    /// Policy `admin`: sees and may use every uid's keys.
    public var isAdmin: Bool

    public init(connectionID: UInt64, uid: UInt32, pid: Int32 = 0, maySign: Bool, isAdmin: Bool = false) {
        self.connectionID = connectionID; self.uid = uid; self.pid = pid; self.maySign = maySign
        self.isAdmin = isAdmin
    }

    /// The client as the owner rule sees it.
    public var requester: Requester { Requester(uid: uid, pid: pid, isAdmin: isAdmin) }
}

/// The SSH agent's state and message handling, independent of the socket.
///
/// Locking (`ssh-add -x`) is per client uid and keeps only a salted SHA-256 of the passphrase; a locked agent lists
/// no keys and signs nothing for that uid. Token unlocks (`ssh-add -s`) belong to the uid that made them: a key that
/// `needsUnlock` signs only for a uid holding an unlock of its token (a login the token has for another reason, such
/// as another uid's unlock or a PIN given to a JSON-RPC method, does not count). An unlock ends on that uid's
/// `ssh-add -e`, on that uid's lock, and `pinCacheSeconds` after it was made; the token is logged out when no uid
/// holds an unlock of it any more.
///
/// `session-bind@openssh.com` is accepted only with a valid host key signature over the session identifier, at most
/// `maxSessionBinds` per connection (OpenSSH's own limit); a connection with a bind marked forwarding is forwarded
/// (`ssh -A`), and with `allowForwarded: false` it signs nothing.
///
/// The state sits behind a lock (never held across a suspension), so a request runs on its connection's executor
/// without hopping to an actor.
public final class SSHAgent: Sendable {
    private let backend: any SSHAgentBackend
    private let pinCache: Duration
    private let allowForwarded: Bool
    private let state = Locked(State())

    /// An unlock by one uid of one token.
    private struct Unlock: Hashable {
        var uid: UInt32
        var tokenID: String
    }

    private struct State {
        var locks: [UInt32: (salt: [UInt8], digest: [UInt8])] = [:]
        var unlocked: [Unlock: (until: ContinuousClock.Instant, confirm: Bool)] = [:]
        var sessionBinds: [UInt64: [SessionBind]] = [:]
        /// Connections whose binds are full (their refusal was logged).
        var fullConnections: Set<UInt64> = []
        var nextExpiry: ContinuousClock.Instant?

        func holds(_ tokenID: String) -> Bool { unlocked.keys.contains { $0.tokenID == tokenID } }
    }

    /// Extensions this agent understands (answered to `query`).
    public static let extensions = ["query", "session-bind@openssh.com"]
    /// Session binds one connection may record (OpenSSH's agent keeps 16 and refuses more).
    public static let maxSessionBinds = 16
    /// Longest session identifier a bind may carry (OpenSSH: 128 bytes).
    public static let maxSessionIDLength = 128

    /// `allowForwarded: false` refuses every signature on a forwarded connection (`sshAgent.allowForwarded`).
    public init(backend: any SSHAgentBackend, pinCacheSeconds: Int, allowForwarded: Bool = true) {
        self.backend = backend
        self.pinCache = .seconds(max(1, pinCacheSeconds))
        self.allowForwarded = allowForwarded
    }

    /// Handles one frame body and returns the reply body. Malformed messages get FAILURE.
    public func handle(_ frame: [UInt8], from peer: AgentPeer) async -> [UInt8] {
        await expire()
        let request: AgentRequest
        do { request = try AgentRequest.parse(frame) } catch {
            backend.log(.info, "ssh-agent conn \(peer.connectionID): malformed message (\(error.message))")
            return AgentResponse.failure.bytes
        }
        return await respond(request, from: peer).bytes
    }

    /// Tokens `uid` unlocked, with seconds until the unlock expires.
    public func unlockedTokens(uid: UInt32) -> [String: Int] {
        let now = ContinuousClock.now
        return state.withLock { s in
            var out: [String: Int] = [:]
            for (unlock, value) in s.unlocked where unlock.uid == uid {
                out[unlock.tokenID] = Int((value.until - now).components.seconds)
            }
            return out
        }
    }

    /// Session binds recorded for a connection (`session-bind@openssh.com`).
    public func binds(connectionID: UInt64) -> [SessionBind] { state.withLock { $0.sessionBinds[connectionID] ?? [] } }

    /// Whether a connection is an agent forwarding (one of its session binds says so).
    public func isForwarded(connectionID: UInt64) -> Bool {
        state.withLock { $0.sessionBinds[connectionID]?.contains(where: \.forwarding) ?? false }
    }

    /// Forgets a closed connection's state.
    public func closed(connectionID: UInt64) {
        state.withLock { s in
            s.sessionBinds[connectionID] = nil
            s.fullConnections.remove(connectionID)
        }
    }

    /// Drops unlocks older than `pinCacheSeconds` (logging the tokens out).
    public func expire() async {
        let now = ContinuousClock.now
        let stale: [String] = state.withLock { s in
            guard let due = s.nextExpiry, due <= now else { return [] }
            let expired = s.unlocked.filter { $0.value.until <= now }.map(\.key)
            for unlock in expired { s.unlocked[unlock] = nil }
            s.nextExpiry = s.unlocked.values.map(\.until).min()
            return Set(expired.map(\.tokenID)).filter { !s.holds($0) }.sorted()
        }
        for id in stale {
            await backend.forget(tokenID: id)
            backend.log(.info, "ssh-agent: unlock of token \(id) expired")
        }
    }

    private func respond(_ request: AgentRequest, from peer: AgentPeer) async -> AgentResponse {
        let locked = state.withLock { $0.locks[peer.uid] != nil }
        switch request {
        case .requestIdentities:
            if locked { return .identities([]) }
            return .identities(
                await offered().filter { peer.requester.owns($0.ownerUid) }.map {
                    (blob: $0.key.blob, comment: $0.comment)
                })

        case .sign(let blob, let data, let flags):
            guard !locked, peer.maySign else {
                if !peer.maySign { backend.log(.notice, "ssh-agent: uid \(peer.uid) may not sign by the policy") }
                return .failure
            }
            return await sign(blob: blob, data: data, flags: flags, peer: peer)

        case .addIdentity:
            backend.log(.info, "ssh-agent: refused ADD_IDENTITY (keys live on tokens only; use ssh-add -s TOKEN)")
            return .failure

        case .removeIdentity, .removeAllIdentities:
            return .failure

        case .addSmartcardKey(let readerID, let pin, let constraints):
            // The protocol has only FAILURE: the reason goes to the daemon's log, where docs/API.md sends users.
            if locked {
                backend.log(.notice, "ssh-agent: ssh-add -s \(readerID) refused: the agent is locked (ssh-add -X)")
                return .failure
            }
            if !peer.maySign {
                backend.log(
                    .notice, "ssh-agent: ssh-add -s \(readerID) refused: the policy does not let uid \(peer.uid) sign")
                return .failure
            }
            do {
                let id = try await backend.unlock(readerID: readerID, pin: pin, peer: peer)
                let lifetime = constraints.lifetime.map { min(Duration.seconds(Int($0)), pinCache) } ?? pinCache
                let until = ContinuousClock.now + lifetime
                state.withLock { s in
                    s.unlocked[Unlock(uid: peer.uid, tokenID: id)] = (until, constraints.confirm)
                    s.nextExpiry = min(s.nextExpiry ?? until, until)
                }
                backend.log(.info, "ssh-agent: token \(id) unlocked by uid \(peer.uid)")
                return .success
            } catch {
                backend.log(.warning, "ssh-agent: ssh-add -s \(readerID) refused: \(error)")
                return .failure
            }

        case .removeSmartcardKey(let readerID):
            guard peer.maySign else {
                backend.log(
                    .notice, "ssh-agent: ssh-add -e \(readerID) refused: the policy does not let uid \(peer.uid) sign")
                return .failure
            }
            guard let id = await backend.tokenID(readerID: readerID) else {
                backend.log(.notice, "ssh-agent: ssh-add -e \(readerID) refused: no token is named \(readerID)")
                return .failure
            }
            let (removed, stillHeld) = state.withLock { s in
                (s.unlocked.removeValue(forKey: Unlock(uid: peer.uid, tokenID: id)) != nil, s.holds(id))
            }
            guard removed else {
                backend.log(
                    .notice,
                    "ssh-agent: ssh-add -e \(readerID) refused: uid \(peer.uid) has not unlocked token \(id) (ssh-add -s unlocks; a token with a PIN file is always unlocked)"
                )
                return .failure
            }
            if !stillHeld { await backend.forget(tokenID: id) }
            backend.log(.info, "ssh-agent: token \(id) locked again for uid \(peer.uid) (ssh-add -e)")
            return .success

        case .lock(let passphrase):
            guard !locked, peer.maySign else { return .failure }
            let salt = SecureRandom.bytes(16)
            state.withLock { $0.locks[peer.uid] = (salt, Self.digest(salt, passphrase)) }
            await forgetAll(uid: peer.uid)
            backend.log(.info, "ssh-agent: locked for uid \(peer.uid)")
            return .success

        case .unlock(let passphrase):
            let opened = state.withLock { s -> Bool in
                guard let lock = s.locks[peer.uid], ConstantTime.equal(lock.digest, Self.digest(lock.salt, passphrase))
                else {
                    return false
                }
                s.locks[peer.uid] = nil
                return true
            }
            guard opened else { return .failure }
            backend.log(.info, "ssh-agent: unlocked for uid \(peer.uid)")
            return .success

        case .extension(let name, let contents):
            switch name {
            case "query":
                var w = SSHWriter()
                for e in Self.extensions { w.string(e) }
                return .extensionReply(w.bytes)
            case "session-bind@openssh.com":
                return bindSession(contents, peer: peer)
            default:
                return .extensionFailure
            }

        case .unknown(let type):
            backend.log(.info, "ssh-agent conn \(peer.connectionID): unknown message \(type)")
            return .failure
        }
    }

    /// Records a session bind after checking it as OpenSSH's agent does: at most `maxSessionBinds` per connection, no
    /// bind after one made for authentication (not forwarding), the host key's signature over the session
    /// identifier, and the same identifier again only with the same host key and forwarding flag. The cheap checks
    /// come first, so a flood past the limit costs no signature verification; the first refusal for a full
    /// connection is logged, not each one.
    private func bindSession(_ contents: [UInt8], peer: AgentPeer) -> AgentResponse {
        let prefix = "ssh-agent conn \(peer.connectionID): session-bind"
        guard let bind = try? SessionBind(contents), bind.sessionID.count <= Self.maxSessionIDLength else {
            backend.log(.info, "\(prefix) refused: malformed")
            return .failure
        }
        let connectionID = peer.connectionID
        let refused: BindRefusal? = state.withLock { s in
            let binds = s.sessionBinds[connectionID] ?? []
            if binds.contains(where: { !$0.forwarding }) { return .afterAuthentication }
            guard binds.count < Self.maxSessionBinds else {
                return .full(first: s.fullConnections.insert(connectionID).inserted)
            }
            return nil
        }
        if let refused { return refuse(refused, prefix) }
        guard HostKeySignature.isValid(bind.signature, hostKey: bind.hostKey, over: bind.sessionID) else {
            backend.log(.notice, "\(prefix) refused: the host key's signature over the session id does not verify")
            return .failure
        }
        let outcome: BindRefusal? = state.withLock { s in
            let binds = s.sessionBinds[connectionID] ?? []
            if binds.contains(where: { !$0.forwarding }) { return .afterAuthentication }
            if let old = binds.first(where: { $0.sessionID == bind.sessionID }) {
                return old.hostKey == bind.hostKey && old.forwarding == bind.forwarding ? .again : .conflicting
            }
            guard binds.count < Self.maxSessionBinds else {
                return .full(first: s.fullConnections.insert(connectionID).inserted)
            }
            s.sessionBinds[connectionID, default: []].append(bind)
            return nil
        }
        if let outcome { return refuse(outcome, prefix) }
        var keyReader = SSHReader(bind.hostKey)
        let hostKey = (try? keyReader.text()) ?? "unknown"
        backend.log(
            .info,
            "ssh-agent conn \(connectionID): session bound to a \(hostKey) host key"
                + (bind.forwarding ? " (forwarding)" : ""))
        return .success
    }

    private enum BindRefusal {
        case again, full(first: Bool), afterAuthentication, conflicting
    }

    private func refuse(_ refusal: BindRefusal, _ prefix: String) -> AgentResponse {
        switch refusal {
        case .again: return .success
        case .full(let first):
            if first {
                backend.log(
                    .notice, "\(prefix) refused: \(Self.maxSessionBinds) binds already recorded (logged once)")
            }
        case .afterAuthentication:
            backend.log(.notice, "\(prefix) refused: the connection is already bound for authentication")
        case .conflicting:
            backend.log(.notice, "\(prefix) refused: session id recorded with another host key or forwarding flag")
        }
        return .failure
    }

    private func offered() async -> [AgentIdentity] {
        await backend.identities()
    }

    private func sign(blob: [UInt8], data: [UInt8], flags: UInt32, peer: AgentPeer) async -> AgentResponse {
        // Another uid's key answers as a key this agent does not hold (docs/API.md, "Owners").
        guard var identity = await backend.identity(blob: blob), peer.requester.owns(identity.ownerUid) else {
            backend.log(.info, "ssh-agent: sign request for a key this agent does not hold")
            return .failure
        }
        let forwarded = isForwarded(connectionID: peer.connectionID)
        if forwarded && !allowForwarded {
            backend.log(
                .notice,
                "ssh-agent conn \(peer.connectionID): signing refused on a forwarded connection (sshAgent.allowForwarded)"
            )
            return .failure
        }
        let unlock = state.withLock { $0.unlocked[Unlock(uid: peer.uid, tokenID: identity.tokenID)] }
        if identity.needsUnlock && unlock == nil {
            guard await unlockByDialog(identity, peer: peer) else { return .failure }
        }
        if unlock?.confirm == true { identity.confirm = true }
        if identity.confirm {
            guard await backend.confirm(identity, peer: peer, forwarded: forwarded) else {
                backend.log(.notice, "ssh-agent: signature with \(identity.comment) not confirmed")
                return .failure
            }
        }
        do throws(TesseraError) {
            return .signature(try await backend.sign(identity, data: data, flags: flags))
        } catch  where error.code == .pinRequired {
            logNeedsPIN(identity.tokenID)
            return .failure
        } catch {
            backend.log(.warning, "ssh-agent: sign with token \(identity.tokenID) failed: \(error)")
            return .failure
        }
    }

    /// Asks for the token's PIN (pinentry) and unlocks the token for `peer`'s uid as `ssh-add -s` would, for
    /// `pinCacheSeconds`. One question, one PIN try: a cancel or a wrong PIN fails this signature, nothing is retried.
    private func unlockByDialog(_ identity: AgentIdentity, peer: AgentPeer) async -> Bool {
        let pin: String
        switch await backend.askPIN(identity, peer: peer) {
        case .unavailable:
            logNeedsPIN(identity.tokenID)
            return false
        case .cancelled:
            backend.log(
                .notice, "ssh-agent: PIN entry for token \(identity.tokenID) cancelled (uid \(peer.uid)): not signed")
            return false
        case .pin(let typed): pin = typed
        }
        do throws(TesseraError) {
            let id = try await backend.unlock(readerID: identity.tokenID, pin: pin, peer: peer)
            let until = ContinuousClock.now + pinCache
            state.withLock { s in
                s.unlocked[Unlock(uid: peer.uid, tokenID: id)] = (until, false)
                s.nextExpiry = min(s.nextExpiry ?? until, until)
            }
            backend.log(.info, "ssh-agent: token \(id) unlocked by uid \(peer.uid) through pinentry")
            return true
        } catch {
            backend.log(.warning, "ssh-agent: PIN for token \(identity.tokenID) from pinentry refused: \(error)")
            return false
        }
    }

    private func logNeedsPIN(_ tokenID: String) {
        backend.log(.notice, "ssh-agent: token \(tokenID) needs a PIN: run `ssh-add -s \(tokenID)`")
    }

    /// Ends every unlock of `uid`; logs out the tokens no other uid holds.
    private func forgetAll(uid: UInt32) async {
        let ids: [String] = state.withLock { s in
            let mine = s.unlocked.keys.filter { $0.uid == uid }
            for unlock in mine { s.unlocked[unlock] = nil }
            s.nextExpiry = s.unlocked.values.map(\.until).min()
            return Set(mine.map(\.tokenID)).filter { !s.holds($0) }.sorted()
        }
        for id in ids { await backend.forget(tokenID: id) }
    }

    private static func digest(_ salt: [UInt8], _ passphrase: [UInt8]) -> [UInt8] {
        MessageDigest.sha256(salt + passphrase)
    }
}
