import CTAP2
import CredentialStore
import FoundationEssentials
import KeyStores
import Logging
import Ownership
import Passkeys
import Presence
import RPC
import TesseraCore
import WebAuthn

/// The CTAP client of the running request (set for the request's task).
enum CTAPCaller {
    @TaskLocal static var current: PeerCredentials?
}

/// Who may use the authenticator, as the daemon's policy decides: `connect` for a socket connection (`sign`),
/// `enroll` for making a credential.
public struct CTAPAccess: Sendable {
    let connect: @Sendable (PeerCredentials) throws(TesseraError) -> Void
    let enroll: @Sendable (PeerCredentials) throws(TesseraError) -> Void

    public init(
        connect: @escaping @Sendable (PeerCredentials) throws(TesseraError) -> Void,
        enroll: @escaping @Sendable (PeerCredentials) throws(TesseraError) -> Void
    ) {
        self.connect = connect
        self.enroll = enroll
    }
}

// MARK: backend

/// The authenticator's credentials are the passkey service's: made with `PasskeyService.enroll`, used with
/// `PasskeyService.authenticate` (one sign counter), listed by `credentials.list`.
public final class CTAPPasskeyBackend: CTAP2Backend {
    let passkeys: PasskeyService
    let options: CTAPCredentialStore
    let presence: PresenceBroker
    let access: CTAPAccess
    let tokenId: String?
    let logger: Logger

    public init(
        passkeys: PasskeyService, options: CTAPCredentialStore, presence: PresenceBroker, access: CTAPAccess,
        tokenId: String?, logger: Logger
    ) {
        self.passkeys = passkeys; self.options = options; self.presence = presence; self.access = access
        self.tokenId = tokenId; self.logger = logger
    }

    /// The CTAP client as the owner rule sees it (docs/API.md, "Owners"): its uid, with no administrator's reach
    /// (another uid's credentials are managed on the main socket). The kernel's HID device carries no uid: its
    /// clients act as the daemon's uid.
    private var requester: Requester {
        CTAPCaller.current.map { Requester(uid: $0.uid, pid: $0.pid, isAdmin: false) }
            ?? Requester(uid: Requester.daemonUID, isAdmin: false)
    }

    public func credentials(rpId: String, ids: [[UInt8]]?) async throws(CTAP2Error) -> [CTAP2Credential] {
        var records: [CredentialRecord] = []
        let requester = requester
        do throws(TesseraError) {
            if let ids {
                for id in ids.prefix(64) {
                    if let rec = try await passkeys.cachedCredential(id: id, requester: requester), rec.rpId == rpId {
                        records.append(rec)
                    }
                }
            } else {
                records = try await passkeys.credentials(rpId: rpId, userId: nil, requester: requester)
            }
            return try await ctapCredentials(records, discoverableOnly: ids == nil)
        } catch {
            throw map(error, "credential lookup")
        }
    }

    public func discoverableCredentials() async throws(CTAP2Error) -> [CTAP2Credential] {
        do throws(TesseraError) {
            return try await ctapCredentials(
                passkeys.credentials(rpId: nil, userId: nil, requester: requester), discoverableOnly: true)
        } catch {
            throw map(error, "credential lookup")
        }
    }

    /// The records whose token is present, newest first, with their CTAP options.
    private func ctapCredentials(_ records: [CredentialRecord], discoverableOnly: Bool) async throws(TesseraError)
        -> [CTAP2Credential]
    {
        let present = Set(await passkeys.tokens().map(\.id))
        let records = records.filter { present.contains($0.tokenId) }.sorted { $0.createdAt > $1.createdAt }
        let stored = try await options.cachedOptions(records.map(\.credentialId))
        return records.compactMap { r in
            let o = stored[r.credentialId]
            let discoverable = o?.discoverable ?? true
            if discoverableOnly && !discoverable { return nil }
            return CTAP2Credential(
                id: [UInt8](r.credentialId), rpId: r.rpId,
                // Cut as new ones are: names stored whole before the limit still fit a CTAPHID message.
                user: CTAP2User(
                    id: [UInt8](r.userId), name: r.userName.utf8Prefix(PasskeyService.maxNameBytes),
                    displayName: r.userDisplayName.utf8Prefix(PasskeyService.maxNameBytes)),
                discoverable: discoverable,
                credProtect: CredProtect(rawValue: UInt8(clamping: o?.credProtect ?? 1)) ?? .userVerificationRequired,
                publicKey: [UInt8](r.publicKey), hmacSecret: o?.hmacSecret ?? false)
        }
    }

    public func deleteCredential(_ credential: CTAP2Credential) async throws(CTAP2Error) {
        let actor = CTAPCaller.current.map { "ctap:uid:\($0.uid)" } ?? "ctap"
        do throws(TesseraError) {
            try await passkeys.delete(id: credential.id, actor: actor, requester: requester)
            try? await options.delete(Data(credential.id))
            logger.info("ctap: credential deleted", metadata: ["rpId": "\(credential.rpId)"])
        } catch {
            throw map(error, "deleteCredential")
        }
    }

    public func updateUser(_ credential: CTAP2Credential, user: CTAP2User) async throws(CTAP2Error) {
        do throws(TesseraError) {
            try await passkeys.updateUser(
                id: credential.id, name: user.name ?? "", displayName: user.displayName ?? "", requester: requester)
        } catch {
            throw map(error, "updateUserInformation")
        }
    }

    public func makeCredential(
        rpId: String, user: CTAP2User, clientDataHash: [UInt8], discoverable: Bool,
        credProtect: CredProtect, extensions: [UInt8]?, hmacSecret: Bool, userVerified: Bool
    ) async throws(CTAP2Error) -> CTAP2Attestation {
        if let peer = CTAPCaller.current, (try? access.enroll(peer)) == nil {
            throw CTAP2Error(.operationDenied, "uid \(peer.uid) may not enroll by the policy")
        }
        _ = try await ctapToken()
        let credentialId = SecureRandom.bytes(32)
        do throws(TesseraError) {
            let saved = CTAPCredentialOptions(
                credentialId: Data(credentialId), discoverable: discoverable,
                credProtect: Int(credProtect.rawValue), hmacSecret: hmacSecret)
            try await options.save(saved)
            var request = PasskeyService.EnrollRequest(
                rpId: rpId, userId: user.id, userName: user.name ?? "", userDisplayName: user.displayName ?? "",
                challenge: [], tokenId: tokenId, attestation: .packed, userVerification: .discouraged,
                credentialId: credentialId)
            request.clientDataHash = clientDataHash
            request.extensions = extensions
            request.hmacSecret = hmacSecret
            request.verifiedByFrontDoor = userVerified
            request.requester = requester
            let result: PasskeyService.EnrollResult
            do throws(TesseraError) { result = try await passkeys.enroll(request) } catch {
                try? await options.delete(Data(credentialId))
                throw error
            }
            let object = try AttestationObject(parsing: result.attestationObject)
            logger.info(
                "ctap: credential made",
                metadata: [
                    "rpId": "\(rpId)", "token": "\(result.tokenId)",
                    "rk": "\(discoverable)", "credProtect": "\(credProtect.rawValue)", "hmacSecret": "\(hmacSecret)",
                ])
            return CTAP2Attestation(format: object.format, authData: object.authData, statement: object.statement)
        } catch {
            throw map(error, "makeCredential")
        }
    }

    public func assert(
        _ credential: CTAP2Credential, clientDataHash: [UInt8], userPresent: Bool, userVerified: Bool,
        extensions: [UInt8]?
    ) async throws(CTAP2Error) -> (authData: [UInt8], signature: [UInt8]) {
        var request = PasskeyService.AuthenticateRequest(
            rpId: credential.rpId, challenge: [], allowCredentials: [credential.id],
            userVerification: .discouraged)
        request.clientDataHash = clientDataHash
        request.userPresent = userPresent
        request.verifiedByFrontDoor = userVerified
        request.extensions = extensions
        request.requester = requester
        do throws(TesseraError) {
            let a = try await passkeys.authenticate(request)
            return (a.authenticatorData, a.signature)
        } catch {
            throw map(error, "getAssertion")
        }
    }

    /// The token of new credentials makes and uses hmac-secret keys (PKCS#11 tokens with the mechanisms; PIV
    /// cards cannot).
    public func supportsHMACSecret() async -> Bool {
        guard let token = try? await ctapToken() else { return false }
        return await token.supportsHMACSecret()
    }

    public func hmacSecret(_ credential: CTAP2Credential, userVerified: Bool, salts: [[UInt8]]) async throws(CTAP2Error)
        -> [UInt8]
    {
        do throws(TesseraError) {
            return try await passkeys.hmacSecret(
                id: credential.id, userVerified: userVerified, salts: salts, requester: requester)
        } catch {
            throw map(error, "hmac-secret")
        }
    }

    /// Asks the presence broker (door `ctap`) for the request's client.
    public func userPresence(_ request: PresenceRequest) async throws(CTAP2Error) {
        let caller = CTAPCaller.current
        var details: [String: JSONValue] = ["type": "ctap", "operation": .string(request.operation)]
        if let rp = request.rpId { details["rpId"] = .string(rp) }
        if let user = request.userName { details["userName"] = .string(user) }
        let answer: PresenceAnswer
        do throws(TesseraError) {
            answer = try await presence.ask(
                PresenceQuestion(door: .ctap, uid: caller?.uid, pid: caller?.pid, details: details))
        } catch {
            throw CTAP2Error(.operationDenied, error.message)
        }
        switch answer {
        case .confirmed: return
        case .denied: throw CTAP2Error(.operationDenied, "user presence refused")
        case .timedOut: throw CTAP2Error(.userActionTimeout, "no user presence in time")
        case .cancelled: throw CTAP2Error(.keepaliveCancel, "cancelled by the client")
        }
    }

    // MARK: PIN

    /// The token of new credentials and of the PIN: `ctap.tokenId`, else the only token present.
    private func ctapToken() async throws(CTAP2Error) -> any KeyStoreToken {
        if tokenId == nil, await passkeys.tokens().count > 1 {
            logger.warning("ctap: several tokens are present: set ctap.tokenId to the token new credentials go to")
            throw CTAP2Error(.operationDenied, "several tokens present and no ctap.tokenId")
        }
        do throws(TesseraError) { return try await passkeys.chooseToken(tokenId) } catch {
            throw map(error, "token")
        }
    }

    /// The PKCS#11 token whose PIN CTAP uses (PIV PINs cannot hold the hashed form: PIN_NOT_SET).
    private func pinToken() async throws(CTAP2Error) -> any KeyStoreToken {
        let token = try await ctapToken()
        guard token.backend == "pkcs11" else {
            throw CTAP2Error(.pinNotSet, "token \(token.id) (\(token.backend)) cannot hold a CTAP PIN")
        }
        return token
    }

    /// From the token's flags (PKCS#11 gives no count): locked or final try 0 (the final try is never spent over
    /// CTAP), count low 1 (at least one), else 8, the protocol's maximum.
    public func pinRetries() async throws(CTAP2Error) -> Int {
        let flags = try await pinToken().describe()["flags"]
        if flags?["pinLocked"]?.boolValue == true || flags?["pinFinalTry"]?.boolValue == true { return 0 }
        if flags?["pinCountLow"]?.boolValue == true { return 1 }
        return 8
    }

    public func verifyPIN(hash: [UInt8]) async throws(CTAP2Error) {
        let token = try await pinToken()
        do throws(TesseraError) {
            try await withCTAPPIN(Self.tokenPIN(hash), token: token) { pin throws(TesseraError) in
                try await token.login(pin: pin)
            }
        } catch {
            throw mapPIN(error, "PIN check")
        }
    }

    public func changePIN(currentHash: [UInt8], newHash: [UInt8]) async throws(CTAP2Error) {
        let token = try await pinToken()
        do throws(TesseraError) {
            try await withCTAPPIN(Self.tokenPIN(currentHash), token: token) { pin throws(TesseraError) in
                try await token.changePIN(old: pin, new: Self.tokenPIN(newHash))
            }
            logger.notice("ctap: token PIN changed", metadata: ["token": "\(token.id)"])
        } catch {
            throw mapPIN(error, "changePIN")
        }
    }

    static func tokenPIN(_ hash: [UInt8]) -> String { CTAPTokenPIN.tokenPIN(hash: hash) }

    /// Under the PIN rules as the CTAP client (never the final try: a CTAP client cannot ask for it).
    private func withCTAPPIN(
        _ pin: String, token: any KeyStoreToken, _ operation: (PINAttempt) async throws(TesseraError) -> Void
    ) async throws(TesseraError) {
        let caller = CTAPCaller.current.map { PINCaller(uid: $0.uid, pid: $0.pid) }
        try await passkeys.pinRules.withCallerPIN(pin, caller: caller, allowFinalTry: false, tokenId: token.id) {
            (attempt: PINAttempt) async throws(TesseraError) in try await operation(attempt)
        }
    }

    private func mapPIN(_ error: TesseraError, _ what: String) -> CTAP2Error {
        switch error.code {
        case .pinInvalid: return CTAP2Error(.pinInvalid, error.message)
        case .pinLocked, .pinFinalTryProtected:
            logger.notice("ctap: \(what): \(error.code.rawValue): \(error.message)")
            return CTAP2Error(.pinBlocked, error.message)
        case .pinBackoff:
            logger.notice("ctap: \(what): \(error.code.rawValue): \(error.message)")
            return CTAP2Error(.pinAuthBlocked, error.message)
        case .invalidInput: return CTAP2Error(.pinPolicyViolation, error.message)
        default: return map(error, what)
        }
    }

    private func map(_ error: TesseraError, _ what: String) -> CTAP2Error {
        logger.notice("ctap: \(what) failed: \(error.code.rawValue): \(error.message)")
        switch error.code {
        case .credentialExcluded: return CTAP2Error(.credentialExcluded, error.message)
        case .pinRequired: return CTAP2Error(.pinUvAuthTokenRequired, error.message)
        case .invalidInput: return CTAP2Error(.invalidParameter, error.message)
        case .tokenNotPresent, .tokenRemoved: return CTAP2Error(.operationDenied, error.message)
        case .passkeyNotFound: return CTAP2Error(.noCredentials, error.message)
        default: return CTAP2Error(.other, error.message)
        }
    }
}
