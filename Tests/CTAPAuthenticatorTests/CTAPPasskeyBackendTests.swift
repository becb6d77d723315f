import CTAP2
import KeyStores
import Passkeys
import TesseraCore
import TesseraTestSupport
import Testing

@testable import CTAPAuthenticator

@Suite("CTAP passkey backend on a SoftHSM2 token")
struct CTAPPasskeyBackendTests {
    @Test func aCredentialIsItsCreatorsUidsAndDoesNotExistForAnotherUid() async throws {
        let h = try await CTAPHarness.make()
        let id = try await h.as(1000) { try await h.make() }
        let mine = try await h.as(1000) { try await h.backend.credentials(rpId: "example.com", ids: [id]) }
        #expect(mine.map(\.id) == [id])
        #expect(try await h.as(1000) { try await h.backend.discoverableCredentials() }.map(\.id) == [id])
        // Another uid sees nothing, by id or by discovery, and cannot delete or assert with it.
        #expect(try await h.as(1001) { try await h.backend.credentials(rpId: "example.com", ids: [id]) }.isEmpty)
        #expect(try await h.as(1001) { try await h.backend.credentials(rpId: "example.com", ids: nil) }.isEmpty)
        #expect(try await h.as(1001) { try await h.backend.discoverableCredentials() }.isEmpty)
        let credential = try #require(mine.first)
        #expect(
            await h.as(1001) { await ctapStatus { try await h.backend.deleteCredential(credential) } } == .noCredentials
        )
        let assertion = await h.as(1001) {
            await ctapStatus {
                _ = try await h.backend.assert(
                    credential, clientDataHash: [UInt8](repeating: 2, count: 32), userPresent: true,
                    userVerified: false, extensions: nil)
            }
        }
        #expect(assertion == .noCredentials)
        // Its owner still has it.
        #expect(try await h.as(1000) { try await h.backend.discoverableCredentials() }.map(\.id) == [id])
        #expect(await h.as(1000) { await ctapStatus { try await h.backend.deleteCredential(credential) } } == nil)
        #expect(try await h.as(1000) { try await h.backend.discoverableCredentials() }.isEmpty)
    }

    @Test func credProtectAndDiscoverabilityAreKeptAndCredProtect3NeedsUserVerification() async throws {
        let h = try await CTAPHarness.make()
        let protected = try await h.as(1000) { try await h.make(user: "bob", credProtect: .userVerificationRequired) }
        let listed = try await h.as(1000) { try await h.make(user: "carol", discoverable: false) }
        let discovered = try await h.as(1000) { try await h.backend.discoverableCredentials() }
        #expect(discovered.map(\.id) == [protected])
        #expect(discovered.first?.credProtect == .userVerificationRequired)
        let byId = try await h.as(1000) {
            try await h.backend.credentials(rpId: "example.com", ids: [listed, protected])
        }
        #expect(Set(byId.map(\.id)) == [listed, protected])
        #expect(byId.first { $0.id == listed }?.discoverable == false)
        let credential = try #require(byId.first { $0.id == protected })
        func assert(verified: Bool) async -> CTAP2Status? {
            await h.as(1000) {
                await ctapStatus {
                    _ = try await h.backend.assert(
                        credential, clientDataHash: [UInt8](repeating: 3, count: 32), userPresent: true,
                        userVerified: verified, extensions: nil)
                }
            }
        }
        #expect(await assert(verified: false) == .pinUvAuthTokenRequired)
        #expect(await assert(verified: true) == nil)
    }

    @Test func theDaemonsPolicyDecidesWhoMakesCredentials() async throws {
        let h = try await CTAPHarness.make(
            access: CTAPAccess(
                connect: { _ in },
                enroll: { peer throws(TesseraError) in
                    if peer.uid == 1001 { throw TesseraError(.unauthorized, "not 1001") }
                }))
        #expect(await h.as(1001) { await ctapStatus { _ = try await h.make() } } == .operationDenied)
        #expect(await h.as(1000) { await ctapStatus { _ = try await h.make() } } == nil)
    }

    /// The PIN back-off is per uid: one uid's wrong PINs hold back that uid only.
    @Test func wrongPINsHoldBackOnlyTheUidThatSentThem() async throws {
        let h = try await CTAPHarness.make(pinBackoff: .standard, login: false)
        let right = CTAPTokenPIN.hash(Array("1234".utf8))
        let wrong = CTAPTokenPIN.hash(Array("9999".utf8))
        let token = h.token
        try await h.service.pinRules.withCallerPIN(
            SoftHSMFixture.defaultPIN, caller: nil, allowFinalTry: false, tokenId: token.id
        ) { (old: PINAttempt) async throws(TesseraError) in
            try await token.changePIN(old: old, new: CTAPTokenPIN.tokenPIN(hash: right))
        }
        func verify(_ uid: UInt32, _ hash: [UInt8]) async -> CTAP2Status? {
            await h.as(uid) { await ctapStatus { try await h.backend.verifyPIN(hash: hash) } }
        }
        #expect(await verify(1000, wrong) == .pinInvalid)
        #expect(await verify(1000, right) == .pinAuthBlocked)
        #expect(await verify(1001, wrong) == .pinInvalid)
        #expect(await verify(1002, right) == nil)
        #expect(try await h.backend.pinRetries() > 0)
    }

    @Test func aPKCS11TokenWithoutFailedTriesOffersThemAll() async throws {
        let h = try await CTAPHarness.make(login: false)
        #expect(try await h.backend.pinRetries() == 8)
    }
}
