import Crypto
import FoundationEssentials
import SSHAgent
import TesseraCore
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Key and signature blobs checked against OpenSSH's own output (ssh-keygen), not hand-made vectors.
@Suite struct SSHWireFormatTests {
    /// A fresh key pair made by ssh-keygen; returns the private key path and the .pub line.
    static func keygen(_ type: String, bits: Int? = nil) async throws -> (path: String, pub: String) {
        let path = Scratch.directory("sshkey") + "/id"
        var args = ["-q", "-t", type, "-N", "", "-C", "test comment", "-f", path]
        if let bits { args += ["-b", String(bits)] }
        let r = try await Subprocess.run("ssh-keygen", args)
        #expect(r.status == 0, "\(r.output)")
        let pub = try String(contentsOfFile: path + ".pub", encoding: .utf8).trimmingWhitespace()
        return (path, pub)
    }

    @Test func ecdsaP256KeyBlobMatchesSSHKeygen() async throws {
        let (_, pub) = try await Self.keygen("ecdsa", bits: 256)
        let key = try SSHPublicKey(authorizedKeysLine: pub)
        guard case .ecdsaP256(let point) = key else { Issue.record("not P-256: \(key)"); return }
        #expect(point.count == 65)
        // Re-encoding from the point alone reproduces ssh-keygen's line byte for byte.
        #expect(SSHPublicKey.ecdsaP256(point: point).authorizedKeysLine(comment: "test comment") == pub)
    }

    @Test func rsaKeyBlobMatchesSSHKeygen() async throws {
        let (_, pub) = try await Self.keygen("rsa", bits: 2048)
        let key = try SSHPublicKey(authorizedKeysLine: pub)
        guard case .rsa(let e, let n) = key else { Issue.record("not RSA"); return }
        #expect(e == [0x01, 0x00, 0x01])
        #expect(n.count == 256)
        #expect(SSHPublicKey.rsa(exponent: e, modulus: n).authorizedKeysLine(comment: "test comment") == pub)
    }

    /// ssh-keygen -Y sign with an ECDSA key: the signature blob inside the SSHSIG parses to r||s, and encoding
    /// r||s again gives the same blob (mpint leading-zero rules included, over several signatures).
    @Test func ecdsaSignatureBlobMatchesSSHKeygen() async throws {
        let (path, _) = try await Self.keygen("ecdsa", bits: 256)
        let message = Scratch.file("msg")
        try Data("hello".utf8).write(to: URL(fileURLWithPath: message))
        for _ in 0..<8 {
            try? FileManager.default.removeItem(atPath: message + ".sig")
            let r = try await Subprocess.run("ssh-keygen", ["-Y", "sign", "-n", "file", "-f", path, message])
            #expect(r.status == 0, "\(r.output)")
            let armored = try String(contentsOfFile: message + ".sig", encoding: .utf8)
            let b64 = armored.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            let sshsig = Array(try #require(Data(base64Encoded: b64)))
            #expect(Array(sshsig.prefix(6)) == Array("SSHSIG".utf8))
            var reader = SSHReader(Array(sshsig.dropFirst(6)))
            #expect(try reader.uint32() == 1)
            _ = try reader.string()  // public key
            #expect(try reader.text() == "file")
            _ = try reader.string()  // reserved
            _ = try reader.string()  // hash algorithm
            let blob = try reader.string()
            let parsed = try SSHSignature.parse(blob)
            #expect(parsed.algorithm == "ecdsa-sha2-nistp256")
            #expect(try SSHSignature.ecdsaP256(raw: parsed.signature) == blob)
        }
    }

    @Test func mpintEncodingFollowsRFC4251() {
        // RFC 4251 §5 examples: 0x80 needs a leading zero; zero is the empty string.
        var w = SSHWriter()
        w.mpint(unsigned: [0x80])
        w.mpint(unsigned: [0x00, 0x00])
        w.mpint(unsigned: [0x09, 0xa3, 0x78, 0xf9, 0xb2, 0xe3, 0x32, 0xa7])
        #expect(
            w.bytes == [0, 0, 0, 2, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 8, 0x09, 0xa3, 0x78, 0xf9, 0xb2, 0xe3, 0x32, 0xa7])
    }
}

@Suite struct AgentMessageTests {
    @Test func parsesRequests() throws {
        #expect(try AgentRequest.parse([11]) == .requestIdentities)
        var w = SSHWriter()
        w.byte(13); w.string([1, 2]); w.string([3]); w.uint32(AgentSignFlags.rsaSHA2_256)
        #expect(try AgentRequest.parse(w.bytes) == .sign(keyBlob: [1, 2], data: [3], flags: 2))
        var s = SSHWriter()
        s.byte(26); s.string("my token"); s.string("1234"); s.byte(2); s.byte(1); s.uint32(60)
        var c = AgentConstraints()
        c.confirm = true
        c.lifetime = 60
        #expect(try AgentRequest.parse(s.bytes) == .addSmartcardKey(readerID: "my token", pin: "1234", constraints: c))
        #expect(try AgentRequest.parse([200, 1, 2]) == .unknown(type: 200))
        #expect(try AgentRequest.parse([17, 0]) == .addIdentity)
    }

    @Test func truncatedOrTrailingMessagesAreMalformed() {
        #expect(throws: TesseraError.self) { try AgentRequest.parse([]) }
        #expect(throws: TesseraError.self) { try AgentRequest.parse([13, 0, 0, 0, 9, 1]) }
        #expect(throws: TesseraError.self) { try AgentRequest.parse([11, 0]) }
        #expect(throws: TesseraError.self) { try AgentRequest.parse([22, 0xff, 0xff, 0xff, 0xff]) }
    }

    @Test func encodesResponses() {
        #expect(AgentResponse.failure.bytes == [5])
        #expect(AgentResponse.success.bytes == [6])
        #expect(AgentResponse.identities([([1], "c")]).bytes == [12, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0x63])
        #expect(AgentFraming.frame([6]) == [0, 0, 0, 1, 6])
    }
}

/// The agent's own unlock (`ssh-add -s`) against a backend that records what reaches the token.
@Suite struct AgentUnlockTests {
    final class Backend: SSHAgentBackend {
        let keys: [AgentIdentity]
        let signs = Locked(0)
        let lines = Locked<[String]>([])
        init(_ keys: [AgentIdentity], confirmAnswer: Bool = false) {
            self.keys = keys; self.confirmAnswer = confirmAnswer
        }

        func identities() async -> [AgentIdentity] { keys }
        func identity(blob: [UInt8]) async -> AgentIdentity? { keys.first { $0.key.blob == blob } }
        func sign(_ identity: AgentIdentity, data: [UInt8], flags: UInt32) async throws(TesseraError) -> [UInt8] {
            signs.withLock { $0 += 1 }
            return SSHSignature.rsa(algorithm: "rsa-sha2-256", signature: data)
        }
        func unlock(readerID: String, pin: String, peer: AgentPeer) async throws(TesseraError) -> String {
            guard pin == "1234" else { throw TesseraError(.pinInvalid, "wrong PIN") }
            return readerID
        }
        func tokenID(readerID: String) async -> String? { readerID }
        func forget(tokenID: String) async { forgotten.withLock { $0.append(tokenID) } }
        func confirm(_ identity: AgentIdentity, peer: AgentPeer, forwarded: Bool) async -> Bool {
            confirms.withLock { $0.append(forwarded) }
            return confirmAnswer
        }
        func log(_ level: AgentLogLevel, _ message: String) { lines.withLock { $0.append(message) } }
        func askPIN(_ identity: AgentIdentity, peer: AgentPeer) async -> AgentPINAnswer {
            asked.withLock { $0 += 1 }
            return dialog.withLock { $0 }
        }
        let forgotten = Locked<[String]>([])
        let confirms = Locked<[Bool]>([])
        let confirmAnswer: Bool
        /// What the PIN dialog answers (`.unavailable`: no pinentry), and how often it was asked.
        let dialog = Locked(AgentPINAnswer.unavailable)
        let asked = Locked(0)
    }

    /// A key of uid 1000 on token t1 that needs an unlock, its backend and agent, and uid 1000's connection.
    static func aliceWithALockedKey() -> (AgentIdentity, Backend, SSHAgent, AgentPeer) {
        let pinKey = AgentIdentity(
            key: key(1), comment: "a", tokenID: "t1", handle: [1], needsUnlock: true, ownerUid: 1000)
        let backend = Backend([pinKey])
        return (
            pinKey, backend, SSHAgent(backend: backend, pinCacheSeconds: 60),
            AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        )
    }

    static func key(_ byte: UInt8) -> SSHPublicKey { .ecdsaP256(point: [4] + [UInt8](repeating: byte, count: 64)) }

    static func signRequest(_ key: SSHPublicKey) -> [UInt8] {
        var w = SSHWriter()
        w.byte(AgentMessageType.signRequest); w.string(key.blob); w.string([1, 2, 3]); w.uint32(0)
        return w.bytes
    }

    static func smartcard(_ type: UInt8, _ reader: String, pin: String) -> [UInt8] {
        var w = SSHWriter()
        w.byte(type); w.string(reader); w.string(pin)
        return w.bytes
    }

    @Test func aKeyThatNeedsAnUnlockSignsOnlyAfterSSHAddS() async {
        let pinKey = AgentIdentity(
            key: Self.key(1), comment: "a", tokenID: "t1", handle: [1], needsUnlock: true, ownerUid: 1000)
        let freeKey = AgentIdentity(key: Self.key(2), comment: "b", tokenID: "t1", handle: [2], ownerUid: 1000)
        let backend = Backend([pinKey, freeKey])
        let agent = SSHAgent(backend: backend, pinCacheSeconds: 60)
        let peer = AgentPeer(connectionID: 1, uid: 1000, maySign: true)

        // No unlock: refused before the token, with a line naming the token and the fix.
        #expect(await agent.handle(Self.signRequest(pinKey.key), from: peer) == [5])
        #expect(backend.signs.withLock { $0 } == 0)
        #expect(backend.lines.withLock { $0 }.contains("ssh-agent: token t1 needs a PIN: run `ssh-add -s t1`"))
        // A key that needs no PIN (PIV 9E, a token with a PIN file) signs without one.
        #expect(await agent.handle(Self.signRequest(freeKey.key), from: peer).first == 14)
        #expect(backend.signs.withLock { $0 } == 1)
        // A wrong PIN does not unlock; the right one does, for that token only.
        #expect(await agent.handle(Self.smartcard(20, "t1", pin: "0000"), from: peer) == [5])
        #expect(await agent.handle(Self.signRequest(pinKey.key), from: peer) == [5])
        #expect(await agent.handle(Self.smartcard(20, "t2", pin: "1234"), from: peer) == [6])
        #expect(await agent.handle(Self.signRequest(pinKey.key), from: peer) == [5])
        #expect(await agent.handle(Self.smartcard(20, "t1", pin: "1234"), from: peer) == [6])
        #expect(await agent.handle(Self.signRequest(pinKey.key), from: peer).first == 14)
        #expect(backend.signs.withLock { $0 } == 2)
        // ssh-add -e forgets it again.
        #expect(await agent.handle(Self.smartcard(21, "t1", pin: ""), from: peer) == [6])
        #expect(await agent.handle(Self.signRequest(pinKey.key), from: peer) == [5])
        #expect(backend.signs.withLock { $0 } == 2)
    }
}

/// A key that needs an unlock asks the PIN dialog once per signature: cancel and a wrong PIN fail that signature and
/// are not asked again; the right PIN unlocks the token for the uid as `ssh-add -s` does.
@Suite struct AgentPINDialogTests {
    typealias T = AgentUnlockTests

    @Test func oneQuestionPerSignatureNeverRetried() async {
        let (pinKey, backend, agent, alice) = T.aliceWithALockedKey()
        let admin = AgentPeer(connectionID: 2, uid: 0, maySign: true, isAdmin: true)

        backend.dialog.withLock { $0 = .cancelled }
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice) == [5])
        #expect(backend.asked.withLock { $0 } == 1 && backend.signs.withLock { $0 } == 0)
        #expect(backend.lines.withLock { $0 }.contains { $0.contains("cancelled") })

        backend.dialog.withLock { $0 = .pin("0000") }
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice) == [5])
        #expect(backend.asked.withLock { $0 } == 2 && backend.signs.withLock { $0 } == 0)
        #expect(backend.lines.withLock { $0 }.contains { $0.contains("PIN_INVALID") })

        backend.dialog.withLock { $0 = .pin("1234") }
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)
        #expect(backend.asked.withLock { $0 } == 3 && backend.signs.withLock { $0 } == 1)
        // The unlock is alice's and lasts: no question for her next signature; another uid is asked for its own.
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)
        #expect(backend.asked.withLock { $0 } == 3)
        #expect(agent.unlockedTokens(uid: 1000).keys.sorted() == ["t1"])
        backend.dialog.withLock { $0 = .unavailable }
        #expect(await agent.handle(T.signRequest(pinKey.key), from: admin) == [5])
        #expect(backend.asked.withLock { $0 } == 4)
        #expect(backend.lines.withLock { $0 }.contains("ssh-agent: token t1 needs a PIN: run `ssh-add -s t1`"))
        // ssh-add -e ends the dialog's unlock like any other.
        #expect(await agent.handle(T.smartcard(21, "t1", pin: ""), from: alice) == [6])
        #expect(agent.unlockedTokens(uid: 1000).isEmpty)
    }

    @Test func aPINIsNeverPrinted() {
        #expect("\(AgentPINAnswer.pin("1234"))" == "pin(redacted)")
    }
}

/// `ssh-add -s`, `-e` and `-x` belong to the uid that gave them.
@Suite struct AgentUnlockIsolationTests {
    typealias T = AgentUnlockTests

    @Test func oneUidsUnlockDoesNotUnlockAnotherAndItsLockDoesNotLockAnother() async {
        let (pinKey, backend, agent, alice) = T.aliceWithALockedKey()
        // An administrator sees alice's key (docs/API.md, "Owners"), and still needs an unlock of its own.
        let bob = AgentPeer(connectionID: 2, uid: 1001, maySign: true, isAdmin: true)

        #expect(await agent.handle(T.smartcard(20, "t1", pin: "1234"), from: alice) == [6])
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)
        // Alice's unlock is not bob's: his signature is refused before the token.
        #expect(await agent.handle(T.signRequest(pinKey.key), from: bob) == [5])
        #expect(backend.signs.withLock { $0 } == 1)
        #expect(agent.unlockedTokens(uid: 1001).isEmpty)
        #expect(agent.unlockedTokens(uid: 1000).keys.sorted() == ["t1"])

        // Bob unlocks too; his ssh-add -e ends his unlock only, and the token stays logged in for alice.
        #expect(await agent.handle(T.smartcard(20, "t1", pin: "1234"), from: bob) == [6])
        #expect(await agent.handle(T.smartcard(21, "t1", pin: ""), from: bob) == [6])
        #expect(backend.forgotten.withLock { $0 }.isEmpty)
        #expect(await agent.handle(T.signRequest(pinKey.key), from: bob) == [5])
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)

        // Bob's ssh-add -x locks bob, not alice, and does not log alice's token out.
        #expect(await agent.handle(T.smartcard(20, "t1", pin: "1234"), from: bob) == [6])
        #expect(await agent.handle([22, 0, 0, 0, 2, 0x70, 0x77], from: bob) == [6])
        #expect(backend.forgotten.withLock { $0 }.isEmpty)
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)
        #expect(await agent.handle([11], from: bob) == [12, 0, 0, 0, 0])
        // Bob cannot end alice's unlock: -e without his own unlock fails.
        #expect(await agent.handle([23, 0, 0, 0, 2, 0x70, 0x77], from: bob) == [6])
        #expect(await agent.handle(T.smartcard(21, "t1", pin: ""), from: bob) == [5])
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice).first == 14)

        // Alice's own -e ends the last unlock: now the token is logged out.
        #expect(await agent.handle(T.smartcard(21, "t1", pin: ""), from: alice) == [6])
        #expect(backend.forgotten.withLock { $0 } == ["t1"])
        #expect(await agent.handle(T.signRequest(pinKey.key), from: alice) == [5])
    }
}

/// A key is its owner's (docs/API.md, "Owners"): another uid neither lists it nor signs with it, and the refusal is
/// the one for a key the agent does not hold.
@Suite struct AgentOwnerTests {
    typealias T = AgentUnlockTests

    @Test func anotherUidsKeyDoesNotExistForIt() async {
        let alicesKey = AgentIdentity(key: T.key(1), comment: "alice", tokenID: "t1", handle: [1], ownerUid: 1000)
        let bobsKey = AgentIdentity(key: T.key(2), comment: "bob", tokenID: "t1", handle: [2], ownerUid: 1001)
        let backend = T.Backend([alicesKey, bobsKey])
        let agent = SSHAgent(backend: backend, pinCacheSeconds: 60)
        let alice = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        let admin = AgentPeer(connectionID: 2, uid: 0, maySign: true, isAdmin: true)
        func listed(_ peer: AgentPeer) async -> Int {
            let answer = await agent.handle([11], from: peer)
            return answer.count >= 5
                ? Int(answer[1]) << 24 | Int(answer[2]) << 16 | Int(answer[3]) << 8 | Int(answer[4]) : -1
        }
        #expect(await listed(alice) == 1)
        #expect(await listed(admin) == 2)
        #expect(await agent.handle(T.signRequest(alicesKey.key), from: alice).first == 14)
        #expect(await agent.handle(T.signRequest(bobsKey.key), from: alice) == [5])
        #expect(await agent.handle(T.signRequest(T.key(9)), from: alice) == [5])
        #expect(backend.signs.withLock { $0 } == 1)
        #expect(await agent.handle(T.signRequest(bobsKey.key), from: admin).first == 14)
    }
}

/// `session-bind@openssh.com`: verified, bounded, and forwarding known.
@Suite struct AgentSessionBindTests {
    typealias T = AgentUnlockTests

    static func bind(
        _ host: Curve25519.Signing.PrivateKey, sessionID: [UInt8], forwarding: Bool,
        signer: Curve25519.Signing.PrivateKey? = nil
    ) throws -> [UInt8] {
        var key = SSHWriter()
        key.string("ssh-ed25519"); key.string(Array(host.publicKey.rawRepresentation))
        var sig = SSHWriter()
        sig.string("ssh-ed25519"); sig.string(Array(try (signer ?? host).signature(for: sessionID)))
        var w = SSHWriter()
        w.byte(27); w.string("session-bind@openssh.com")
        w.string(key.bytes); w.string(sessionID); w.string(sig.bytes); w.byte(forwarding ? 1 : 0)
        return w.bytes
    }

    @Test func aBadSignatureIsRefused() async throws {
        let agent = SSHAgent(backend: T.Backend([]), pinCacheSeconds: 60)
        let peer = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        let host = Curve25519.Signing.PrivateKey(), other = Curve25519.Signing.PrivateKey()
        let sid = [UInt8](repeating: 7, count: 32)
        #expect(
            await agent.handle(try Self.bind(host, sessionID: sid, forwarding: false, signer: other), from: peer) == [5]
        )
        var tampered = try Self.bind(host, sessionID: sid, forwarding: false)
        tampered[tampered.count - 10] ^= 1
        #expect(await agent.handle(tampered, from: peer) == [5])
        #expect(agent.binds(connectionID: 1).isEmpty)
        #expect(await agent.handle(try Self.bind(host, sessionID: sid, forwarding: false), from: peer) == [6])
        #expect(agent.binds(connectionID: 1).count == 1)
    }

    @Test func hostKeysOfEachTypeVerify() throws {
        let sid = Array("session".utf8)
        let p256 = P256.Signing.PrivateKey()
        var key = SSHWriter()
        key.string("ecdsa-sha2-nistp256"); key.string("nistp256"); key.string(Array(p256.publicKey.x963Representation))
        let raw = Array(try p256.signature(for: sid).rawRepresentation)
        let signature = try SSHSignature.ecdsaP256(raw: raw)
        #expect(HostKeySignature.isValid(signature, hostKey: key.bytes, over: sid))
        #expect(!HostKeySignature.isValid(signature, hostKey: key.bytes, over: sid + [0]))
        #expect(!HostKeySignature.isValid([], hostKey: key.bytes, over: sid))
    }

    @Test func atMostSixteenBindsPerConnection() async throws {
        let backend = T.Backend([])
        let agent = SSHAgent(backend: backend, pinCacheSeconds: 60)
        let peer = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        let host = Curve25519.Signing.PrivateKey()
        for i in 0..<40 {
            let answer = await agent.handle(
                try Self.bind(host, sessionID: [UInt8](repeating: UInt8(i), count: 32), forwarding: true), from: peer)
            #expect(answer == (i < SSHAgent.maxSessionBinds ? [6] : [5]), "bind \(i)")
        }
        #expect(agent.binds(connectionID: 1).count == 16)
        // The refusals past the limit are logged once, not once each.
        #expect(backend.lines.withLock { $0 }.filter { $0.contains("binds already recorded") }.count == 1)
        // Another connection has its own 16.
        let other = AgentPeer(connectionID: 2, uid: 1000, maySign: true)
        #expect(await agent.handle(try Self.bind(host, sessionID: [1], forwarding: false), from: other) == [6])
        // After a bind for authentication (not forwarding) the connection takes no further bind.
        #expect(await agent.handle(try Self.bind(host, sessionID: [2], forwarding: true), from: other) == [5])
    }

    @Test func forwardedConnectionsSayWhatTheyAreAndMayBeRefused() async throws {
        let confirmKey = AgentIdentity(
            key: T.key(3), comment: "c", tokenID: "t1", handle: [3], confirm: true, ownerUid: 1000)
        let host = Curve25519.Signing.PrivateKey()
        let forwardedBind = try Self.bind(host, sessionID: [9, 9], forwarding: true)

        let backend = T.Backend([confirmKey], confirmAnswer: true)
        let agent = SSHAgent(backend: backend, pinCacheSeconds: 60)
        let local = AgentPeer(connectionID: 1, uid: 1000, maySign: true)
        let forwarded = AgentPeer(connectionID: 2, uid: 1000, maySign: true)
        #expect(await agent.handle(forwardedBind, from: forwarded) == [6])
        #expect(agent.isForwarded(connectionID: 2) && !agent.isForwarded(connectionID: 1))
        #expect(await agent.handle(T.signRequest(confirmKey.key), from: local).first == 14)
        #expect(await agent.handle(T.signRequest(confirmKey.key), from: forwarded).first == 14)
        #expect(backend.confirms.withLock { $0 } == [false, true])

        let strictBackend = T.Backend([confirmKey], confirmAnswer: true)
        let strict = SSHAgent(backend: strictBackend, pinCacheSeconds: 60, allowForwarded: false)
        #expect(await strict.handle(forwardedBind, from: forwarded) == [6])
        #expect(await strict.handle(T.signRequest(confirmKey.key), from: forwarded) == [5])
        #expect(strictBackend.signs.withLock { $0 } == 0 && strictBackend.confirms.withLock { $0 }.isEmpty)
        #expect(await strict.handle(T.signRequest(confirmKey.key), from: local).first == 14)
    }
}
