import Crypto
import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@_spi(Testing) @_spi(Benchmarks) @testable import PKCS11

@Suite("Pure helpers")
struct HelperTests {
    @Test func ecPointUnwrapping() {
        let point: [UInt8] = [0x04] + [UInt8](repeating: 0xAB, count: 64)
        #expect(P256DER.uncompressedPoint(fromECPoint: point) == point)
        #expect(P256DER.uncompressedPoint(fromECPoint: [0x04, 0x41] + point) == point)
        #expect(P256DER.uncompressedPoint(fromECPoint: [0x04, 0x81, 0x41] + point) == point)
        #expect(P256DER.uncompressedPoint(fromECPoint: [0x04, 0x40] + point.dropLast()) == nil)
        #expect(P256DER.uncompressedPoint(fromECPoint: [0x03, 0x41] + point) == nil)
    }

    @Test func stableIDIgnoresTheSlot() {
        let a = TokenInfo.stableID(
            moduleFileName: "libsofthsm2.so", manufacturer: "SoftHSM project",
            model: "SoftHSM v2", serial: "0dd27affac03541d", label: "T1")
        let b = TokenInfo.stableID(
            moduleFileName: "libsofthsm2.so", manufacturer: "SoftHSM project",
            model: "SoftHSM v2", serial: "0dd27affac03541e", label: "T1")
        #expect(a.hasPrefix("p11-") && a.count == 20)
        #expect(a != b)
        #expect(
            a
                == TokenInfo.stableID(
                    moduleFileName: "libsofthsm2.so", manufacturer: "SoftHSM project",
                    model: "SoftHSM v2", serial: "0dd27affac03541d", label: "T1"))
    }
}

@Suite("PKCS#11 against SoftHSM2", .serialized)
struct SoftHSMTests {
    @Test func enumeratesTheFixtureTokenByLabel() async throws {
        let env = try await SoftHSMEnvironment.get()
        let tokens = env.provider.tokens()
        let token = try #require(tokens.first { $0.info.label == env.fixture.label })
        #expect(token.id.hasPrefix("p11-"))
        #expect(token.id.count == 20)
        #expect(token.id.dropFirst(4).allSatisfy { $0.isHexDigit && !$0.isUppercase })
        #expect(token.info.manufacturer == "SoftHSM project")
        #expect(token.info.model == "SoftHSM v2")
        #expect(!token.info.serial.isEmpty && !token.info.serial.hasSuffix(" "))
        #expect(token.info.modulePath.hasSuffix("libsofthsm2.so"))
        let again = try #require(env.provider.tokens().first { $0.id == token.id })
        #expect(again === token)
    }

    @Test func tokenFlagsAndPoolSize() async throws {
        let token = try await SoftHSMEnvironment.token(label: SoftHSMFixture.defaultLabel)
        let flags = token.info.flags
        #expect(flags.loginRequired)
        #expect(flags.userPinInitialized)
        #expect(flags.tokenInitialized)
        #expect(!flags.userPinLocked)
        #expect(!flags.userPinFinalTry)
        #expect(!flags.isHardwareSlot)
        #expect(token.sessionCapacity == 8)
    }

    @Test func distinctTokensHaveDistinctIDs() async throws {
        let env = try await SoftHSMEnvironment.get()
        let tokens = env.provider.tokens().filter { $0.info.flags.tokenInitialized }
        #expect(tokens.count >= SoftHSMFixture.sharedSpareTokens + 1)
        #expect(Set(tokens.map(\.id)).count == tokens.count)
        #expect(Set(tokens.map(\.slotID)).count == tokens.count)
    }

    @Test func wrongPINThenCorrectPIN() async throws {
        let token = try await SoftHSMEnvironment.freshToken("login")
        #expect(await token.isLoggedIn == false)
        do {
            try await token.login(pin: "000000")
            Issue.record("login with a wrong PIN succeeded")
        } catch {
            #expect(error.code == .pinInvalid)
            #expect(!error.message.contains("000000"))
            #expect(error.details["retriesLeft"] == nil)
        }
        #expect(await token.isLoggedIn == false)
        try await token.login(pin: SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)
        try await token.login(pin: SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)
    }

    @Test func theLoginPINIsKnownWithoutATokenCallUntilLogout() async throws {
        let token = try await SoftHSMEnvironment.freshToken("loginpin")
        #expect(!token.isLoginPIN(SoftHSMFixture.defaultPIN))
        try await token.login(pin: SoftHSMFixture.defaultPIN)
        #expect(token.isLoginPIN(SoftHSMFixture.defaultPIN))
        #expect(!token.isLoginPIN("000000"))
        #expect(!token.isLoginPIN(SoftHSMFixture.defaultPIN + "0"))
        try await token.logout()
        #expect(!token.isLoginPIN(SoftHSMFixture.defaultPIN))
    }

    /// What the signing path's PIN shortcut relies on: a token that lost the login answers PIN_REQUIRED (even with
    /// the key handle cached), and `verifyPIN` with the same PIN logs in again.
    @Test func aTokenThatLostItsLoginAnswersPINRequiredUntilVerifyPINLogsInAgain() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("lostlogin")
        let keyID: [UInt8] = Array("lost-login".utf8)
        let point = try await token.generateP256KeyPair(id: keyID, label: "tessera:lost")
        _ = try await token.signP256(keyID: keyID, message: [1])
        try await token.loseLoginForTesting()
        #expect(token.isLoginPIN(SoftHSMFixture.defaultPIN))
        #expect(await errorCode { try await token.signP256(keyID: keyID, message: [1]) } == .pinRequired)
        try await token.verifyPIN(SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)
        let signature = try await token.signP256(keyID: keyID, message: [2])
        #expect(try await OpenSSLVerifier.verify(point: point, message: [2], rawSignature: signature))
    }

    /// Issue #36: SoftHSM2 2.6.1 answers CKR_GENERAL_ERROR now and then to C_GenerateKeyPair made from several
    /// sessions of one token at once (its object store; SoftHSMv2 issue #573). The token makes objects one at a time.
    @Test func keyPairsMadeAtOnceFromEverySessionOfOneTokenAllSucceed() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("concurrent-keygen")
        let failures = await withTaskGroup(of: String?.self) { group in
            for i in 0..<160 {
                group.addTask {
                    do {
                        let id = Array("concurrent-\(i)".utf8)
                        _ = try await token.generateP256KeyPair(id: id, label: "tessera:concurrent")
                        _ = try await token.deleteKeyPair(id: id)
                        return nil
                    } catch { return "\(i): \(error)" }
                }
            }
            var out: [String] = []
            for await f in group { if let f { out.append(f) } }
            return out
        }
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test func signingNeedsLogin() async throws {
        let token = try await SoftHSMEnvironment.freshToken("nologin")
        #expect(await errorCode { try await token.signP256(keyID: [1, 2, 3], message: [0]) } == .pinRequired)
        #expect(await errorCode { try await token.generateP256KeyPair(id: [1], label: "x") } == .pinRequired)
    }

    @Test func generateSignAndVerifyWithOpenSSL() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("sign")
        let keyID: [UInt8] = Array("credential-1".utf8)
        let point = try await token.generateP256KeyPair(id: keyID, label: "tessera:example.org")
        #expect(point.count == 65)
        #expect(point[0] == 0x04)
        #expect(try await token.publicKeyP256(id: keyID) == point)

        let message = Array("authenticatorData || clientDataHash".utf8)
        let signature = try await token.signP256(keyID: keyID, message: message)
        #expect(signature.count == 64)
        #expect(try await OpenSSLVerifier.verify(point: point, message: message, rawSignature: signature))
        #expect(try await !OpenSSLVerifier.verify(point: point, message: message + [0], rawSignature: signature))

        let viaDigest = try await token.signP256(
            keyID: keyID, message: message, digest: Array(SHA256.hash(data: message)))
        #expect(try await OpenSSLVerifier.verify(point: point, message: message, rawSignature: viaDigest))
        #expect(viaDigest != signature)
    }

    @Test func privateKeyIsSensitiveAndNotExtractable() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("attrs")
        let keyID: [UInt8] = [0xAA, 0xBB]
        _ = try await token.generateP256KeyPair(id: keyID, label: "tessera:attrs")
        let attributes = try await token.privateKeyAttributes(id: keyID)
        #expect(attributes.label == "tessera:attrs")
        #expect(attributes.isTokenObject == true)
        #expect(attributes.isPrivate == true)
        #expect(attributes.sensitive == true)
        #expect(attributes.extractable == false)
        #expect(attributes.alwaysSensitive == true)
        #expect(attributes.neverExtractable == true)
        #expect(attributes.canSign == true)
        #expect(!attributes.valueReadable)
        #expect(attributes.valueReadResult == "CKR_ATTRIBUTE_SENSITIVE")
    }

    @Test func deleteRemovesBothObjects() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("delete")
        let keep: [UInt8] = [1]
        let gone: [UInt8] = [2]
        _ = try await token.generateP256KeyPair(id: keep, label: "tessera:keep")
        _ = try await token.generateP256KeyPair(id: gone, label: "tessera:gone")
        _ = try await token.signP256(keyID: gone, message: [1, 2, 3])
        #expect(try await token.hasKeyPair(id: gone))
        #expect(try await token.deleteKeyPair(id: gone))
        #expect(try await !token.hasKeyPair(id: gone))
        #expect(try await token.hasKeyPair(id: keep))
        #expect(await errorCode { try await token.publicKeyP256(id: gone) } == .passkeyNotFound)
        #expect(await errorCode { try await token.signP256(keyID: gone, message: [1, 2, 3]) } == .passkeyNotFound)
        #expect(try await !token.deleteKeyPair(id: gone))
        #expect(try await token.keyIDs(labelPrefix: nil) == [keep])
    }

    @Test func hmacSecretsAreMadeAndUsedOnTheToken() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("hmac")
        #expect(await token.supportsHMACSecrets())
        try await token.generateHMACSecret(id: [1, 1], label: "tessera:h hmac-secret")
        try await token.generateHMACSecret(id: [1, 2], label: "tessera:h hmac-secret-uv")
        _ = try await token.generateP256KeyPair(id: [1], label: "tessera:h")
        let salt = [UInt8](repeating: 7, count: 32)
        let mac = try await token.hmacSHA256(secretKeyID: [1, 1], data: salt)
        #expect(mac.count == 32)
        #expect(try await token.hmacSHA256(secretKeyID: [1, 1], data: salt) == mac)
        #expect(try await token.hmacSHA256(secretKeyID: [1, 2], data: salt) != mac)
        #expect(try await token.hmacSHA256(secretKeyID: [1, 1], data: [UInt8](repeating: 8, count: 32)) != mac)
        // Secret keys are not EC keys: the key listings do not show them.
        #expect(try await token.keyIDs(labelPrefix: nil) == [[1]])
        #expect(try await token.deleteSecretKeys(ids: [[1, 1], [1, 2]]))
        #expect(await errorCode { try await token.hmacSHA256(secretKeyID: [1, 1], data: salt) } == .passkeyNotFound)
        #expect(try await !token.deleteSecretKeys(ids: [[1, 1]]))
        #expect(try await token.hasKeyPair(id: [1]))
        try await token.logout()
        #expect(await errorCode { try await token.hmacSHA256(secretKeyID: [1, 2], data: salt) } == .pinRequired)
    }

    @Test func keyIDsFilterByLabelPrefix() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("list")
        _ = try await token.generateP256KeyPair(id: [1], label: "tessera:a")
        _ = try await token.generateP256KeyPair(id: [2], label: "tessera:b")
        _ = try await token.generateP256KeyPair(id: [3], label: "other")
        #expect(Set(try await token.keyIDs(labelPrefix: "tessera:")) == [[1], [2]])
        #expect(Set(try await token.keyIDs(labelPrefix: nil)) == [[1], [2], [3]])
        #expect(try await token.keyIDs(labelPrefix: "none").isEmpty)
    }

    @Test func unknownKeyIsPasskeyNotFound() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("unknown")
        #expect(await errorCode { try await token.signP256(keyID: [9, 9, 9], message: [0]) } == .passkeyNotFound)
        #expect(try await !token.hasKeyPair(id: [9, 9, 9]))
    }

    @Test func sixteenConcurrentSigners() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("concurrent")
        let keyID: [UInt8] = [0x16]
        let point = try await token.generateP256KeyPair(id: keyID, label: "tessera:concurrent")
        let results = try await withThrowingTaskGroup(of: (Int, [[UInt8]]).self) { group in
            for task in 0..<16 {
                group.addTask {
                    var signatures: [[UInt8]] = []
                    for i in 0..<25 {
                        signatures.append(try await token.signP256(keyID: keyID, message: [UInt8(task), UInt8(i)]))
                    }
                    return (task, signatures)
                }
            }
            var all: [(Int, [[UInt8]])] = []
            for try await r in group { all.append(r) }
            return all
        }
        #expect(results.count == 16)
        #expect(results.allSatisfy { $0.1.count == 25 && $0.1.allSatisfy { $0.count == 64 } })
        for (task, signatures) in results where task % 4 == 0 {
            #expect(
                try await OpenSSLVerifier.verify(
                    point: point, message: [UInt8(task), 24], rawSignature: signatures[24]))
        }
    }

    @Test func verifyPINComparesThenFallsBackToOneLogin() async throws {
        let token = try await SoftHSMEnvironment.freshToken("verify")
        try await token.verifyPIN(SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)
        let keyID: [UInt8] = [7]
        _ = try await token.generateP256KeyPair(id: keyID, label: "tessera:uv")
        try await token.verifyPIN(SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)

        #expect(await errorCode { try await token.verifyPIN("999999") } == .pinInvalid)
        #expect(await token.isLoggedIn == false)
        #expect(await errorCode { try await token.signP256(keyID: keyID, message: [1]) } == .pinRequired)

        try await token.verifyPIN(SoftHSMFixture.defaultPIN)
        #expect(await token.isLoggedIn)
        _ = try await token.signP256(keyID: keyID, message: [1])
    }

    /// The PIN rules' hooks: asked before every C_Login (never when the recorded PIN matches), told the outcome;
    /// a refusal leaves the token untouched.
    @Test func verifyPINAsksBeforeEachLoginAndHonoursARefusal() async throws {
        let token = try await SoftHSMEnvironment.freshToken("hooks")
        let asked = Locked(0), outcomes = Locked<[TesseraError.Code?]>([])
        let refuse: @Sendable (Int?) throws(TesseraError) -> Void = { _ throws(TesseraError) in
            throw TesseraError(.pinFinalTryProtected, "refused by the test")
        }
        #expect(
            await errorCode { try await token.verifyPIN(SoftHSMFixture.defaultPIN, beforeTry: refuse) }
                == .pinFinalTryProtected)
        #expect(await token.isLoggedIn == false)

        let count: @Sendable (Int?) throws(TesseraError) -> Void = { retries throws(TesseraError) in
            #expect(retries == nil)  // SoftHSM2 never reports CKF_USER_PIN_FINAL_TRY
            asked.withLock { $0 += 1 }
        }
        let record: @Sendable (TesseraError?) -> Void = { e in outcomes.withLock { $0.append(e?.code) } }
        try await token.verifyPIN(SoftHSMFixture.defaultPIN, beforeTry: count, afterTry: record)
        try await token.verifyPIN(SoftHSMFixture.defaultPIN, beforeTry: count, afterTry: record)  // matches: no login
        #expect(
            await errorCode { try await token.verifyPIN("999999", beforeTry: count, afterTry: record) } == .pinInvalid)
        #expect(asked.withLock { $0 } == 2)
        #expect(outcomes.withLock { $0 } == [nil, .pinInvalid])
    }

    @Test func logoutEndsTheLogin() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("logout")
        try await token.logout()
        #expect(await token.isLoggedIn == false)
        try await token.logout()
    }

    @Test func rawSignLoopMeasuresRate() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("raw")
        let keyID: [UInt8] = [0x42]
        _ = try await token.generateP256KeyPair(id: keyID, label: "tessera:raw")
        let rate = try await token.rawSignLoop(
            keyID: keyID, digest: Array(SHA256.hash(data: [1])), iterations: 400, sessions: 2)
        #expect(rate > 50)
        #expect(
            await errorCode {
                try await token.rawSignLoop(
                    keyID: [0x43], digest: Array(SHA256.hash(data: [1])), iterations: 10, sessions: 1)
            } == .passkeyNotFound)
    }

    @Test func p11KitRegistryFindsSoftHSM() async throws {
        let env = try await SoftHSMEnvironment.get()
        let provider = try PKCS11Provider(modulePaths: nil)
        let token = try #require(provider.tokens().first { $0.info.label == env.fixture.label })
        let byPath = try await SoftHSMEnvironment.token(label: env.fixture.label)
        #expect(token.info.serial == byPath.info.serial)
        #expect(token.id == byPath.id)
        provider.finalize()
        #expect(await errorCode { try await token.hasKeyPair(id: [1]) } == .shuttingDown)
        // The shared provider keeps working after another provider released the same module.
        #expect(try await !byPath.hasKeyPair(id: [0xFE]))
    }

    @Test func unloadableModuleIsATokenError() {
        #expect(throws: TesseraError.self) { try PKCS11Provider(modulePaths: ["/nonexistent/libnothing.so"]) }
        do {
            _ = try PKCS11Provider(modulePaths: ["/nonexistent/libnothing.so"])
        } catch {
            #expect(error.code == .tokenError)
        }
    }

    @Test func pooledSigningKeepsUpWithTheRawBaseline() async throws {
        let token = try await SoftHSMEnvironment.loggedInToken("speed")
        let keyID: [UInt8] = [0x5E]
        _ = try await token.generateP256KeyPair(id: keyID, label: "tessera:speed")
        let message: [UInt8] = Array(repeating: 7, count: 69)
        let digest = Array(SHA256.hash(data: message))
        let raw = try await token.rawSignLoop(
            keyID: keyID, digest: digest, iterations: 2_000,
            sessions: token.sessionCapacity)
        let tasks = 16, perTask = 125
        let clock = ContinuousClock()
        let elapsed = try await clock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<tasks {
                    group.addTask {
                        for _ in 0..<perTask {
                            _ = try await token.signP256(keyID: keyID, message: message, digest: digest)
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let pooled = Double(tasks * perTask) / seconds
        print(
            "PKCS11 throughput: raw \(Int(raw))/s over \(token.sessionCapacity) sessions, pooled \(Int(pooled))/s from \(tasks) tasks"
        )
        #expect(pooled > raw * 0.1)
    }
}
