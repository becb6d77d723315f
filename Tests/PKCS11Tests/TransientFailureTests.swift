import FoundationEssentials
@_spi(Testing) import PKCS11
import TesseraCore
import TesseraTestSupport
import Testing

/// Object creation that fails now and then (SoftHSM2 2.6.1's `CKR_GENERAL_ERROR`, SoftHSMv2 #573), on the real
/// SoftHSM2 behind a module that makes a call with a `CKA_ID` "failN-…" fail N times after SoftHSM2 made its objects
/// (Fixtures/faulty-pkcs11.c, compiled here with the toolchain's clang).
@Suite struct TransientFailureTests {
    /// A provider of the faulty module over the fixture's SoftHSM2, built once per process.
    private static let faultyProvider = Task { () -> Result<PKCS11Provider, TesseraError> in
        do throws(TesseraError) {
            let fixture = try await SoftHSMFixture.shared()
            let source = String(#filePath).split(separator: "/").dropLast().joined(separator: "/")
            let library = Scratch.directory("faulty-pkcs11") + "/libfaulty-pkcs11.so"
            let built = try await Subprocess.run(
                "clang",
                [
                    "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I/usr/include/p11-kit-1",
                    "-DTARGET_MODULE=\"\(fixture.modulePath)\"", "/\(source)/Fixtures/faulty-pkcs11.c", "-o", library,
                ])
            guard built.status == 0 else { return .failure(.internalError("clang: \(built.output)")) }
            return .success(try PKCS11Provider(modulePaths: [library]))
        } catch {
            return .failure(error)
        }
    }

    /// A spare token, logged in, as the faulty module shows it.
    private static func faultyToken() async throws -> PKCS11Token {
        let label = try await SoftHSMEnvironment.get().fixture.claimSpareToken()
        let provider = try await faultyProvider.value.get()
        let token = try #require(provider.tokens().first { $0.info.label == label })
        try await token.login(pin: SoftHSMFixture.defaultPIN)
        return token
    }

    private static func publicKeys(_ token: PKCS11Token, id: [UInt8]) async throws -> [[UInt8]] {
        try await token.publicKeysP256().filter { $0.id == id }.map(\.point)
    }

    @Test func aKeyPairIsMadeWhenTheFirstTwoCallsFailAndNothingTheyLeftStays() async throws {
        let token = try await Self.faultyToken()
        let id = Array("fail2-pair".utf8)
        let point = try await token.generateP256KeyPair(id: id, label: "tessera:transient")
        #expect(try await Self.publicKeys(token, id: id) == [point])
        let signature = try await token.signP256(keyID: id, message: [7])
        #expect(try await OpenSSLVerifier.verify(point: point, message: [7], rawSignature: signature))
    }

    @Test func aThirdFailureIsTheCallersErrorAndLeavesNothing() async throws {
        let token = try await Self.faultyToken()
        let id = Array("fail3-pair".utf8)
        let thrown = await #expect(throws: TesseraError.self) {
            _ = try await token.generateP256KeyPair(id: id, label: "tessera:transient")
        }
        #expect(thrown?.code == .tokenError)
        #expect("\(thrown.map { "\($0)" } ?? "")".contains("CKR_GENERAL_ERROR"))
        #expect(try await Self.publicKeys(token, id: id).isEmpty)
        #expect(try await !token.hasKeyPair(id: id))
    }

    @Test func objectsThatWereThereBeforeAreNeverTouched() async throws {
        let token = try await Self.faultyToken()
        let id = Array("fail1-shared-id".utf8)
        // Made through SoftHSM2 directly (the faulty module would fail it), before the failing call.
        let direct = try await SoftHSMEnvironment.token(label: token.info.label)
        try await direct.login(pin: SoftHSMFixture.defaultPIN)
        let earlier = try await direct.generateP256KeyPair(id: id, label: "tessera:earlier")
        let later = try await token.generateP256KeyPair(id: id, label: "tessera:later")
        #expect(try await Set(Self.publicKeys(token, id: id)) == [earlier, later])
    }

    @Test func aSecretKeyIsMadeWhenTheFirstCallFails() async throws {
        let token = try await Self.faultyToken()
        guard await token.supportsHMACSecrets() else {
            Issue.record("SoftHSM2 offers CKM_GENERIC_SECRET_KEY_GEN and CKM_SHA256_HMAC")
            return
        }
        let id = Array("fail1-secret".utf8)
        try await token.generateHMACSecret(id: id, label: "tessera:transient")
        #expect(try await token.hmacSHA256(secretKeyID: id, data: [1]).count == 32)
    }
}
