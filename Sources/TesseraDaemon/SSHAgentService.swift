import Foundation
import Logging
import Passkeys
import RPC
import SSHAgent
import ServiceLifecycle
import TesseraCore

/// The SSH agent's view of the daemon's key stores (the same tokens as passkeys, never a passkey's key).
///
/// Which keys: every P-256 public key object on a token, except passkey keys (`CKA_LABEL` `tessera:…`).
/// Keys made by `ssh.keygen` carry `CKA_LABEL` `ssh:COMMENT` (`ssh-confirm:COMMENT` when every signature needs the
/// presence command's approval); other keys are offered with their label as comment.
struct SSHKeyBackend: SSHAgentBackend {
    static let sshLabelPrefix = "ssh:"
    static let confirmLabelPrefix = "ssh-confirm:"
    static let passkeyLabelPrefix = "tessera:"

    let passkeys: PasskeyService
    let logger: Logger
    var presenceCommand: [String]?
    var presenceTimeout: Duration = .seconds(30)

    func identities() async -> [AgentIdentity] {
        var out: [AgentIdentity] = []
        for token in await passkeys.tokens() {
            let keys: [TokenKey]
            do { keys = try await token.publicKeys() } catch {
                logger.debug("ssh-agent: cannot list keys of token \(token.id): \(error)")
                continue
            }
            for key in keys where !key.label.hasPrefix(Self.passkeyLabelPrefix) {
                var comment = key.label, confirm = false
                if key.label.hasPrefix(Self.sshLabelPrefix) {
                    comment = String(key.label.dropFirst(Self.sshLabelPrefix.count))
                } else if key.label.hasPrefix(Self.confirmLabelPrefix) {
                    comment = String(key.label.dropFirst(Self.confirmLabelPrefix.count))
                    confirm = true
                }
                out.append(AgentIdentity(key: .ecdsaP256(point: key.publicPoint), comment: comment,
                                         tokenID: token.id, handle: key.handle, confirm: confirm))
            }
        }
        return out
    }

    func needsUnlock(tokenID: String) async -> Bool {
        guard let token = await passkeys.tokens().first(where: { $0.id == tokenID }) else { return false }
        return await token.needsPIN()
    }

    func sign(_ identity: AgentIdentity, data: [UInt8], flags: UInt32) async throws(TesseraError) -> [UInt8] {
        let token = try await passkeys.chooseToken(identity.tokenID)
        guard case .ecdsaP256 = identity.key else {
            throw TesseraError(.unsupportedProtocol, "only ecdsa-sha2-nistp256 keys sign")
        }
        let raw = try await token.signP256(handle: identity.handle, message: data, pin: nil)
        return try SSHSignature.ecdsaP256(raw: raw)
    }

    func unlock(readerID: String, pin: String, peer: AgentPeer) async throws(TesseraError) -> String {
        guard let token = await token(readerID: readerID) else {
            throw TesseraError(.tokenNotPresent, "no token with id or label '\(readerID)'")
        }
        // `ssh-add -s` cannot say "allow the final try": the agent never spends a token's last PIN try.
        try await passkeys.pinRules.withCallerPIN(pin, caller: PINCaller(uid: peer.uid, pid: peer.pid),
                                                  allowFinalTry: false, tokenId: token.id) { attempt throws(TesseraError) in
            try await token.login(pin: attempt)
        }
        return token.id
    }

    func tokenID(readerID: String) async -> String? { await token(readerID: readerID)?.id }

    func forget(tokenID: String) async {
        guard let token = await passkeys.tokens().first(where: { $0.id == tokenID }) else { return }
        await token.logout()
    }

    func confirm(_ identity: AgentIdentity, request: JSONValue) async -> Bool {
        guard let presenceCommand, !presenceCommand.isEmpty else {
            logger.notice("ssh-agent: key \(identity.comment) needs confirmation and no sshAgent.presenceCommand is configured")
            return false
        }
        do {
            switch try await ProgramRunner.run(presenceCommand, input: request.serialized(), timeout: presenceTimeout) {
            case .exited(0): return true
            case .exited(let status):
                logger.notice("ssh-agent: presence command refused (exit status \(status))")
            case .timedOut:
                logger.notice("ssh-agent: presence command timed out after \(presenceTimeout)")
            }
        } catch {
            logger.error("ssh-agent: presence command: \(error)")
        }
        return false
    }

    func log(_ level: AgentLogLevel, _ message: String) {
        switch level {
        case .info: logger.info("\(message)")
        case .notice: logger.notice("\(message)")
        case .warning: logger.warning("\(message)")
        }
    }

    private func token(readerID: String) async -> (any KeyStoreToken)? {
        let all = await passkeys.tokens()
        if let t = all.first(where: { $0.id == readerID }) { return t }
        for t in all {
            if await t.describe()["label"]?.stringValue == readerID { return t }
        }
        return nil
    }
}

/// Connects the agent socket to the agent, with the main socket's policy: listing for anyone who can connect,
/// signing, unlocking and locking for holders of `sign`.
struct SSHAgentFrames: FrameHandler {
    let agent: SSHAgent
    let policy: Policy

    func handle(_ frame: [UInt8], connectionID: UInt64, peer: PeerCredentials) async -> [UInt8] {
        let maySign = (try? policy.check(.sign, peer: peer)) != nil
        return await agent.handle(frame, from: AgentPeer(connectionID: connectionID, uid: peer.uid, pid: peer.pid, maySign: maySign))
    }

    func closed(connectionID: UInt64) async { await agent.closed(connectionID: connectionID) }
}

extension MethodTable {
    /// `ssh.keygen` and `ssh.list`.
    func registerSSH(_ passkeys: PasskeyService, backend: SSHKeyBackend) {
        register("ssh.keygen", .enroll) { p, connection in
            let token = try await passkeys.chooseToken(p.optionalString("tokenId"))
            let comment = try p.optionalString("comment") ?? "tessera@\(ProcessInfo.processInfo.hostName)"
            guard !comment.contains(where: \.isNewline), comment.utf8.count <= 200 else {
                throw TesseraError.invalidInput("comment must be one line of at most 200 bytes")
            }
            let handle = SecureRandom.bytes(16)
            let prefix = try p.optionalBool("confirm") == true ? SSHKeyBackend.confirmLabelPrefix : SSHKeyBackend.sshLabelPrefix
            let label = prefix + comment
            let point: [UInt8]
            if let pin = try p.optionalString("pin") {
                point = try await passkeys.pinRules.withCallerPIN(
                    pin, caller: connection.pinCaller, allowFinalTry: p.optionalBool("allowFinalPinTry") ?? false,
                    tokenId: token.id) { attempt throws(TesseraError) in
                    try await token.generateP256Key(handle: handle, label: label, pin: attempt)
                }
            } else {
                point = try await token.generateP256Key(handle: handle, label: label, pin: nil)
            }
            let key = SSHPublicKey.ecdsaP256(point: point)
            return ["tokenId": .string(token.id), "keyId": .string(Base64URL.encode(handle)),
                    "publicKey": .string(key.authorizedKeysLine(comment: comment))]
        }
        register("ssh.list", .read) { _, _ in
            let keys = await backend.identities().map { id -> JSONValue in
                ["tokenId": .string(id.tokenID), "keyId": .string(Base64URL.encode(id.handle)), "comment": .string(id.comment),
                 "confirm": .bool(id.confirm), "publicKey": .string(id.key.authorizedKeysLine(comment: id.comment))]
            }
            return ["keys": .array(keys)]
        }
    }
}

/// The agent socket as a lifecycle service.
struct SSHAgentSocketService: Service {
    let server: LengthPrefixedServer
    let address: RPCListenAddress
    let logger: Logger

    func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.run(on: address) {
                logger.info("ssh-agent ready", metadata: ["address": "\(address)"])
            }
        } onGracefulShutdown: {
            server.shutdown()
        }
    }
}
