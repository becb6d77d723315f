import CBOR
import Crypto
import TesseraCore
import Testing

@testable import CTAP2

private func hex(_ s: String) -> [UInt8] { Hex.decode(s)! }

/// PIN/UV auth protocols 1 and 2 against values python-fido2 2.2.1 computed (`fido2.ctap2.pin.PinProtocolV1/V2`
/// kdf, encrypt, authenticate; protocol 2's ciphertext with the fixed IV 11…11 through `cryptography`'s AES-CBC):
/// authenticator key scalar 01 02 … 20, platform key scalar 21 22 … 40, PIN "1234", message 00 01 … 1F.
struct PINProtocolTests {
    let platformKey: CBORValue = [
        1: 2, 3: CBORValue(-25), CBORValue(-1): 1,
        CBORValue(-2): .byteString(hex("1f140146bfb1b251f84f4ddbe0d4cdcfd77afd984a9520e35794021f8312bb9e")),
        CBORValue(-3): .byteString(hex("ec995a08b1fa7704df3dcc0b50a9665263fb7711f95f9f8a449c5096e47c892b")),
    ]
    let shared1 = hex("1ec02cfb0421e2a0328e6737a6c08ebec1b8028a23488ba37e64aac2eac89db3")
    let shared2 = hex(
        "8da12c0f9997c5f11c4110fc28598f91acc9025de91db49aa2aba7a311bf4139"
            + "743562500c3df309c9b074d46a7cf8cecef2368ae7966e7078f73796d5e3e11c")
    let pinHash = Array(SHA256.hash(data: Array("1234".utf8)).prefix(16))
    let message = [UInt8](0..<32)

    @Test func sharedSecretsMatchPythonFido2() throws {
        let key = try PINKeyAgreement(rawPrivateKey: [UInt8](1...32))
        #expect(try key.sharedSecret(with: platformKey, protocol: .one) == shared1)
        #expect(try key.sharedSecret(with: platformKey, protocol: .two) == shared2)
    }

    @Test func encryptionMatchesPythonFido2() throws {
        #expect(try PINUVAuthProtocol.one.encrypt(key: shared1, pinHash) == hex("82e62eebf69563c7c685ef8160bc917c"))
        #expect(try PINUVAuthProtocol.one.decrypt(key: shared1, hex("82e62eebf69563c7c685ef8160bc917c")) == pinHash)
        let enc2 = hex("111111111111111111111111111111116048223444a6b4ebd2817fbe4558c8ab")
        #expect(
            try PINUVAuthProtocol.two.encrypt(key: shared2, pinHash, iv: [UInt8](repeating: 0x11, count: 16)) == enc2)
        #expect(try PINUVAuthProtocol.two.decrypt(key: shared2, enc2) == pinHash)
        // Protocol 2 draws a fresh IV each time.
        #expect(
            try PINUVAuthProtocol.two.encrypt(key: shared2, pinHash)
                != PINUVAuthProtocol.two.encrypt(key: shared2, pinHash))
        #expect(throws: CTAP2Error.self) { try PINUVAuthProtocol.two.decrypt(key: shared2, Array(enc2.prefix(16))) }
        #expect(throws: CTAP2Error.self) { try PINUVAuthProtocol.one.decrypt(key: shared1, [1, 2, 3]) }
    }

    @Test func authenticationMatchesPythonFido2() {
        let m1 = hex("0be1b7463ba219c760752c9840911ddf")
        let m2 = hex("1a686b0e35f674572efd21c549a9fd9a464aeaec096f882a6b2dbf52904e9f49")
        #expect(PINUVAuthProtocol.one.authenticate(key: shared1, message) == m1)
        #expect(PINUVAuthProtocol.two.authenticate(key: shared2, message) == m2)
        #expect(PINUVAuthProtocol.two.verify(key: shared2, message, signature: m2))
        #expect(!PINUVAuthProtocol.two.verify(key: shared2, message, signature: Array(m2.prefix(16))))
        #expect(!PINUVAuthProtocol.one.verify(key: shared1, [0] + message, signature: m1))
    }

    @Test func invalidPlatformKeysAreRefused() throws {
        let key = PINKeyAgreement()
        var notOnCurve = platformKey
        notOnCurve = .map(
            notOnCurve.mapValue!.map {
                $0.key == CBORValue(-3) ? ($0.key, .byteString([UInt8](repeating: 1, count: 32))) : $0
            })
        #expect(throws: CTAP2Error(.invalidParameter, "keyAgreement is not a point on P-256")) {
            try key.sharedSecret(with: notOnCurve, protocol: .two)
        }
        #expect(throws: CTAP2Error.self) { try key.sharedSecret(with: [1: 2], protocol: .one) }
    }
}

/// The ClientPIN state machine (§6.5.5) and pinUvAuthParam in makeCredential/getAssertion, as a platform (python-fido2's
/// `ClientPin` steps) would drive it, over the in-memory backend.
struct ClientPINTests {
    typealias Backend = CTAP2AuthenticatorTests.MemoryBackend
    let cdh = [UInt8](repeating: 0xAB, count: 32)

    func authenticator() -> (CTAP2Authenticator, Backend) {
        let backend = Backend()
        return (
            CTAP2Authenticator(
                backend: backend,
                info: .init(aaguid: [UInt8](repeating: 7, count: 16), maxMessageSize: 7609, clientPIN: true)),
            backend
        )
    }

    func call(_ a: CTAP2Authenticator, _ command: UInt8, _ params: CBORValue, from session: CTAP2Session = .local)
        async -> (UInt8, CBORValue?)
    {
        let r = await a.handle([command] + params.encodedWithDistinctKeys(), from: session)
        return (r[0], r.count > 1 ? try? CBORValue(decoding: Array(r.dropFirst())) : nil)
    }

    /// The platform's half of a key agreement: its COSE key and the shared secret.
    func encapsulate(_ a: CTAP2Authenticator, _ proto: PINUVAuthProtocol, from session: CTAP2Session = .local)
        async throws -> (CBORValue, [UInt8])
    {
        let (status, r) = await call(a, 0x06, [1: CBORValue(proto.rawValue), 2: 2], from: session)
        #expect(status == 0)
        let peer = try #require(r?[1])
        let x = try #require(peer[CBORValue(-2)]?.bytesValue), y = try #require(peer[CBORValue(-3)]?.bytesValue)
        let mine = P256.KeyAgreement.PrivateKey()
        let z = try mine.sharedSecretFromKeyAgreement(
            with: P256.KeyAgreement.PublicKey(x963Representation: [4] + x + y)
        )
        .withUnsafeBytes { Array($0) }
        let point = Array(mine.publicKey.x963Representation)
        let cose: CBORValue = [
            1: 2, 3: CBORValue(-25), CBORValue(-1): 1, CBORValue(-2): .byteString(Array(point[1..<33])),
            CBORValue(-3): .byteString(Array(point[33...])),
        ]
        return (cose, proto.kdf(z))
    }

    func pinHash(_ pin: String) -> [UInt8] { Array(SHA256.hash(data: Array(pin.utf8)).prefix(16)) }

    /// getPinUvAuthTokenUsingPinWithPermissions (or getPinToken without permissions): status and decrypted token.
    func pinToken(
        _ a: CTAP2Authenticator, _ proto: PINUVAuthProtocol, pin: String, permissions: Int? = 3, rpId: String? = nil,
        from session: CTAP2Session = .local
    ) async throws -> (UInt8, [UInt8]?) {
        let (cose, shared) = try await encapsulate(a, proto, from: session)
        var params: [(key: CBORValue, value: CBORValue)] = [
            (1, CBORValue(proto.rawValue)), (2, permissions == nil ? 5 : 9), (3, cose),
            (6, .byteString(try proto.encrypt(key: shared, pinHash(pin)))),
        ]
        if let permissions { params.append((9, CBORValue(permissions))) }
        if let rpId { params.append((10, .textString(rpId))) }
        let (status, r) = await call(a, 0x06, .map(params), from: session)
        guard status == 0 else { return (status, nil) }
        return (status, try proto.decrypt(key: shared, try #require(r?[2]?.bytesValue)))
    }

    func makeCredential(
        _ token: [UInt8]?, _ proto: PINUVAuthProtocol, rpId: String = "example.com", credProtect: Int? = nil,
        discoverable: Bool = true
    )
        -> CBORValue
    {
        var params: [(key: CBORValue, value: CBORValue)] = [
            (1, .byteString(cdh)), (2, ["id": .textString(rpId)]),
            (3, ["id": .byteString([1]), "name": "alice", "displayName": "Alice"]),
            (4, [["alg": CBORValue(-7), "type": "public-key"]]),
        ]
        if let credProtect { params.append((6, ["credProtect": CBORValue(credProtect)])) }
        params.append((7, ["rk": .bool(discoverable)]))
        if let token {
            params += [(8, .byteString(proto.authenticate(key: token, cdh))), (9, CBORValue(proto.rawValue))]
        }
        return .map(params)
    }

    func getAssertion(_ token: [UInt8]?, _ proto: PINUVAuthProtocol, rpId: String = "example.com") -> CBORValue {
        var params: [(key: CBORValue, value: CBORValue)] = [(1, .textString(rpId)), (2, .byteString(cdh))]
        if let token {
            params += [(6, .byteString(proto.authenticate(key: token, cdh))), (7, CBORValue(proto.rawValue))]
        }
        return .map(params)
    }

    @Test func getInfoOffersClientPIN() async throws {
        let (a, _) = authenticator()
        let info = try CBORValue(decoding: Array(await a.handle([0x04]).dropFirst()))
        #expect(info[4]?["clientPin"] == true && info[4]?["pinUvAuthToken"] == true && info[4]?["uv"] == false)
        #expect(info[6] == [2, 1])
    }

    @Test(arguments: PINUVAuthProtocol.allCases) func pinTokenThenUserVerifiedCredential(proto: PINUVAuthProtocol)
        async throws
    {
        let (a, backend) = authenticator()
        #expect(await call(a, 0x06, [1: CBORValue(proto.rawValue), 2: 1]).1?[3] == 8)
        let (status, token) = try await pinToken(a, proto, pin: "1234", rpId: "example.com")
        #expect(status == 0)
        let t = try #require(token)
        #expect(t.count == 32)
        #expect(await call(a, 0x01, makeCredential(t, proto, credProtect: 3)).0 == 0)
        // The token's mc/ga permissions are used up by the request.
        #expect(await call(a, 0x02, getAssertion(t, proto)).0 == 0x33)
        // A new token (legacy getPinToken: mc and ga, bound to the first rpId used).
        let t2 = try #require(try await pinToken(a, proto, pin: "1234", permissions: nil).1)
        let (s, r) = await call(a, 0x02, getAssertion(t2, proto))
        #expect(s == 0)
        #expect(r?[4]?["name"] == "alice", "user fields with UV")
        #expect(backend.state.withLock { $0.verified } == [true, true])
        // Without UV the level-3 credential is not usable.
        #expect(await call(a, 0x02, getAssertion(nil, proto)).0 == 0x2E)
    }

    @Test func tokenIsBoundToItsRpIdAndPermissions() async throws {
        let (a, _) = authenticator()
        let t = try #require(try await pinToken(a, .two, pin: "1234", permissions: 2, rpId: "example.com").1)
        #expect(await call(a, 0x01, makeCredential(t, .two)).0 == 0x33, "no mc permission")
        #expect(await call(a, 0x02, getAssertion(t, .two, rpId: "other.example")).0 == 0x33, "other rpId")
        #expect(await call(a, 0x02, getAssertion(t, .one)).0 == 0x33, "other protocol")
        var forged = t
        forged[0] ^= 1
        #expect(await call(a, 0x02, getAssertion(forged, .two)).0 == 0x33)
        #expect(await call(a, 0x02, getAssertion(t, .two)).0 == 0x2E, "verified; no credential")
        // Permissions the authenticator does not grant.
        #expect(try await pinToken(a, .two, pin: "1234", permissions: 0x08).0 == 0x40)
        #expect(try await pinToken(a, .two, pin: "1234", permissions: 0x20).0 == 0x40)
        #expect(try await pinToken(a, .two, pin: "1234", permissions: 0).0 == 0x02)
    }

    @Test func discoverableCredentialsNeedUserVerification() async throws {
        let (a, backend) = authenticator()
        // makeCredUvNotRqd covers non-discoverable credentials only (CTAP 2.1 §6.1.2).
        #expect(await call(a, 0x01, makeCredential(nil, .two)).0 == 0x36)
        #expect(backend.state.withLock { $0.credentials.isEmpty })
        #expect(await call(a, 0x01, makeCredential(nil, .two, discoverable: false)).0 == 0)
        let t = try #require(try await pinToken(a, .two, pin: "1234", permissions: 1, rpId: "example.com").1)
        #expect(await call(a, 0x01, makeCredential(t, .two)).0 == 0)
        #expect(backend.state.withLock { $0.credentials.count } == 2)
    }

    @Test func silentPreflightKeepsTheGetAssertionPermission() async throws {
        let (a, backend) = authenticator()
        #expect(await call(a, 0x01, makeCredential(nil, .two, discoverable: false)).0 == 0)
        let id = try #require(backend.state.withLock { $0.credentials.last?.id })
        let t = try #require(try await pinToken(a, .two, pin: "1234", permissions: 2, rpId: "example.com").1)
        func assertion(up: Bool) -> CBORValue {
            .map([
                (1, "example.com"), (2, .byteString(cdh)), (3, [["id": .byteString(id), "type": "public-key"]]),
                (5, ["up": .bool(up)]), (6, .byteString(PINUVAuthProtocol.two.authenticate(key: t, cdh))), (7, 2),
            ])
        }
        // python-fido2's pre-flight over an allowList (up: false), then the real request, then the token is used up.
        #expect(await call(a, 0x02, assertion(up: false)).0 == 0)
        #expect(await call(a, 0x02, assertion(up: true)).0 == 0)
        #expect(await call(a, 0x02, assertion(up: true)).0 == 0x33)
    }

    @Test func wrongPINsCountAndBlockUntilPowerCycle() async throws {
        let (a, backend) = authenticator()
        let keyBefore = await call(a, 0x06, [1: 2, 2: 2]).1?[1]
        #expect(try await pinToken(a, .two, pin: "0000").0 == 0x31)
        // A wrong PIN makes a new key agreement key.
        let keyAfter = await call(a, 0x06, [1: 2, 2: 2]).1?[1]
        #expect(keyBefore != nil && keyAfter != nil && keyBefore != keyAfter)
        #expect(try await pinToken(a, .one, pin: "0001").0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "0002").0 == 0x34, "third in a row")
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0x34, "blocked until power cycle, even the right PIN")
        #expect(backend.state.withLock { $0.pinTries.count } == 3, "one token try per wrong PIN, none while blocked")
        let retries = await call(a, 0x06, [1: 2, 2: 1]).1
        #expect(retries?[3] == 5 && retries?[4] == true)
    }

    /// Three wrong PINs from one uid block ClientPIN for that uid only (before, for every client until a restart);
    /// each wrong PIN is still one try on the token's shared counter.
    @Test func wrongPINsBlockOnlyTheirUid() async throws {
        let (a, backend) = authenticator()
        let alice = CTAP2Session(connection: 1, channel: 1, uid: 1000)
        let bob = CTAP2Session(connection: 2, channel: 2, uid: 1001)
        let bobAgain = CTAP2Session(connection: 3, channel: 3, uid: 1001)
        for pin in ["0000", "0001"] { #expect(try await pinToken(a, .two, pin: pin, from: alice).0 == 0x31) }
        #expect(try await pinToken(a, .two, pin: "0002", from: alice).0 == 0x34)
        #expect(try await pinToken(a, .two, pin: "1234", from: alice).0 == 0x34, "alice stays blocked")
        #expect(await call(a, 0x06, [1: 2, 2: 1], from: alice).1?[4] == true)
        #expect(await call(a, 0x06, [1: 2, 2: 1], from: bob).1?[4] == false)
        #expect(try await pinToken(a, .two, pin: "1234", permissions: nil, from: bob).0 == 0, "getPinToken")
        #expect(try await pinToken(a, .one, pin: "1234", from: bobAgain).0 == 0)
        // bob's own mismatches count for bob, on any of his connections.
        #expect(try await pinToken(a, .two, pin: "0000", from: bob).0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "0000", from: bobAgain).0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "0000", from: bob).0 == 0x34)
        #expect(try await pinToken(a, .two, pin: "1234", from: bobAgain).0 == 0x34)
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0, "a client without a uid is not blocked")
        #expect(backend.state.withLock { $0.pinTries.count } == 9)
    }

    @Test func blockedTokenAndBackoffAreNotWrongPINs() async throws {
        let (a, backend) = authenticator()
        // The token refuses to spend a try (locked, final try): PIN_BLOCKED, not counted, same key agreement key.
        backend.state.withLock { $0.pinAnswer = CTAP2Error(.pinBlocked, "final try") }
        let keyBefore = await call(a, 0x06, [1: 2, 2: 2]).1?[1]
        for _ in 0..<3 { #expect(try await pinToken(a, .two, pin: "1234").0 == 0x32) }
        #expect(await call(a, 0x06, [1: 2, 2: 2]).1?[1] == keyBefore)
        // The caller's back-off: PIN_AUTH_BLOCKED for this request only, no power cycle needed.
        backend.state.withLock { $0.pinAnswer = CTAP2Error(.pinAuthBlocked, "back-off") }
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0x34)
        #expect(await call(a, 0x06, [1: 2, 2: 1]).1?[4] == false)
        backend.state.withLock { $0.pinAnswer = nil }
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0)
    }

    @Test func rightPINResetsTheCount() async throws {
        let (a, _) = authenticator()
        #expect(try await pinToken(a, .two, pin: "0000").0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "0000").0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0)
        #expect(try await pinToken(a, .two, pin: "0000").0 == 0x31)
        #expect(try await pinToken(a, .two, pin: "1234").0 == 0)
    }

    func changePIN(_ a: CTAP2Authenticator, _ proto: PINUVAuthProtocol, from old: String, to new: [UInt8])
        async throws -> UInt8
    {
        let (cose, shared) = try await encapsulate(a, proto)
        let newPinEnc = try proto.encrypt(key: shared, new + [UInt8](repeating: 0, count: 64 - new.count))
        let pinHashEnc = try proto.encrypt(key: shared, pinHash(old))
        return await call(
            a, 0x06,
            [
                1: CBORValue(proto.rawValue), 2: 4, 3: cose,
                4: .byteString(proto.authenticate(key: shared, newPinEnc + pinHashEnc)),
                5: .byteString(newPinEnc), 6: .byteString(pinHashEnc),
            ]
        ).0
    }

    @Test(arguments: PINUVAuthProtocol.allCases) func changePIN(proto: PINUVAuthProtocol) async throws {
        let (a, backend) = authenticator()
        #expect(try await changePIN(a, proto, from: "1234", to: Array("123".utf8)) == 0x37, "too short")
        #expect(backend.state.withLock { $0.pinTries.isEmpty }, "a refused new PIN costs no token try")
        #expect(try await changePIN(a, proto, from: "9999", to: Array("5678".utf8)) == 0x31)
        #expect(try await changePIN(a, proto, from: "1234", to: Array("5678".utf8)) == 0)
        #expect(backend.state.withLock { $0.pinHash } == pinHash("5678"))
        #expect(try await pinToken(a, proto, pin: "5678").0 == 0)
        // setPIN: the token always has a PIN.
        #expect(await call(a, 0x06, [1: CBORValue(proto.rawValue), 2: 3]).0 == 0x30)
    }

    @Test func emptyPinUvAuthParamAsksPresenceThenPinInvalid() async throws {
        let (a, backend) = authenticator()
        let probe: CBORValue = [
            1: .byteString(cdh), 2: ["id": "example.com"], 3: ["id": .byteString([1])],
            4: [["alg": CBORValue(-7), "type": "public-key"]], 8: .byteString([]), 9: 2,
        ]
        #expect(await call(a, 0x01, probe).0 == 0x31)
        #expect(backend.state.withLock { $0.presence.count } == 1)
        #expect(await call(a, 0x02, getAssertion(nil, .two)).0 == 0x2E)
        #expect(await call(a, 0x06, [1: 3, 2: 2]).0 == 0x02, "unknown protocol")
        #expect(await call(a, 0x06, [1: 2, 2: 0x42]).0 == 0x3E, "unknown subcommand")
    }

    @Test func withoutClientPINNothingChanges() async throws {
        let backend = Backend()
        let a = CTAP2Authenticator(
            backend: backend, info: .init(aaguid: [UInt8](repeating: 7, count: 16), maxMessageSize: 7609))
        #expect(await a.handle([0x06] + ([1: 2, 2: 1] as CBORValue).encodedWithDistinctKeys()) == [0x01])
        #expect(await call(a, 0x02, getAssertion([UInt8](repeating: 1, count: 32), .two)).0 == 0x33)
    }
}

/// credentialManagement (§6.8) with a cm pinUvAuthToken, over the in-memory backend.
struct CredentialManagementTests {
    let pins = ClientPINTests()

    func cm(
        _ a: CTAP2Authenticator, _ token: [UInt8]?, _ sub: Int, _ params: CBORValue? = nil,
        proto: PINUVAuthProtocol = .two, from session: CTAP2Session = .local
    ) async -> (UInt8, CBORValue?) {
        var m: [(key: CBORValue, value: CBORValue)] = [(1, CBORValue(sub))]
        if let params { m.append((2, params)) }
        if let token {
            let message = [UInt8(sub)] + (params?.encodedWithDistinctKeys() ?? [])
            m += [(3, CBORValue(proto.rawValue)), (4, .byteString(proto.authenticate(key: token, message)))]
        }
        return await pins.call(a, 0x0A, .map(m), from: session)
    }

    func rpHash(_ rp: String) -> [UInt8] { Array(SHA256.hash(data: Array(rp.utf8))) }

    @Test func enumerateUpdateAndDelete() async throws {
        let (a, backend) = pins.authenticator()
        for (rp, user) in [("a.example", 1), ("b.example", 2), ("b.example", 3)] as [(String, UInt8)] {
            // Discoverable credentials need UV once a PIN is set: a token with the mc permission for each.
            let mc = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 1, rpId: rp).1)
            #expect(
                await pins.call(
                    a, 0x01,
                    [
                        1: .byteString(pins.cdh), 2: ["id": .textString(rp)],
                        3: ["id": .byteString([user]), "name": .textString("u\(user)")],
                        4: [["alg": CBORValue(-7), "type": "public-key"]], 7: ["rk": true],
                        8: .byteString(PINUVAuthProtocol.two.authenticate(key: mc, pins.cdh)), 9: 2,
                    ]
                ).0 == 0)
        }
        let info = try CBORValue(decoding: Array(await a.handle([0x04]).dropFirst()))
        #expect(info[4]?["credMgmt"] == true)
        #expect(await cm(a, nil, 1).0 == 0x36, "no pinUvAuthParam")
        let mcga = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 3).1)
        #expect(await cm(a, mcga, 1).0 == 0x33, "no cm permission")
        let t = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 4).1)
        let meta = await cm(a, t, 1)
        #expect(meta.0 == 0 && meta.1?[1] == 3)
        let rps = await cm(a, t, 2)
        #expect(rps.1?[3]?["id"] == "b.example" && rps.1?[5] == 2 && rps.1?[4] == .byteString(rpHash("b.example")))
        #expect(await cm(a, nil, 3).1?[3]?["id"] == "a.example")
        #expect(await cm(a, nil, 3).0 == 0x30)
        let creds = await cm(a, t, 4, [1: .byteString(rpHash("b.example"))])
        #expect(creds.0 == 0 && creds.1?[9] == 2 && creds.1?[6]?["id"] == .byteString([3]))
        #expect(creds.1?[8]?[3] == CBORValue(-7) && creds.1?[10] == 1)
        #expect(await cm(a, nil, 5).1?[6]?["id"] == .byteString([2]))
        #expect(await cm(a, nil, 5).0 == 0x30)
        #expect(await cm(a, t, 4, [1: .byteString(rpHash("none.example"))]).0 == 0x2E)
        let id2 = backend.state.withLock { $0.credentials[1].id }
        let descriptor: CBORValue = ["id": .byteString(id2), "type": "public-key"]
        #expect(await cm(a, t, 7, [2: descriptor, 3: ["id": .byteString([9])]]).0 == 0x02, "another user id")
        #expect(await cm(a, t, 7, [2: descriptor, 3: ["id": .byteString([2]), "name": "renamed"]]).0 == 0)
        #expect(backend.state.withLock { $0.credentials[1].user.name } == "renamed")
        #expect(await cm(a, t, 6, [2: descriptor]).0 == 0)
        #expect(backend.state.withLock { $0.credentials.map(\.id) }.contains(id2) == false)
        #expect(await cm(a, t, 6, [2: descriptor]).0 == 0x2E)
        // A cm token bound to another RP does not reach this one's credentials.
        let bound = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 4, rpId: "a.example").1)
        #expect(await cm(a, bound, 4, [1: .byteString(rpHash("b.example"))]).0 == 0x33)
        #expect(await cm(a, bound, 1).0 == 0x33)
        #expect(await cm(a, bound, 4, [1: .byteString(rpHash("a.example"))]).0 == 0)
    }

    /// enumerateRPsGetNextRP and enumerateCredentialsGetNextCredential continue only the enumeration of their own
    /// channel; another channel gets NOT_ALLOWED and does not end it (before, any channel continued it).
    @Test func enumerationBelongsToItsChannel() async throws {
        let (a, _) = pins.authenticator()
        let mine = CTAP2Session(connection: 1, channel: 0xA, uid: 1000)
        let other = CTAP2Session(connection: 2, channel: 0xB, uid: 1001)
        for (rp, user) in [("a.example", 1), ("b.example", 2), ("b.example", 3)] as [(String, UInt8)] {
            let mc = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 1, rpId: rp).1)
            #expect(
                await pins.call(
                    a, 0x01,
                    [
                        1: .byteString(pins.cdh), 2: ["id": .textString(rp)],
                        3: ["id": .byteString([user]), "name": .textString("u\(user)")],
                        4: [["alg": CBORValue(-7), "type": "public-key"]], 7: ["rk": true],
                        8: .byteString(PINUVAuthProtocol.two.authenticate(key: mc, pins.cdh)), 9: 2,
                    ]
                ).0 == 0)
        }
        let t = try #require(try await pins.pinToken(a, .two, pin: "1234", permissions: 4, from: mine).1)
        #expect(await cm(a, t, 2, from: mine).1?[5] == 2)
        #expect(await cm(a, nil, 3, from: other).0 == 0x30)
        #expect(await pins.call(a, 0x04, [:], from: other).0 == 0)
        #expect(await cm(a, nil, 3, from: mine).1?[3]?["id"] == "a.example")
        let creds = await cm(a, t, 4, [1: .byteString(rpHash("b.example"))], from: mine)
        #expect(creds.1?[9] == 2)
        #expect(await cm(a, nil, 5, from: other).0 == 0x30)
        #expect(await cm(a, nil, 5, from: mine).1?[6]?["id"] == .byteString([2]))
    }
}
