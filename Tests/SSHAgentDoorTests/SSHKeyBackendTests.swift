import CredentialStore
import FoundationEssentials
import KeyStores
import Logging
import Ownership
import PasskeyTestSupport
import Passkeys
import Presence
import SSHAgent
import SSHAgentDoor
import TesseraCore
import TesseraTestSupport
import Testing

let quietLogger = SpareTokenPasskeys.quietLogger

/// An SSH key backend on the passkey service over a temporary database, with a spare SoftHSM2 token of its own.
struct SSHHarness {
    let backend: SSHKeyBackend
    let token: any KeyStoreToken
    let owners: SSHKeyOwnerStore
    let purposes: KeyPurposeStore

    /// `configuredLabels`: labels the configuration names for `badge-issuer` on this harness's token.
    static func make(presenceCommand: [String]? = nil, configuredLabels: [String] = []) async throws -> SSHHarness {
        let spare = try await SpareTokenPasskeys.make(scratch: "ssh-door", login: false)
        let service = spare.service, token = spare.token, db = spare.database
        let presence = PresenceBroker(
            PresenceSettings(command: presenceCommand, timeout: .seconds(5), confirmOnSocket: false),
            logger: quietLogger)
        let owners = SSHKeyOwnerStore(database: db)
        let purposes = KeyPurposeStore(database: db)
        let backend = SSHKeyBackend(
            passkeys: service, logger: quietLogger, presence: presence, owners: owners, purposes: purposes,
            configuredKeys: configuredLabels.map { ConfiguredKey(tokenId: token.id, label: $0, purpose: .badgeIssuer) })
        return SSHHarness(backend: backend, token: token, owners: owners, purposes: purposes)
    }

    /// This harness's keys (other tests' tokens share the key store).
    func identities() async -> [AgentIdentity] {
        await backend.identities().filter { $0.tokenID == token.id }
    }

    func keygen(comment: String, confirm: Bool = false, uid: UInt32) async throws -> (
        handle: [UInt8], key: SSHPublicKey
    ) {
        try await backend.keygen(
            token: token, comment: comment, confirm: confirm, pin: SoftHSMFixture.defaultPIN, allowFinalTry: false,
            caller: PINCaller(uid: uid, pid: 1))
    }
}

@Suite struct SSHKeyBackendTests {
    @Test func keygenRecordsTheCallersUidAsTheKeysOwner() async throws {
        let h = try await SSHHarness.make()
        let (handle, key) = try await h.keygen(comment: "alice@host", uid: 1000)
        #expect(try await h.owners.owners()[h.token.id]?[Data(handle)] == 1000)
        let listed = await h.identities()
        #expect(listed.count == 1)
        #expect(listed.first?.key == key)
        #expect(listed.first?.comment == "alice@host")
        #expect(listed.first?.ownerUid == 1000)
        #expect(listed.first?.confirm == false)
    }

    @Test func keysAreListedWithTheirOwnersAndOnlyTheOwnerOrAnAdminOwnsThem() async throws {
        let h = try await SSHHarness.make()
        let (alice, _) = try await h.keygen(comment: "alice", uid: 1000)
        let (bob, _) = try await h.keygen(comment: "bob", uid: 1001)
        // A key made on the token without ssh.keygen has no recorded owner: it is the daemon's uid's.
        _ = try await h.token.generateP256Key(handle: [9, 9], label: "plain", pin: nil)
        h.backend.invalidate()
        let byHandle = Dictionary(uniqueKeysWithValues: await h.identities().map { ($0.handle, $0) })
        #expect(byHandle.count == 3)
        #expect(byHandle[alice]?.ownerUid == 1000)
        #expect(byHandle[bob]?.ownerUid == 1001)
        #expect(byHandle[[9, 9]]?.ownerUid == Requester.daemonUID)
        #expect(byHandle[[9, 9]]?.comment == "plain")
        let asAlice = Requester(uid: 1000, pid: 1, isAdmin: false)
        #expect(byHandle.values.filter { asAlice.owns($0.ownerUid) }.map(\.handle) == [alice])
        let admin = Requester(uid: 1002, pid: 1, isAdmin: true)
        #expect(byHandle.values.filter { admin.owns($0.ownerUid) }.count == 3)
    }

    /// Only `ssh` keys and keys of no purpose are offered: not one the configuration names (recorded then, and
    /// still refused when a later configuration no longer names it), not one recorded for another purpose whatever
    /// its label says, not an mdoc device key.
    @Test func keysOfAnotherPurposeAreNeverOffered() async throws {
        let h = try await SSHHarness.make(configuredLabels: ["badge-ca"])
        let (mine, _) = try await h.keygen(comment: "mine", uid: 1000)
        _ = try await h.token.generateP256Key(handle: [1], label: "badge-ca", pin: nil)
        _ = try await h.token.generateP256Key(handle: [2], label: "ssh:looks-like-ssh", pin: nil)
        _ = try await h.token.generateP256Key(handle: [3], label: "tessera:mdoc:1000", pin: nil)
        _ = try await h.token.generateP256Key(handle: [4], label: "plain", pin: nil)
        try await h.purposes.record(KeyPurposeRecord(tokenId: h.token.id, keyHandle: [2], purpose: .mdocDevice))
        // At start-up the configured key's purpose is recorded before any listing.
        await h.backend.recordConfiguredPurposes()
        #expect(try await h.purposes.purposes()[h.token.id]?[Data([1])] == [.badgeIssuer])
        h.backend.invalidate()
        #expect(Set(await h.identities().map(\.handle)) == [mine, [4]])
        #expect(try await h.purposes.purposes()[h.token.id]?[Data(mine)] == [.ssh])
        // The same database without the configured key: its recorded purpose keeps it out.
        let again = SSHKeyBackend(
            passkeys: h.backend.passkeys, logger: quietLogger,
            presence: PresenceBroker(
                PresenceSettings(command: nil, timeout: .seconds(5), confirmOnSocket: false), logger: quietLogger),
            owners: h.owners, purposes: h.purposes)
        #expect(Set(await again.identities().filter { $0.tokenID == h.token.id }.map(\.handle)) == [mine, [4]])
    }

    @Test func aConfirmKeyAsksThePresenceBroker() async throws {
        for (command, answer) in [(["/bin/true"], true), (["/bin/false"], false)] {
            let h = try await SSHHarness.make(presenceCommand: command)
            _ = try await h.keygen(comment: "careful", confirm: true, uid: 1000)
            let identity = try #require(await h.identities().first)
            #expect(identity.confirm)
            let peer = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
            #expect(await h.backend.confirm(identity, peer: peer, forwarded: false) == answer)
        }
        // Without a presence source nobody can confirm: the signature is refused.
        let h = try await SSHHarness.make(presenceCommand: nil)
        _ = try await h.keygen(comment: "careful", confirm: true, uid: 1000)
        let identity = try #require(await h.identities().first)
        #expect(
            await h.backend.confirm(
                identity, peer: AgentPeer(connectionID: 1, uid: 1000, maySign: true), forwarded: false) == false)
    }

    @Test func aKeyNeedingItsPINIsRefusedUntilTheAgentIsUnlocked() async throws {
        let h = try await SSHHarness.make()
        let (_, key) = try await h.keygen(comment: "pin", uid: 1000)
        let identity = try #require(await h.identities().first)
        #expect(identity.needsUnlock)
        await h.token.logout()
        let agent = SSHAgent(backend: h.backend, pinCacheSeconds: 60)
        let peer = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        // SSH_AGENT_FAILURE (5) before `ssh-add -s`; SSH_AGENT_SIGN_RESPONSE (14) after it.
        #expect(await agent.handle(Self.signRequest(key), from: peer) == [5])
        #expect(await agent.handle(Self.unlock(h.token.id, pin: SoftHSMFixture.defaultPIN), from: peer) == [6])
        #expect(await agent.handle(Self.signRequest(key), from: peer).first == 14)
    }

    static func signRequest(_ key: SSHPublicKey) -> [UInt8] {
        var w = SSHWriter()
        w.byte(AgentMessageType.signRequest); w.string(key.blob); w.string([1, 2, 3]); w.uint32(0)
        return w.bytes
    }

    /// SSH_AGENTC_ADD_SMARTCARD_KEY (20), as `ssh-add -s` sends it.
    static func unlock(_ reader: String, pin: String) -> [UInt8] {
        var w = SSHWriter()
        w.byte(20); w.string(Array(reader.utf8)); w.string(Array(pin.utf8))
        return w.bytes
    }
}
