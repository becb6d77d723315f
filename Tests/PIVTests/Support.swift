import APDU
import CredentialStore
import Crypto
import Emulation
import FoundationEssentials
import KeyStores
import Logging
import PCSC
import PIV
import PIVKeyStore
import Passkeys
import TesseraCore
import TesseraTestSupport
import Testing
import VPCD

@discardableResult
func expectError<T>(
    _ code: TesseraError.Code, _ body: () async throws -> T,
    sourceLocation: SourceLocation = #_sourceLocation
) async -> TesseraError? {
    do {
        _ = try await body()
        Issue.record("expected \(code.rawValue), got success", sourceLocation: sourceLocation)
        return nil
    } catch let error as TesseraError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected TesseraError \(code.rawValue), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// A private pcscd, the PIV key store and the passkey service over a temporary database.
final class PIVHarness: Sendable {
    let pcscd: PCSCDaemonFixture
    let directory: String
    let store: PIVKeyStore
    let slots: PIVSlotStore
    let service: PasskeyService

    init(pcscd: PCSCDaemonFixture, managementKey: PIVManagementKey? = .factoryDefault) throws {
        self.pcscd = pcscd
        directory = Scratch.directory("piv")
        let db = try TesseraDatabase(path: directory + "/tessera.sqlite")
        var logger = Logger(label: "piv-test")
        logger.logLevel = .warning
        slots = PIVSlotStore(database: db)
        store = PIVKeyStore(
            slots: slots, managementKey: managementKey, logger: logger, retryInterval: .milliseconds(200))
        store.start()
        // No back-off: these tests send wrong PINs in a row on purpose (the back-off has its own tests).
        service = PasskeyService(
            keyStores: [store], store: CredentialStore(database: db), logger: logger,
            pinBackoff: PINBackoffPolicy(initial: .zero, maximum: .zero))
    }

    static func start(managementKey: PIVManagementKey? = .factoryDefault) async throws -> PIVHarness {
        let pcscd = try await PCSCDaemonFixture.acquire()
        do {
            return try PIVHarness(pcscd: pcscd, managementKey: managementKey)
        } catch {
            pcscd.stop()
            throw error
        }
    }

    func stop() async {
        await store.close()
        pcscd.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Inserts an emulated card in reader slot `index` (0 or 1).
    func insert(_ card: EmulatedPIVCard, reader index: Int = 0) async throws -> VirtualCardLink {
        let link = VirtualCardLink(card: card, port: Int(pcscd.readers[index].port), reconnects: true)
        try await link.insert()
        return link
    }

    /// Waits for the PIV token in reader slot `index`.
    func token(reader index: Int = 0) async -> (any KeyStoreToken)? {
        let name = pcscd.readers[index].name
        return await eventually(.seconds(15)) {
            for t in await store.tokens() {
                if case .string(let r)? = await t.describe()["reader"], r == name { return t }
            }
            return nil
        }
    }

    /// Waits until no PIV token is in reader slot `index`.
    func noToken(reader index: Int = 0) async -> Bool {
        let name = pcscd.readers[index].name
        return await eventually(.seconds(15)) { () async -> Bool? in
            for t in await store.tokens() {
                if case .string(let r)? = await t.describe()["reader"], r == name { return nil }
            }
            return true
        } ?? false
    }

    func enroll(tokenId: String?, pin: String? = "123456") async throws(TesseraError) -> PasskeyService.EnrollResult {
        try await service.enroll(
            .init(
                rpId: "example.com", userId: Array("user-1".utf8), userName: "alice",
                userDisplayName: "Alice", challenge: Array(repeating: 7, count: 32),
                tokenId: tokenId, pin: pin, attestation: .packed))
    }

    func authenticate(
        _ credentialId: [UInt8], pin: String? = "123456",
        allowFinalPinTry: Bool = false
    ) async throws(TesseraError) -> (PasskeyService.Assertion, [UInt8]) {
        var generator = SeededRandom(stream: "PIVTests.authenticate.\(Base64URL.encode(credentialId))")
        let challenge = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let a = try await service.authenticate(
            .init(
                rpId: "example.com", challenge: challenge,
                allowCredentials: [credentialId], pin: pin,
                allowFinalPinTry: allowFinalPinTry))
        return (a, challenge)
    }
}

/// Verifies an assertion with swift-crypto against the public point the card itself reports.
func verifyAssertion(_ a: PasskeyService.Assertion, point: [UInt8]) throws -> Bool {
    let key = try P256.Signing.PublicKey(x963Representation: point)
    let signature = try P256.Signing.ECDSASignature(derRepresentation: a.signature)
    let clientDataHash = Array(SHA256.hash(data: a.clientDataJSON))
    return key.isValidSignature(signature, for: a.authenticatorData + clientDataHash)
}

/// The P-256 key of the card that is not in `before`.
func newKeySlot(_ card: EmulatedPIVCard, before: [UInt8]) async -> UInt8? {
    await card.keySlots.first { !before.contains($0) }
}
