import CredentialStore
import FoundationEssentials
import Passkeys
import TesseraCore
import Testing

/// The pre-provisioning decision tree (vendor document 003, decisions 3–6; docs/LIFECYCLE.md).
@Suite struct ProvisioningCheckTests {
    func record(_ id: UInt8, token: String = "p11-a", state: CredentialState = .active) -> CredentialRecord {
        CredentialRecord(
            credentialId: Data([id]), rpId: "example.com", userId: Data([1]), userName: "u",
            userDisplayName: "U", tokenId: token, backend: "pkcs11", keyHandle: Data([id]),
            publicKey: Data([0xA5]), state: state)
    }

    @Test func noCredentialProvisions() throws {
        let check = ProvisioningCheck.decide([], tokenId: "p11-a")
        #expect(check.decision == .provision)
        #expect(try check.admit(replace: false).isEmpty)
    }

    @Test func replacedCredentialsDoNotCount() throws {
        let check = ProvisioningCheck.decide([record(1, state: .replaced)], tokenId: "p11-a")
        #expect(check.decision == .provision)
        #expect(check.credentials.isEmpty)
    }

    @Test func activeOnTheSameTokenIsAlreadyProvisioned() throws {
        let check = ProvisioningCheck.decide([record(1)], tokenId: "p11-a")
        #expect(check.decision == .alreadyProvisioned)
        let e = thrown { () throws(TesseraError) in _ = try check.admit(replace: false) }
        #expect(e?.code == .credentialExists)
        #expect(e?.details["decision"] == "alreadyProvisioned")
        #expect(try check.admit(replace: true) == [[1]])
    }

    @Test func activeOnlyOnAnotherTokenMayBeProvisioned() throws {
        let check = ProvisioningCheck.decide([record(1, token: "p11-b")], tokenId: "p11-a")
        #expect(check.decision == .provisionedOnOtherToken)
        #expect(try check.admit(replace: false).isEmpty)
        #expect(try check.admit(replace: true) == [[1]])
        // Without a token to compare, an active credential counts as provisioned.
        #expect(ProvisioningCheck.decide([record(1, token: "p11-b")], tokenId: nil).decision == .alreadyProvisioned)
    }

    @Test func deactivatedComesBeforeSuspendedAndActive() throws {
        let all = [record(1), record(2, state: .suspended), record(3, token: "p11-b", state: .deactivated)]
        let check = ProvisioningCheck.decide(all, tokenId: "p11-c")
        #expect(check.decision == .deactivated)
        #expect(
            thrown { () throws(TesseraError) in _ = try check.admit(replace: false) }?.code == .credentialDeactivated)
        #expect(try check.admit(replace: true) == [[1], [2], [3]])
    }

    @Test func suspendedComesBeforeOtherToken() throws {
        let check = ProvisioningCheck.decide([record(1, token: "p11-b", state: .suspended)], tokenId: "p11-a")
        #expect(check.decision == .suspended)
        let e = thrown { () throws(TesseraError) in _ = try check.admit(replace: false) }
        #expect(e?.code == .credentialExists)
        #expect(e?.details["decision"] == "suspended")
    }

    func thrown(_ body: () throws(TesseraError) -> Void) -> TesseraError? {
        do { try body() } catch { return error }
        Issue.record("expected an error")
        return nil
    }
}
