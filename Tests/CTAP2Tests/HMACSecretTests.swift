import CBOR
import Crypto
import Testing

@testable import CTAP2

/// The hmac-secret extension (CTAP 2.1 §12.5) over the in-memory backend, whose CredRandoms are
/// SHA-256(credential id ‖ uv): the platform's side as python-fido2's `HmacSecretExtension` does it.
struct HMACSecretTests {
    typealias Backend = CTAP2AuthenticatorTests.MemoryBackend
    let pin = ClientPINTests()
    let cdh = [UInt8](repeating: 0xAB, count: 32)

    func makeCredential(hmacSecret: CBORValue?) -> CBORValue {
        var params: [(key: CBORValue, value: CBORValue)] = [
            (1, .byteString(cdh)), (2, ["id": "example.com"]), (3, ["id": .byteString([1]), "name": "alice"]),
            (4, [["alg": CBORValue(-7), "type": "public-key"]]),
        ]
        if let hmacSecret { params.append((6, ["credProtect": 1, "hmac-secret": hmacSecret])) }
        return .map(params)
    }

    /// The extension input for `salt` (the shared secret's encryption of it, and its MAC), with `tamper` applied
    /// to saltAuth.
    func input(
        _ a: CTAP2Authenticator, _ proto: PINUVAuthProtocol, salt: [UInt8], sendProtocol: Bool = true,
        tamper: Bool = false
    ) async throws -> (CBORValue, [UInt8]) {
        let (cose, shared) = try await pin.encapsulate(a, proto)
        let saltEnc = try proto.encrypt(key: shared, salt)
        var saltAuth = proto.authenticate(key: shared, saltEnc)
        if tamper { saltAuth[0] ^= 1 }
        var m: [(key: CBORValue, value: CBORValue)] = [
            (1, cose), (2, .byteString(saltEnc)), (3, .byteString(saltAuth)),
        ]
        if sendProtocol { m.append((4, CBORValue(proto.rawValue))) }
        return (.map(m), shared)
    }

    func getAssertion(_ id: [UInt8], hmacSecret: CBORValue?, up: Bool = true) -> CBORValue {
        var params: [(key: CBORValue, value: CBORValue)] = [
            (1, "example.com"), (2, .byteString(cdh)), (3, [["id": .byteString(id), "type": "public-key"]]),
        ]
        if let hmacSecret { params.append((4, ["hmac-secret": hmacSecret])) }
        if !up { params.append((5, ["up": false])) }
        return .map(params)
    }

    /// The extensions map at the end of the fake backend's authData (its first byte is the UP flag).
    func extensions(_ response: CBORValue?) throws -> CBORValue {
        let authData = try #require(response?[2]?.bytesValue)
        return try CBORValue(decoding: Array(authData.dropFirst()))
    }

    func expected(_ id: [UInt8], _ salts: [[UInt8]], uv: Bool = false) -> [UInt8] {
        salts.flatMap {
            Array(HMAC<SHA256>.authenticationCode(for: $0, using: Backend.credRandom(id, userVerified: uv)))
        }
    }

    @Test func makeCredentialOutputAndGetInfo() async throws {
        let (a, backend) = pin.authenticator()
        let info = try CBORValue(decoding: Array(await a.handle([0x04]).dropFirst()))
        #expect(info[2] == ["credProtect", "hmac-secret"])
        let (status, r) = await pin.call(a, 0x01, makeCredential(hmacSecret: true))
        #expect(status == 0)
        // The fake's authData is the credential id (16 bytes) ‖ extensions, in canonical order.
        let authData = try #require(r?[2]?.bytesValue)
        #expect(
            Array(authData.dropFirst(16))
                == CBORValue.map([("credProtect", 1), ("hmac-secret", true)]).encodedWithDistinctKeys())
        #expect(backend.state.withLock { $0.credentials.last?.hmacSecret } == true)
        // A store that cannot hold the keys: the credential is made without the output.
        backend.state.withLock { $0.hmacSupported = false }
        let (status2, r2) = await pin.call(a, 0x01, makeCredential(hmacSecret: true))
        #expect(status2 == 0)
        #expect(
            Array(try #require(r2?[2]?.bytesValue).dropFirst(16))
                == CBORValue.map([("credProtect", 1)]).encodedWithDistinctKeys())
        #expect(backend.state.withLock { $0.credentials.last?.hmacSecret } == false)
        #expect(await pin.call(a, 0x01, makeCredential(hmacSecret: "yes")).0 == CTAP2Status.cborUnexpectedType.rawValue)
    }

    @Test(arguments: PINUVAuthProtocol.allCases) func outputDecryptsToTheHMACOfTheSalts(proto: PINUVAuthProtocol)
        async throws
    {
        let (a, backend) = pin.authenticator()
        #expect(await pin.call(a, 0x01, makeCredential(hmacSecret: true)).0 == 0)
        let id = try #require(backend.state.withLock { $0.credentials.last?.id })
        let salt1 = [UInt8](repeating: 1, count: 32), salt2 = [UInt8](repeating: 2, count: 32)
        for salts in [[salt1], [salt1, salt2]] {
            let (ext, shared) = try await input(a, proto, salt: salts.flatMap { $0 })
            let (status, r) = await pin.call(a, 0x02, getAssertion(id, hmacSecret: ext))
            #expect(status == 0)
            let encrypted = try #require(try extensions(r)["hmac-secret"]?.bytesValue)
            #expect(try proto.decrypt(key: shared, encrypted) == expected(id, salts))
        }
        // Protocol 1 is the default.
        if proto == .one {
            let (ext, shared) = try await input(a, .one, salt: salt1, sendProtocol: false)
            let (_, r) = await pin.call(a, 0x02, getAssertion(id, hmacSecret: ext))
            let encrypted = try #require(try extensions(r)["hmac-secret"]?.bytesValue)
            #expect(try PINUVAuthProtocol.one.decrypt(key: shared, encrypted) == expected(id, [salt1]))
        }
    }

    @Test func getNextAssertionCarriesTheOutputOfEachCredential() async throws {
        let (a, backend) = pin.authenticator()
        for _ in 0..<2 {
            // Discoverable credentials need UV once a PIN is set.
            let mc = try #require(try await pin.pinToken(a, .two, pin: "1234", permissions: 1, rpId: "example.com").1)
            var params = makeCredential(hmacSecret: true).mapValue ?? []
            params += [(7, ["rk": true]), (8, .byteString(PINUVAuthProtocol.two.authenticate(key: mc, cdh))), (9, 2)]
            #expect(await pin.call(a, 0x01, .map(params)).0 == 0)
        }
        let ids = backend.state.withLock { $0.credentials.map(\.id) }
        let salt = [UInt8](repeating: 5, count: 32)
        let (ext, shared) = try await input(a, .two, salt: salt)
        let request: CBORValue = [1: "example.com", 2: .byteString(cdh), 4: ["hmac-secret": ext]]
        let (status, first) = await pin.call(a, 0x02, request)
        #expect(status == 0 && first?[5] == 2)
        let raw = await a.handle([0x08])
        #expect(raw.first == 0)
        let next = try CBORValue(decoding: Array(raw.dropFirst()))
        // Newest first.
        for (response, id) in [(first, ids[1]), (next, ids[0])] {
            let encrypted = try #require(try extensions(response)["hmac-secret"]?.bytesValue)
            #expect(try PINUVAuthProtocol.two.decrypt(key: shared, encrypted) == expected(id, [salt]))
        }
    }

    @Test func refusals() async throws {
        let (a, backend) = pin.authenticator()
        #expect(await pin.call(a, 0x01, makeCredential(hmacSecret: true)).0 == 0)
        let id = try #require(backend.state.withLock { $0.credentials.last?.id })
        let salt = [UInt8](repeating: 1, count: 32)
        let (bad, _) = try await input(a, .two, salt: salt, tamper: true)
        #expect(await pin.call(a, 0x02, getAssertion(id, hmacSecret: bad)).0 == CTAP2Status.pinAuthInvalid.rawValue)
        for length in [16, 48, 96] {
            let (ext, _) = try await input(a, .two, salt: [UInt8](repeating: 1, count: length))
            #expect(await pin.call(a, 0x02, getAssertion(id, hmacSecret: ext)).0 == CTAP2Status.invalidLength.rawValue)
        }
        let (ok, _) = try await input(a, .two, salt: salt)
        #expect(
            await pin.call(a, 0x02, getAssertion(id, hmacSecret: ok, up: false)).0
                == CTAP2Status.unsupportedOption.rawValue)
        #expect(
            await pin.call(a, 0x02, getAssertion(id, hmacSecret: [1: 2])).0 == CTAP2Status.cborUnexpectedType.rawValue)
        #expect(
            await pin.call(a, 0x02, getAssertion(id, hmacSecret: [2: .byteString(salt)])).0
                == CTAP2Status.missingParameter.rawValue)
        // No signature was made for any of them.
        #expect(backend.state.withLock { $0.signed.isEmpty })
    }

    @Test func credentialWithoutSecretAnswersWithoutOutput() async throws {
        let (a, backend) = pin.authenticator()
        #expect(await pin.call(a, 0x01, makeCredential(hmacSecret: nil)).0 == 0)
        let id = try #require(backend.state.withLock { $0.credentials.last?.id })
        let (ext, _) = try await input(a, .two, salt: [UInt8](repeating: 1, count: 32))
        let (status, r) = await pin.call(a, 0x02, getAssertion(id, hmacSecret: ext))
        #expect(status == 0)
        #expect(try #require(r?[2]?.bytesValue) == [1])
    }
}
