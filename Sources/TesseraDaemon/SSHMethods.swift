import CredentialStore
import FoundationEssentials
import KeyStores
import Passkeys
import RPC
import SSHAgent
import SSHAgentDoor
import TesseraCore

extension MethodTable {
    /// `ssh.keygen` and `ssh.list`; records the purposes of the keys the configuration names, at start-up.
    func registerSSH(_ passkeys: PasskeyService, backend: SSHKeyBackend) {
        Task { await backend.recordConfiguredPurposes() }
        let policy = policy
        register("ssh.keygen", .enroll) { p, connection in
            let token = try await passkeys.chooseToken(p.optionalString("tokenId"))
            let comment = try p.optionalString("comment") ?? "tessera@\(ProcessInfo.processInfo.hostName)"
            guard !comment.contains(where: \.isNewline), comment.utf8.count <= 200 else {
                throw TesseraError.invalidInput("comment must be one line of at most 200 bytes")
            }
            let (handle, key) = try await backend.keygen(
                token: token, comment: comment, confirm: p.optionalBool("confirm") == true,
                pin: p.optionalString("pin"),
                allowFinalTry: p.optionalBool("allowFinalPinTry") ?? false, caller: connection.pinCaller)
            return [
                "tokenId": .string(token.id), "keyId": .string(Base64URL.encode(handle)),
                "publicKey": .string(key.authorizedKeysLine(comment: comment)),
            ]
        }
        register("ssh.list", .read) { _, connection in
            let requester = policy.requester(connection)
            let keys = await backend.identities().filter { requester.owns($0.ownerUid) }.map { id -> JSONValue in
                [
                    "tokenId": .string(id.tokenID), "keyId": .string(Base64URL.encode(id.handle)),
                    "comment": .string(id.comment),
                    "confirm": .bool(id.confirm), "publicKey": .string(id.key.authorizedKeysLine(comment: id.comment)),
                    "ownerUid": .number(Double(id.ownerUid)),
                ]
            }
            return ["keys": .array(keys)]
        }
    }
}

extension ConfigFile {
    /// The keys this configuration names for a purpose (`accessControl.issuer`: `badge-issuer`), which the SSH agent
    /// never offers.
    var configuredKeys: [ConfiguredKey] {
        guard let issuer = accessControl?.issuer else { return [] }
        return [ConfiguredKey(tokenId: issuer.tokenId, label: issuer.keyLabel, purpose: .badgeIssuer)]
    }
}
