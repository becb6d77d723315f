import CTAP2
import CredentialStore
import KeyStores
import Logging
import PasskeyTestSupport
import Passkeys
import Presence
import RPC
import TesseraCore
import TesseraTestSupport
import Testing

@testable import CTAPAuthenticator

let quietLogger = SpareTokenPasskeys.quietLogger

/// A CTAP backend on a spare SoftHSM2 token of its own and a passkey service over a temporary database.
struct CTAPHarness {
    let service: PasskeyService
    let backend: CTAPPasskeyBackend
    let token: any KeyStoreToken
    let presence: PresenceBroker
    let access: CTAPAccess

    /// With `login`, the token is logged in with its PIN, as a PIN file does for the daemon.
    static func make(
        pinBackoff: PINBackoffPolicy = PINBackoffPolicy(initial: .zero, maximum: .zero),
        access: CTAPAccess = CTAPAccess(connect: { _ in }, enroll: { _ in }), login: Bool = true
    ) async throws -> CTAPHarness {
        let spare = try await SpareTokenPasskeys.make(scratch: "ctap", pinBackoff: pinBackoff, login: login)
        let service = spare.service, token = spare.token
        let presence = PresenceBroker(
            PresenceSettings(command: nil, timeout: .seconds(1), confirmOnSocket: false), logger: quietLogger)
        let backend = CTAPPasskeyBackend(
            passkeys: service, options: service.ctapOptions, presence: presence, access: access, tokenId: token.id,
            logger: quietLogger)
        return CTAPHarness(service: service, backend: backend, token: token, presence: presence, access: access)
    }

    /// Runs `body` as the CTAP client `uid` (as the hub does for a socket connection's request).
    func `as`<T>(_ uid: UInt32, _ body: () async throws -> T) async rethrows -> T {
        try await CTAPCaller.$current.withValue(PeerCredentials(pid: 1, uid: uid, gid: uid)) { try await body() }
    }

    /// Makes a credential for example.com as the current client.
    func make(
        user: String = "alice", discoverable: Bool = true, credProtect: CredProtect = .userVerificationOptional
    ) async throws(CTAP2Error) -> [UInt8] {
        let attestation = try await backend.makeCredential(
            rpId: "example.com", user: CTAP2User(id: Array(user.utf8), name: user, displayName: user),
            clientDataHash: [UInt8](repeating: 1, count: 32), discoverable: discoverable, credProtect: credProtect,
            extensions: nil, hmacSecret: false, userVerified: false)
        // authData: rpIdHash 32, flags 1, counter 4, AAGUID 16, id length 2, id.
        let data = attestation.authData
        guard data.count > 55 else { throw CTAP2Error(.other, "short authData") }
        let length = Int(data[53]) << 8 | Int(data[54])
        return Array(data[55..<min(data.count, 55 + length)])
    }
}

/// The CTAP status `body` fails with (nil when it succeeds); any other error is an issue.
func ctapStatus(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> CTAP2Status? {
    do {
        try await body()
        return nil
    } catch let error as CTAP2Error {
        return error.status
    } catch {
        Issue.record("expected a CTAP2Error, got \(error)", sourceLocation: sourceLocation)
        return .other
    }
}
