import APDU
import Crypto
import CryptoPrimitives
import Emulation
import FoundationEssentials
import PIV
import TesseraCore
import Testing

/// An in-process transport straight into an emulated card (no PC/SC), for protocol-level tests.
struct DirectPIVTransport: APDUTransport {
    let card: EmulatedPIVCard
    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] { await card.process(command) }
}

/// The PIV emulator driven by Tessera's own PIV protocol code (SP 800-73-4 command set).
@Suite struct PIVEmulatorTests {
    func fresh(serial: UInt32 = 7) async -> (EmulatedPIVCard, PIVApplication) {
        let card = EmulatedPIVCard(state: .factoryNew(serial: serial))
        await card.powerOn()
        return (card, PIVApplication(transport: DirectPIVTransport(card: card)))
    }

    @Test func selectAnswersTheApplicationPropertyTemplate() async throws {
        let (_, app) = await fresh()
        let apt = try await app.select()
        let items = try TLV.parseAll(apt)
        #expect(items.first(tag: 0x4F)?.value == Array(PIV.aid[5...]))
        #expect(try TLV.parseAll(items.first(tag: 0x79)!.value).first(tag: 0x4F)?.value == PIV.rid)
    }

    @Test func commandsBeforeSelectAreRefused() async throws {
        let (card, _) = await fresh()
        let r = try ResponseAPDU(parsing: await card.process([0x00, 0x20, 0x00, 0x80]))
        #expect(r.sw == .insNotSupported)
    }

    @Test func identityComesFromTheCHUID() async throws {
        let (_, app) = await fresh(serial: 0x0102_0304)
        try await app.select()
        let id = try await app.identity()
        #expect(id.guid?.count == 16)
        #expect(id.guid?.suffix(4) == [1, 2, 3, 4])
        #expect(id.fascn?.count == 25)
        #expect(try await app.serialNumber() == 0x0102_0304)
        let discovery = try #require(try await app.getData(PIV.Object.discovery))
        #expect(try TLV.parseAll(discovery).first(tag: 0x4F)?.value == PIV.aid)
    }

    @Test func wrongPINCostsExactlyOneTryAndBlocks() async throws {
        let (_, app) = await fresh()
        try await app.select()
        #expect(try await app.pinStatus() == .notVerified(retriesLeft: 3))
        await #expect(throws: TesseraError(.pinInvalid, "wrong PIN", details: ["retriesLeft": 2])) {
            try await app.verifyPIN("000000")
        }
        #expect(try await app.pinStatus() == .notVerified(retriesLeft: 2))
        try await app.verifyPIN("123456")
        #expect(try await app.pinStatus() == .verified)
        for expected in [2, 1] {
            do { try await app.verifyPIN("999999"); Issue.record("accepted a wrong PIN") } catch {
                #expect(error.code == .pinInvalid)
                #expect(error.details["retriesLeft"] == .number(Double(expected)))
            }
        }
        do { try await app.verifyPIN("999999"); Issue.record("accepted a wrong PIN") } catch {
            #expect(error.code == .pinLocked)
        }
        #expect(try await app.pinStatus() == .blocked)
        do { try await app.verifyPIN("123456"); Issue.record("a blocked PIN verified") } catch {
            #expect(error.code == .pinLocked)
        }
    }

    @Test func changeReferenceDataReplacesThePIN() async throws {
        let (card, app) = await fresh()
        try await app.select()
        try await app.changePIN(old: "123456", new: "87654321")
        #expect(await card.state.pin == "87654321")
        await card.reset()
        try await app.select()
        do { try await app.verifyPIN("123456"); Issue.record("old PIN still works") } catch {
            #expect(error.code == .pinInvalid)
        }
        try await app.verifyPIN("87654321")
    }

    @Test(arguments: [PIV.Algorithm.tripleDES, .aes128, .aes192, .aes256])
    func managementKeyMutualAuthentication(_ algorithm: PIV.Algorithm) async throws {
        var state = PIVCardState.factoryNew(serial: 1)
        let keyBytes = (0..<(algorithm.keyLength ?? 0)).map { UInt8($0 * 7 + 1) }
        state.managementAlgorithm = algorithm.rawValue
        state.managementKey = Hex.encode(keyBytes)
        let card = EmulatedPIVCard(state: state)
        let app = PIVApplication(transport: DirectPIVTransport(card: card))
        try await app.select()
        // Generation needs the management key.
        do { _ = try await app.generateP256(slot: 0x82); Issue.record("generated without the management key") } catch {
            #expect(error.code == .tokenError)
        }
        var wrong = keyBytes
        wrong[0] ^= 0xFF
        do {
            try await app.authenticate(managementKey: try PIVManagementKey(algorithm: algorithm, key: wrong));
            Issue.record("wrong key accepted")
        } catch {
            #expect(error.code == .tokenError)
        }
        try await app.authenticate(managementKey: try PIVManagementKey(algorithm: algorithm, key: keyBytes))
        let point = try await app.generateP256(slot: 0x82)
        #expect(point.count == 65)
        #expect(await card.publicKey(slot: 0x82) == point)
    }

    @Test func generateAndSignVerifiesWithSwiftCrypto() async throws {
        let (_, app) = await fresh()
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let point = try await app.generateP256(slot: 0x83)
        let digest = Array(SHA256.hash(data: Array("hello".utf8)))
        do { _ = try await app.signP256(slot: 0x83, digest: digest); Issue.record("signed without PIN") } catch {
            #expect(error.code == .pinRequired)
        }
        try await app.verifyPIN("123456")
        let der = try await app.signP256(slot: 0x83, digest: digest)
        let key = try P256.Signing.PublicKey(x963Representation: point)
        #expect(
            key.isValidSignature(
                try P256.Signing.ECDSASignature(derRepresentation: der), for: SHA256.hash(data: Array("hello".utf8))))
        let raw = try ECDSASignature.rawFromDER(der)
        #expect(raw.count == 64)
        do { _ = try await app.signP256(slot: 0x84, digest: digest); Issue.record("signed with an empty slot") } catch {
            #expect(error.code == .passkeyNotFound)
        }
    }

    /// RSA-2048 in 9A: the host pads (EMSA-PKCS1-v1_5), the card applies the key (a 266-byte command chained, a
    /// 264-byte answer through GET RESPONSE); OpenSSL verifies the result as an RSASSA-PKCS1-v1_5 signature.
    @Test(arguments: [SignatureHash.sha256, .sha512, .sha1, .sha384, .sha224])
    func rsaSignaturesVerifyWithOpenSSL(hash: SignatureHash) async throws {
        let pair = try Signatures.generateKey(.rsa(bits: 2048))
        var state = PIVCardState.factoryNew(serial: 9)
        state.keys["9a"] = .init(
            algorithm: PIV.Algorithm.rsa2048.rawValue, privateKey: Hex.encode(pair.privateKeyDER))
        let card = EmulatedPIVCard(state: state)
        await card.powerOn()
        let app = PIVApplication(transport: DirectPIVTransport(card: card))
        try await app.select()
        let message = Array("signed by slot 9a".utf8)
        let block = try Signatures.pkcs1v15Block(
            digest: try Signatures.digest(hash, message), hash: hash, length: 256)
        #expect(block.prefix(2) == [0x00, 0x01] && block.count == 256)
        do {
            _ = try await app.signRSA(slot: 0x9A, algorithm: .rsa2048, block: block)
            Issue.record("signed without PIN")
        } catch {
            #expect(error.code == .pinRequired)
        }
        try await app.verifyPIN("123456")
        let signature = try await app.signRSA(slot: 0x9A, algorithm: .rsa2048, block: block)
        #expect(signature.count == 256)
        #expect(
            try Signatures.verify(signature, over: message, publicKey: pair.publicKeyDER, scheme: .rsaPKCS1v15(hash)))
        #expect(
            try !Signatures.verify(
                signature, over: message + [0], publicKey: pair.publicKeyDER, scheme: .rsaPKCS1v15(hash)))
        await #expect(throws: TesseraError.self) {
            try await app.signRSA(slot: 0x9A, algorithm: .eccP256, block: block)
        }
    }

    @Test func longObjectsUseChainingAndGetResponse() async throws {
        let (card, app) = await fresh()
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let cert = (0..<1500).map { UInt8(truncatingIfNeeded: $0 * 31) }
        let content =
            TLV(tag: 0x70, value: cert).encoded + TLV(tag: 0x71, value: [0x00]).encoded
            + TLV(tag: 0xFE, value: []).encoded
        try await app.putData(0x5FC105, content: content)
        await card.clearCommands()
        #expect(try await app.getData(0x5FC105) == content)
        #expect(await card.commands.count > 1)  // 61xx + GET RESPONSE
        try await app.putData(0x5FC105, content: [])
        #expect(try await app.getData(0x5FC105) == nil)
    }

    @Test func stateSurvivesARestartButSessionStateDoesNot() async throws {
        let path = FileManager.default.temporaryDirectory.path + "/piv-state-\(UUID().uuidString).json"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let card = try EmulatedPIVCard.open(stateFile: path, serial: 42)
        let app = PIVApplication(transport: DirectPIVTransport(card: card))
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let point = try await app.generateP256(slot: 0x90)
        try await app.verifyPIN("123456")
        do { try await app.verifyPIN("111111") } catch {}
        let again = try EmulatedPIVCard.open(stateFile: path, serial: 99)
        #expect(await again.state.serial == 42)
        #expect(await again.publicKey(slot: 0x90) == point)
        #expect(await again.state.pinRetries == 2)
        let app2 = PIVApplication(transport: DirectPIVTransport(card: again))
        try await app2.select()
        #expect(try await app2.pinStatus() == .notVerified(retriesLeft: 2))
    }

    @Test func managementKeyFileFormats() throws {
        #expect(
            try PIVManagementKey(parsing: "010203040506070801020304050607080102030405060708\n").algorithm == .tripleDES)
        #expect(
            try PIVManagementKey(parsing: "aes192:010203040506070801020304050607080102030405060708").algorithm
                == .aes192)
        #expect(try PIVManagementKey(parsing: String(repeating: "ab", count: 16)).algorithm == .aes128)
        #expect(try PIVManagementKey(parsing: String(repeating: "ab", count: 32)).algorithm == .aes256)
        #expect(throws: TesseraError.self) { try PIVManagementKey(parsing: "aes128:0102") }
        #expect(throws: TesseraError.self) { try PIVManagementKey(parsing: "zz") }
        #expect(try PIVManagementKey(parsing: Hex.encode(PIV.defaultManagementKey)).isFactoryDefault)
        #expect(!"\(PIVManagementKey.factoryDefault)".contains("0102"))
    }
}
