import CBOR
import Crypto
import TesseraCore
import Testing

@testable import CTAP2

/// The authenticator state machine (CTAP 2.1 §6) over an in-memory backend; the real backend (passkey service on
/// SoftHSM2) is exercised end to end in Tests/e2e/test_ctap.py.
struct CTAP2AuthenticatorTests {
    final class MemoryBackend: CTAP2Backend {
        struct State {
            var credentials: [CTAP2Credential] = []
            var presence: [PresenceRequest] = []
            var signed: [(id: [UInt8], up: Bool)] = []
            var presenceAnswer: CTAP2Error?
            /// LEFT(SHA-256(PIN), 16) of the token's PIN, and every hash tried on it.
            var pinHash = Array(SHA256.hash(data: Array("1234".utf8)).prefix(16))
            var pinTries: [[UInt8]] = []
            var retries = 8
            var verified: [Bool] = []
            /// What the token's PIN check answers instead of checking (PIN_BLOCKED, the back-off's PIN_AUTH_BLOCKED).
            var pinAnswer: CTAP2Error?
            /// Whether new credentials may have hmac-secret keys (a PKCS#11 store; a PIV one may not).
            var hmacSupported = true
        }
        let state = Locked(State())

        func credentials(rpId: String, ids: [[UInt8]]?) async throws(CTAP2Error) -> [CTAP2Credential] {
            state.withLock { s in
                s.credentials.reversed().filter { c in
                    c.rpId == rpId && (ids.map { $0.contains(c.id) } ?? c.discoverable)
                }
            }
        }

        func makeCredential(
            rpId: String, user: CTAP2User, clientDataHash: [UInt8], discoverable: Bool,
            credProtect: CredProtect, extensions: [UInt8]?, hmacSecret: Bool, userVerified: Bool
        ) async throws(CTAP2Error) -> CTAP2Attestation {
            state.withLock { $0.verified.append(userVerified) }
            let id = [UInt8](repeating: UInt8(state.withLock { $0.credentials.count } + 1), count: 16)
            state.withLock {
                $0.credentials.append(
                    CTAP2Credential(
                        id: id, rpId: rpId, user: user, discoverable: discoverable, credProtect: credProtect,
                        publicKey: CBORValue.map([(1, 2), (3, CBORValue(-7))]).encodedWithDistinctKeys(),
                        hmacSecret: hmacSecret))
            }
            return CTAP2Attestation(
                format: "packed", authData: id + (extensions ?? []), statement: ["alg": -7, "sig": .byteString([1])])
        }

        func assert(
            _ credential: CTAP2Credential, clientDataHash: [UInt8], userPresent: Bool, userVerified: Bool,
            extensions: [UInt8]?
        ) async throws(CTAP2Error) -> (authData: [UInt8], signature: [UInt8]) {
            state.withLock {
                $0.signed.append((credential.id, userPresent))
                $0.verified.append(userVerified)
            }
            return ([userPresent ? 1 : 0] + (extensions ?? []), credential.id)
        }

        func supportsHMACSecret() async -> Bool { state.withLock { $0.hmacSupported } }

        /// The fake CredRandom of a credential: SHA-256(id ‖ uv).
        static func credRandom(_ id: [UInt8], userVerified: Bool) -> SymmetricKey {
            SymmetricKey(data: SHA256.hash(data: id + [userVerified ? 1 : 0]))
        }

        func hmacSecret(_ credential: CTAP2Credential, userVerified: Bool, salts: [[UInt8]]) async throws(CTAP2Error)
            -> [UInt8]
        {
            salts.flatMap { salt in
                Array(
                    HMAC<SHA256>.authenticationCode(
                        for: salt, using: Self.credRandom(credential.id, userVerified: userVerified)))
            }
        }

        func userPresence(_ request: PresenceRequest) async throws(CTAP2Error) {
            let answer = state.withLock { s in
                s.presence.append(request)
                return s.presenceAnswer
            }
            if let answer { throw answer }
        }

        func pinRetries() async throws(CTAP2Error) -> Int { state.withLock { $0.retries } }

        func discoverableCredentials() async throws(CTAP2Error) -> [CTAP2Credential] {
            state.withLock { $0.credentials.reversed().filter(\.discoverable) }
        }

        func deleteCredential(_ credential: CTAP2Credential) async throws(CTAP2Error) {
            state.withLock { $0.credentials.removeAll { $0.id == credential.id } }
        }

        func updateUser(_ credential: CTAP2Credential, user: CTAP2User) async throws(CTAP2Error) {
            state.withLock { s in
                for i in s.credentials.indices where s.credentials[i].id == credential.id {
                    s.credentials[i].user = user
                }
            }
        }

        func verifyPIN(hash: [UInt8]) async throws(CTAP2Error) {
            try state.withLock { s throws(CTAP2Error) in
                if let answer = s.pinAnswer { throw answer }
                s.pinTries.append(hash)
                guard hash == s.pinHash else {
                    s.retries -= 1
                    throw CTAP2Error(.pinInvalid, "wrong PIN")
                }
                s.retries = 8
            }
        }

        func changePIN(currentHash: [UInt8], newHash: [UInt8]) async throws(CTAP2Error) {
            try await verifyPIN(hash: currentHash)
            state.withLock { $0.pinHash = newHash }
        }
    }

    let hash = [UInt8](repeating: 0xAB, count: 32)

    func authenticator() -> (CTAP2Authenticator, MemoryBackend) {
        let backend = MemoryBackend()
        return (
            CTAP2Authenticator(
                backend: backend, info: .init(aaguid: [UInt8](repeating: 7, count: 16), maxMessageSize: 7609)), backend
        )
    }

    func request(_ command: UInt8, _ params: CBORValue) -> [UInt8] { [command] + params.encodedWithDistinctKeys() }

    func makeCredential(
        rpId: String = "example.com", user: UInt8, rk: Bool, credProtect: Int? = nil,
        exclude: [[UInt8]] = [], algs: [Int] = [-7]
    ) -> [UInt8] {
        var params: [(key: CBORValue, value: CBORValue)] = [
            (1, .byteString(hash)), (2, ["id": .textString(rpId), "name": "Example"]),
            (3, ["id": .byteString([user]), "name": .textString("user\(user)"), "displayName": "User"]),
            (4, .array(algs.map { ["alg": CBORValue($0), "type": "public-key"] })),
        ]
        if !exclude.isEmpty {
            params.append((5, .array(exclude.map { ["id": .byteString($0), "type": "public-key"] })))
        }
        if let credProtect { params.append((6, ["credProtect": CBORValue(credProtect)])) }
        params.append((7, ["rk": .bool(rk)]))
        return request(0x01, .map(params))
    }

    func getAssertion(rpId: String = "example.com", allow: [[UInt8]]? = nil, up: Bool? = nil) -> [UInt8] {
        var params: [(key: CBORValue, value: CBORValue)] = [(1, .textString(rpId)), (2, .byteString(hash))]
        if let allow { params.append((3, .array(allow.map { ["id": .byteString($0), "type": "public-key"] }))) }
        if let up { params.append((5, ["up": .bool(up)])) }
        return request(0x02, .map(params))
    }

    func decode(_ response: [UInt8]) throws -> CBORValue {
        #expect(response.first == 0)
        return try CBORValue(decoding: Array(response.dropFirst()))
    }

    @Test func getInfo() async throws {
        let (a, _) = authenticator()
        let info = try decode(await a.handle([0x04]))
        #expect(info[1] == ["FIDO_2_0", "FIDO_2_1"])
        #expect(info[3] == .byteString([UInt8](repeating: 7, count: 16)))
        #expect(info[4]?["rk"] == true && info[4]?["up"] == true && info[4]?["uv"] == false)
        #expect(info[5] == 7609)
        #expect(info[10]?.arrayValue?.first?["alg"] == -7)
    }

    @Test func makeCredentialTestsPresenceAndReturnsAttestation() async throws {
        let (a, backend) = authenticator()
        let r = try decode(await a.handle(makeCredential(user: 1, rk: true, credProtect: 2)))
        #expect(r[1] == "packed")
        #expect(r[3]?["alg"] == -7)
        // The credProtect output goes into the authenticator data's extensions.
        let ext = CBORValue.map([("credProtect", 2)]).encodedWithDistinctKeys()
        #expect(r[2]?.bytesValue.map { Array($0.suffix(ext.count)) } == ext)
        #expect(backend.state.withLock { $0.presence.map(\.operation) } == ["makeCredential"])
        #expect(
            backend.state.withLock { $0.credentials.first?.credProtect }
                == .userVerificationOptionalWithCredentialIDList)
    }

    @Test func makeCredentialRefusals() async throws {
        let (a, backend) = authenticator()
        #expect(await a.handle(makeCredential(user: 1, rk: false, algs: [-257])) == [0x26])
        #expect(await a.handle(makeCredential(user: 1, rk: false, credProtect: 4)) == [0x2C])
        _ = await a.handle(makeCredential(user: 1, rk: false))
        let existing = backend.state.withLock { $0.credentials[0].id }
        // excludeList: presence is tested first, then CREDENTIAL_EXCLUDED.
        #expect(await a.handle(makeCredential(user: 2, rk: false, exclude: [existing])) == [0x19])
        #expect(
            backend.state.withLock { $0.presence.count } == 2, "refused requests asked nothing; the excluded one did")
        backend.state.withLock { $0.presenceAnswer = CTAP2Error(.userActionTimeout) }
        #expect(await a.handle(makeCredential(user: 3, rk: false)) == [0x2F])
        #expect(backend.state.withLock { $0.credentials.count } == 1)
    }

    @Test func malformedRequests() async {
        let (a, _) = authenticator()
        #expect(await a.handle([]) == [0x03])
        #expect(await a.handle([0x42]) == [0x01])
        #expect(await a.handle([0x01, 0xA1, 0x01]) == [0x12], "truncated CBOR")
        #expect(await a.handle([0x01, 0x01]) == [0x11], "not a map")
        #expect(await a.handle([0x01]) == [0x14], "no parameters")
        #expect(await a.handle(request(0x01, [1: .byteString(hash)])) == [0x14], "rp missing")
        #expect(await a.handle(request(0x02, [1: 5, 2: .byteString(hash)])) == [0x11], "rpId not text")
        #expect(await a.handle(request(0x02, [1: "example.com", 2: .byteString([1, 2])])) == [0x03], "short hash")
        #expect(await a.handle([0x07]) == [0x27], "reset is refused")
        #expect(await a.handle([0x08]) == [0x30], "getNextAssertion without getAssertion")
    }

    @Test func discoverableAssertionsWithGetNext() async throws {
        let (a, backend) = authenticator()
        _ = await a.handle(makeCredential(user: 1, rk: true))
        _ = await a.handle(makeCredential(user: 2, rk: true))
        _ = await a.handle(makeCredential(user: 3, rk: false))
        _ = await a.handle(makeCredential(rpId: "other.example", user: 4, rk: true))
        let first = try decode(await a.handle(getAssertion()))
        #expect(first[5] == 2)
        #expect(first[4]?["id"] == .byteString([2]), "newest first")
        #expect(first[4]?["name"] == nil, "no identifying fields without UV")
        let second = try decode(await a.handle([0x08]))
        #expect(second[4]?["id"] == .byteString([1]))
        #expect(second[5] == nil)
        #expect(await a.handle([0x08]) == [0x30])
        // Presence is asked once for the whole sequence.
        #expect(backend.state.withLock { $0.presence.filter { $0.operation == "getAssertion" }.count } == 1)
    }

    @Test func getNextIsEndedByAnotherCommand() async throws {
        let (a, _) = authenticator()
        _ = await a.handle(makeCredential(user: 1, rk: true))
        _ = await a.handle(makeCredential(user: 2, rk: true))
        _ = try decode(await a.handle(getAssertion()))
        _ = await a.handle([0x04])
        #expect(await a.handle([0x08]) == [0x30])
    }

    /// getNextAssertion continues only on the channel (and connection) whose getAssertion began it; another
    /// channel's requests neither continue nor end it (before, any channel continued it).
    @Test func getNextBelongsToItsChannel() async throws {
        let (a, _) = authenticator()
        let mine = CTAP2Session(connection: 1, channel: 0x1111_1111, uid: 1000)
        let otherChannel = CTAP2Session(connection: 1, channel: 0x2222_2222, uid: 1000)
        let otherClient = CTAP2Session(connection: 2, channel: 0x1111_1111, uid: 1001)
        _ = await a.handle(makeCredential(user: 1, rk: true), from: mine)
        _ = await a.handle(makeCredential(user: 2, rk: true), from: mine)
        let first = try decode(await a.handle(getAssertion(), from: mine))
        #expect(first[5] == 2)
        #expect(await a.handle([0x08], from: otherChannel) == [0x30])
        #expect(await a.handle([0x08], from: otherClient) == [0x30])
        _ = await a.handle([0x04], from: otherClient)
        let second = try decode(await a.handle([0x08], from: mine))
        #expect(second[4]?["id"] == .byteString([1]))
    }

    @Test func allowListAndSilentAssertion() async throws {
        let (a, backend) = authenticator()
        _ = await a.handle(makeCredential(user: 1, rk: false))
        let id = backend.state.withLock { $0.credentials[0].id }
        #expect(await a.handle(getAssertion()) == [0x2E], "non-discoverable is not found without allowList")
        let r = try decode(await a.handle(getAssertion(allow: [id], up: false)))
        #expect(r[1]?["id"] == .byteString(id))
        #expect(r[2] == .byteString([0]), "UP clear")
        #expect(backend.state.withLock { $0.presence.count } == 1, "up=false asks no presence")
        #expect(await a.handle(getAssertion(rpId: "other.example", allow: [id])) == [0x2E])
    }

    @Test func credProtectIsEnforced() async throws {
        let (a, backend) = authenticator()
        _ = await a.handle(makeCredential(user: 1, rk: true, credProtect: 2))
        _ = await a.handle(makeCredential(rpId: "three.example", user: 2, rk: true, credProtect: 3))
        let (level2, level3) = backend.state.withLock { ($0.credentials[0].id, $0.credentials[1].id) }
        // Level 2: not discoverable without UV, usable with its id.
        #expect(await a.handle(getAssertion()) == [0x2E])
        #expect(try decode(await a.handle(getAssertion(allow: [level2])))[1]?["id"] == .byteString(level2))
        // Level 3: never without UV.
        #expect(await a.handle(getAssertion(rpId: "three.example")) == [0x2E])
        #expect(await a.handle(getAssertion(rpId: "three.example", allow: [level3])) == [0x2E])
        // A level-3 credential does not trigger excludeList without UV.
        #expect(
            try decode(await a.handle(makeCredential(rpId: "three.example", user: 5, rk: true, exclude: [level3])))[1]
                == "packed")
    }

    @Test func selectionAndCancelledPresence() async {
        let (a, backend) = authenticator()
        #expect(await a.handle([0x0B]) == [0x00])
        backend.state.withLock { $0.presenceAnswer = CTAP2Error(.keepaliveCancel) }
        #expect(await a.handle([0x0B]) == [0x2D])
    }
}
