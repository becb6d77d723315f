import Crypto
import Foundation
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

    public init(
        key: SSHPublicKey, comment: String, tokenID: String, handle: [UInt8], confirm: Bool = false,
        needsUnlock: Bool = false
    ) {
        self.key = key; self.comment = comment; self.tokenID = tokenID; self.handle = handle; self.confirm = confirm
        self.needsUnlock = needsUnlock
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
    /// Asks the presence command to approve a signature; false on refusal, timeout or no command.
    func confirm(_ identity: AgentIdentity, request: JSONValue) async -> Bool
    /// A line for the daemon log.
    func log(_ level: AgentLogLevel, _ message: String)
}

public enum AgentLogLevel: Sendable { case info, notice, warning }

/// What one connected client may do (decided from its peer credentials when it connects).
public struct AgentPeer: Sendable {
    public var connectionID: UInt64
    public var uid: UInt32
    public var pid: Int32
    /// Policy `sign`: signing, unlocking tokens, locking.
    public var maySign: Bool

    public init(connectionID: UInt64, uid: UInt32, pid: Int32 = 0, maySign: Bool) {
        self.connectionID = connectionID; self.uid = uid; self.pid = pid; self.maySign = maySign
    }
}

/// The SSH agent's state and message handling, independent of the socket.
///
/// Locking (`ssh-add -x`) is per client uid and keeps only a salted SHA-256 of the passphrase; a locked agent lists
/// no keys and signs nothing for that uid. Token unlocks (`ssh-add -s`) are the tokens' own login state, shared by
/// every client, and end on `ssh-add -e`, on any lock, and `pinCacheSeconds` after the unlock. A key that
/// `needsUnlock` signs only while the agent holds such an unlock of its token: a login the token has for another
/// reason (a PIN given to a JSON-RPC method) does not count.
///
/// The state sits behind a lock (never held across a suspension), so a request runs on its connection's executor
/// without hopping to an actor.
public final class SSHAgent: Sendable {
    private let backend: any SSHAgentBackend
    private let pinCache: Duration
    private let state = Locked(State())

    private struct State {
        var locks: [UInt32: (salt: [UInt8], digest: [UInt8])] = [:]
        var unlocked: [String: (until: ContinuousClock.Instant, confirm: Bool)] = [:]
        var sessionBinds: [UInt64: [SessionBind]] = [:]
        var nextExpiry: ContinuousClock.Instant?
    }

    /// Extensions this agent understands (answered to `query`).
    public static let extensions = ["query", "session-bind@openssh.com"]

    public init(backend: any SSHAgentBackend, pinCacheSeconds: Int) {
        self.backend = backend
        self.pinCache = .seconds(max(1, pinCacheSeconds))
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

    /// Tokens the agent unlocked, with seconds until the unlock expires.
    public func unlockedTokens() -> [String: Int] {
        let now = ContinuousClock.now
        return state.withLock { $0.unlocked.mapValues { Int(($0.until - now).components.seconds) } }
    }

    /// Session binds recorded for a connection (`session-bind@openssh.com`).
    public func binds(connectionID: UInt64) -> [SessionBind] { state.withLock { $0.sessionBinds[connectionID] ?? [] } }

    /// Forgets a closed connection's state.
    public func closed(connectionID: UInt64) {
        _ = state.withLock { $0.sessionBinds.removeValue(forKey: connectionID) }
    }

    /// Drops unlocks older than `pinCacheSeconds` (logging the tokens out).
    public func expire() async {
        let now = ContinuousClock.now
        let stale: [String] = state.withLock { s in
            guard let due = s.nextExpiry, due <= now else { return [] }
            let ids = s.unlocked.filter { $0.value.until <= now }.map(\.key)
            for id in ids { s.unlocked[id] = nil }
            s.nextExpiry = s.unlocked.values.map(\.until).min()
            return ids
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
            return .identities(await offered().map { (blob: $0.key.blob, comment: $0.comment) })

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
            guard !locked, peer.maySign else { return .failure }
            do {
                let id = try await backend.unlock(readerID: readerID, pin: pin, peer: peer)
                let lifetime = constraints.lifetime.map { min(Duration.seconds(Int($0)), pinCache) } ?? pinCache
                let until = ContinuousClock.now + lifetime
                state.withLock { s in
                    s.unlocked[id] = (until, constraints.confirm)
                    s.nextExpiry = min(s.nextExpiry ?? until, until)
                }
                backend.log(.info, "ssh-agent: token \(id) unlocked by uid \(peer.uid)")
                return .success
            } catch {
                backend.log(.warning, "ssh-agent: ssh-add -s \(readerID) refused: \(error)")
                return .failure
            }

        case .removeSmartcardKey(let readerID):
            guard peer.maySign, let id = await backend.tokenID(readerID: readerID),
                state.withLock({ $0.unlocked.removeValue(forKey: id) }) != nil
            else { return .failure }
            await backend.forget(tokenID: id)
            backend.log(.info, "ssh-agent: token \(id) locked again (ssh-add -e)")
            return .success

        case .lock(let passphrase):
            guard !locked, peer.maySign else { return .failure }
            let salt = SecureRandom.bytes(16)
            state.withLock { $0.locks[peer.uid] = (salt, Self.digest(salt, passphrase)) }
            await forgetAll()
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
                guard let bind = try? SessionBind(contents) else { return .failure }
                state.withLock { $0.sessionBinds[peer.connectionID, default: []].append(bind) }
                var keyReader = SSHReader(bind.hostKey)
                let hostKey = (try? keyReader.text()) ?? "unknown"
                backend.log(
                    .info,
                    "ssh-agent conn \(peer.connectionID): session bound to a \(hostKey) host key"
                        + (bind.forwarding ? " (forwarding)" : ""))
                return .success
            default:
                return .extensionFailure
            }

        case .unknown(let type):
            backend.log(.info, "ssh-agent conn \(peer.connectionID): unknown message \(type)")
            return .failure
        }
    }

    private func offered() async -> [AgentIdentity] {
        await backend.identities()
    }

    private func sign(blob: [UInt8], data: [UInt8], flags: UInt32, peer: AgentPeer) async -> AgentResponse {
        guard var identity = await backend.identity(blob: blob) else {
            backend.log(.info, "ssh-agent: sign request for a key this agent does not hold")
            return .failure
        }
        let unlock = state.withLock { $0.unlocked[identity.tokenID] }
        if identity.needsUnlock && unlock == nil {
            logNeedsPIN(identity.tokenID)
            return .failure
        }
        if unlock?.confirm == true { identity.confirm = true }
        if identity.confirm {
            let request: JSONValue = [
                "type": "ssh-sign", "key": .string(identity.key.authorizedKeysLine(comment: identity.comment)),
                "tokenId": .string(identity.tokenID), "uid": .number(Double(peer.uid)),
                "connection": .number(Double(peer.connectionID)),
                "sessionBound": .bool(!binds(connectionID: peer.connectionID).isEmpty),
            ]
            guard await backend.confirm(identity, request: request) else {
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

    private func logNeedsPIN(_ tokenID: String) {
        backend.log(.notice, "ssh-agent: token \(tokenID) needs a PIN: run `ssh-add -s \(tokenID)`")
    }

    private func forgetAll() async {
        let ids: [String] = state.withLock { s in
            defer { s.unlocked = [:]; s.nextExpiry = nil }
            return Array(s.unlocked.keys)
        }
        for id in ids { await backend.forget(tokenID: id) }
    }

    private static func digest(_ salt: [UInt8], _ passphrase: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: salt + passphrase))
    }
}
