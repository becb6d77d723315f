import CredentialStore
import Crypto
import CryptoPrimitives
import FoundationEssentials
import KeyStores
import Logging
import Ownership
import TesseraCore
import TesseraRuntime
import WebAuthn

#if canImport(Glibc)
    import Glibc
#endif

/// Enrolls and authenticates passkeys whose private keys stay on hardware tokens.
public final class PasskeyService: Sendable {
    private let keyStores: [any KeyStore]
    let store: CredentialStore
    private let counters: SignCounterAllocator
    let logger: Logger
    /// The PIN rules every caller PIN goes through (front doors other than the socket methods reuse them).
    public let pinRules: PINRules
    /// Credential records by id (they change on delete and on lifecycle transitions, which update it), so
    /// assertions need no database read.
    let records = Locked<[ByteKey: CredentialRecord]>([:])
    /// SHA-256 of the relying party ids assertions were made for (the authenticator data's rpIdHash).
    private let rpIdHashes = Locked<[String: [UInt8]]>([:])

    public init(
        keyStores: [any KeyStore], store: CredentialStore, logger: Logger, counterBlock: Int64 = 1024,
        pinBackoff: PINBackoffPolicy = .standard
    ) {
        self.pinRules = PINRules(backoff: pinBackoff, logger: logger)
        self.keyStores = keyStores
        self.store = store
        self.counters = SignCounterAllocator(store: store, blockSize: counterBlock)
        self.logger = logger
    }

    /// Writes the credentials' last use times (assertions record them in memory only). The daemon calls it
    /// every 30 seconds and on a graceful stop.
    /// The CTAP options of credentials made over CTAP (their credProtect level holds on every door).
    public var ctapOptions: CTAPCredentialStore { store.ctapOptions }

    public func flushUsage() async {
        do { try await counters.flushUsage() } catch {
            logger.warning("cannot record the credentials' last use", metadata: ["error": "\(error)"])
        }
    }

    /// All tokens present, across backends, as last seen (no request waits for an enumeration).
    nonisolated(nonsending) public func tokens() async -> [any KeyStoreToken] {
        var all: [any KeyStoreToken] = []
        for ks in keyStores { all += await ks.tokens() }
        return all
    }

    /// All tokens seen by an enumeration after this call, waiting at most `limit` per key store (`tokens.list`).
    public func freshTokens(within limit: Duration = .seconds(1)) async -> [any KeyStoreToken] {
        var all: [any KeyStoreToken] = []
        for ks in keyStores { all += await ks.freshTokens(within: limit) }
        return all
    }

    /// Runs `body` while the daemon presents a card in a PC/SC reader: no key store opens a reader meanwhile
    /// (`KeyStore.beginCardPresentation`).
    public func whilePresentingCard<T: Sendable>(
        _ body: () async throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        for ks in keyStores { await ks.beginCardPresentation() }
        let result: Result<T, TesseraError>
        do throws(TesseraError) { result = .success(try await body()) } catch { result = .failure(error) }
        for ks in keyStores { await ks.endCardPresentation() }
        return try result.get()
    }

    func token(id: String) async -> (any KeyStoreToken)? {
        await tokens().first { $0.id == id }
    }

    // MARK: enroll

    /// What `passkey.enroll` asks for.
    public struct EnrollRequest: Sendable {
        public var rpId: String
        public var userId: [UInt8]
        public var userName: String
        public var userDisplayName: String
        public var challenge: [UInt8]
        public var origin: String?
        public var excludeCredentials: [[UInt8]]
        public var tokenId: String?
        public var pin: String?
        public var attestation: Attestation
        public var userVerification: UserVerification
        /// Ids chosen (and recorded) by the caller before the key exists, so that a caller recovering from a
        /// crash can find the credential or its unrecorded key (`discardUnrecordedKey`). nil: random.
        public var credentialId: [UInt8]?
        public var keyHandle: [UInt8]?
        /// Who sent the PIN (for the per-uid back-off and the log).
        public var caller: PINCaller?
        /// Whether the token's last PIN try may be spent.
        public var allowFinalPinTry: Bool
        /// A client's hash of its clientDataJSON (CTAP): signed instead of one built from `challenge`/`origin`.
        public var clientDataHash: [UInt8]?
        /// Extension outputs (a canonical CBOR map) for the authenticator data.
        public var extensions: [UInt8]?
        /// Make the credential's hmac-secret keys on the token with its key (CTAP hmac-secret); a token that cannot
        /// (`KeyStoreToken.supportsHMACSecret`) fails the enrollment with UNSUPPORTED_PROTOCOL.
        public var hmacSecret = false
        /// The front door verified the user with the token's PIN already (CTAP's pinUvAuthToken): the UV flag is set
        /// without a `pin` here.
        public var verifiedByFrontDoor = false
        /// The provisioning check to apply (nil: none, e.g. a CTAP client that manages its own credentials).
        public var provisioning: ProvisioningRule?
        /// Who asks, for the audit trail ("uid:N", "enrollment:ID"); default the caller's uid.
        public var actor: String?
        /// The identity binding to record with the credential (`IdentityBinding` JSON).
        public var identityBinding: String?
        /// Who asks: the new credential is recorded as theirs, and only their credentials count for
        /// `excludeCredentials` and the provisioning check (nil: the daemon itself).
        public var requester: Requester?

        public init(
            rpId: String, userId: [UInt8], userName: String, userDisplayName: String, challenge: [UInt8],
            origin: String? = nil, excludeCredentials: [[UInt8]] = [], tokenId: String? = nil,
            pin: String? = nil, attestation: Attestation = .none, userVerification: UserVerification = .preferred,
            credentialId: [UInt8]? = nil, keyHandle: [UInt8]? = nil, caller: PINCaller? = nil,
            allowFinalPinTry: Bool = false, provisioning: ProvisioningRule? = nil, actor: String? = nil,
            identityBinding: String? = nil, requester: Requester? = nil
        ) {
            self.requester = requester
            self.caller = caller; self.allowFinalPinTry = allowFinalPinTry
            self.provisioning = provisioning; self.actor = actor; self.identityBinding = identityBinding
            self.rpId = rpId; self.userId = userId; self.userName = userName; self.userDisplayName = userDisplayName
            self.challenge = challenge; self.origin = origin; self.excludeCredentials = excludeCredentials
            self.tokenId = tokenId; self.pin = pin; self.attestation = attestation
            self.userVerification = userVerification; self.credentialId = credentialId; self.keyHandle = keyHandle
        }
    }

    public enum Attestation: String, Sendable { case none, packed }
    public enum UserVerification: String, Sendable { case required, preferred, discouraged }

    public struct EnrollResult: Sendable {
        public var credentialId: [UInt8]
        public var attestationObject: [UInt8]
        public var clientDataJSON: [UInt8]
        public var authenticatorData: [UInt8]
        public var publicKey: [UInt8]
        public var tokenId: String
        public var userVerified: Bool
    }

    /// User names and display names are kept cut to this many bytes of UTF-8 (at a character boundary), on every
    /// door that makes or renames a credential (CTAP 2.1 §6.1.2 allows it; WebAuthn clients do it), so no stored
    /// entity outgrows a CTAPHID message.
    public static let maxNameBytes = 64

    public func enroll(_ r: EnrollRequest) async throws(TesseraError) -> EnrollResult {
        try Self.validate(rpId: r.rpId)
        if r.pin != nil { try pinRules.checkBackoff(r.caller) }
        guard (1...64).contains(r.userId.count) else { throw .invalidInput("user.id must be 1 to 64 bytes") }
        try Self.validate(challenge: r.challenge, clientDataHash: r.clientDataHash)
        let requester = r.requester ?? .daemon
        let token = try await chooseToken(r.tokenId)
        let admission = Self.admission(r.provisioning, tokenId: token.id)
        let verified = try await authorize(
            token, pin: r.pin, userVerification: r.userVerification, verifiedByFrontDoor: r.verifiedByFrontDoor)
        // Which credentials exist is told only to a caller past the PIN (or the token's login): with a PIN, the
        // token checks it here first. Only the caller's own credentials count (docs/API.md, "Owners").
        let checksExisting = !r.excludeCredentials.isEmpty || r.provisioning != nil
        if checksExisting, r.pin != nil {
            try await withPIN(r.pin, caller: r.caller, allowFinalTry: r.allowFinalPinTry, token: token) {
                pin throws(TesseraError) in
                if let pin { try await token.login(pin: pin) }
            }
        }
        for excluded in r.excludeCredentials {
            if let rec = try await store.credential(id: excluded), rec.rpId == r.rpId, requester.owns(rec.ownerUid) {
                throw TesseraError(
                    .credentialExcluded, "a credential in excludeCredentials already exists on token \(rec.tokenId)")
            }
        }
        // The provisioning check, before a key is made (a quick refusal), and again in the transaction that
        // records the credential (the one that counts: a concurrent enrollment may have passed it meanwhile).
        if r.provisioning != nil {
            _ = try admission(
                try await store.list(rpId: r.rpId, userId: r.userId).filter { $0.ownerUid == requester.ownerUid })
        }

        if let id = r.credentialId, !(16...255).contains(id.count) {
            throw .invalidInput("credentialId must be 16 to 255 bytes")
        }
        if let h = r.keyHandle, !(1...64).contains(h.count) { throw .invalidInput("keyHandle must be 1 to 64 bytes") }
        let credentialId = r.credentialId ?? SecureRandom.bytes(32)
        let keyHandle = r.keyHandle ?? SecureRandom.bytes(16)
        if r.userVerification == .required && r.clientDataHash == nil {
            // Made with user verification required: never used without it, on any door (credProtect 3). Written
            // before the key, as the CTAP front door writes its options.
            try await ctapOptions.save(
                CTAPCredentialOptions(credentialId: Data(credentialId), discoverable: true, credProtect: 3))
        }
        let label = "tessera:\(Base64URL.encode(credentialId))"
        let point = try await withPIN(r.pin, caller: r.caller, allowFinalTry: r.allowFinalPinTry, token: token) {
            pin throws(TesseraError) in
            try await token.generateP256Key(handle: keyHandle, label: label, pin: pin)
        }
        await Failpoint.reach("passkey.afterKeyGeneration")
        let clientData =
            r.clientDataHash == nil
            ? CollectedClientData(type: .create, challenge: r.challenge, origin: r.origin ?? "https://\(r.rpId)").json
            : []
        let cose: [UInt8]
        let authData: [UInt8]
        let attestationObject: [UInt8]
        do {
            if r.hmacSecret { try await token.createHMACSecrets(handle: keyHandle, label: label) }
            cose = try COSEKey.ec2P256(ecPoint: point)
            var flags: AuthenticatorFlags = [.userPresent, .attestedCredentialData]
            if verified { flags.insert(.userVerified) }
            authData =
                AuthenticatorData(
                    rpId: r.rpId, flags: flags, signCount: 0,
                    attestedCredential: try AttestedCredentialData(
                        aaguid: tesseraAAGUID, credentialId: credentialId, publicKey: cose),
                    extensions: r.extensions
                ).encoded
            switch r.attestation {
            case .none:
                attestationObject = AttestationObject.none(authData: authData)
            case .packed:
                // The PIN was verified by the key generation just before.
                let raw = try await token.signP256(
                    handle: keyHandle,
                    message: Self.message(
                        authData, clientData: clientData, clientDataHash: r.clientDataHash), pin: nil)
                attestationObject = AttestationObject.packedSelf(
                    authData: authData, signatureDER: try ECDSASignature.derFromRaw(raw))
            }
            let replaced = try await store.insert(
                CredentialRecord(
                    credentialId: Data(credentialId), rpId: r.rpId, userId: Data(r.userId),
                    userName: r.userName.utf8Prefix(Self.maxNameBytes),
                    userDisplayName: r.userDisplayName.utf8Prefix(Self.maxNameBytes), tokenId: token.id,
                    backend: token.backend, keyHandle: Data(keyHandle), publicKey: Data(cose),
                    identityBinding: r.identityBinding, ownerUid: requester.ownerUid),
                admit: admission, actor: r.actor ?? r.caller.map { "uid:\($0.uid)" } ?? "daemon", reason: nil)
            remember(replaced)
        } catch {
            // Nothing recorded: do not leave an orphan key behind.
            try? await token.deleteKey(handle: keyHandle, pin: nil)
            throw error
        }
        logger.info("passkey enrolled", metadata: ["rpId": "\(r.rpId)", "token": "\(token.id)", "uv": "\(verified)"])
        return EnrollResult(
            credentialId: credentialId, attestationObject: attestationObject, clientDataJSON: clientData,
            authenticatorData: authData, publicKey: cose, tokenId: token.id, userVerified: verified)
    }

    /// Deletes a key that `enroll` may have generated under `handle` without recording its credential (the
    /// process died in between). Does nothing when the token has no such key; TOKEN_NOT_PRESENT when the token
    /// is absent.
    public func discardUnrecordedKey(tokenId: String, handle: [UInt8]) async throws(TesseraError) {
        guard let token = await token(id: tokenId) else {
            throw TesseraError(.tokenNotPresent, "token \(tokenId) is not present")
        }
        do {
            try await token.deleteKey(handle: handle, pin: nil)
            logger.notice("deleted a key generated but never recorded", metadata: ["token": "\(tokenId)"])
        } catch  where error.code == .passkeyNotFound {}
    }

    /// The registration of a recorded credential rebuilt with `none` attestation (signCount 0, no UV flag):
    /// what a caller that lost `enroll`'s answer in a crash can still hand on.
    public func rebuiltRegistration(of record: CredentialRecord, challenge: [UInt8], origin: String?)
        throws(TesseraError) -> EnrollResult
    {
        let credentialId = [UInt8](record.credentialId)
        let cose = [UInt8](record.publicKey)
        let authData = AuthenticatorData(
            rpId: record.rpId, flags: [.userPresent, .attestedCredentialData], signCount: 0,
            attestedCredential: try AttestedCredentialData(
                aaguid: tesseraAAGUID, credentialId: credentialId, publicKey: cose)
        ).encoded
        let clientData = CollectedClientData(
            type: .create, challenge: challenge, origin: origin ?? "https://\(record.rpId)"
        ).json
        return EnrollResult(
            credentialId: credentialId, attestationObject: AttestationObject.none(authData: authData),
            clientDataJSON: clientData, authenticatorData: authData, publicKey: cose,
            tokenId: record.tokenId, userVerified: false)
    }

    // MARK: authenticate

    public struct AuthenticateRequest: Sendable {
        public var rpId: String
        public var challenge: [UInt8]
        public var allowCredentials: [[UInt8]]
        public var origin: String?
        public var pin: String?
        public var userVerification: UserVerification
        /// Who sent the PIN (for the per-uid back-off and the log).
        public var caller: PINCaller?
        /// Whether the token's last PIN try may be spent.
        public var allowFinalPinTry: Bool
        /// A client's hash of its clientDataJSON (CTAP): signed instead of one built from `challenge`/`origin`.
        public var clientDataHash: [UInt8]?
        /// Whether the user's presence was tested (the UP flag); CTAP's `up: false` assertions clear it.
        public var userPresent = true
        /// As `EnrollRequest.verifiedByFrontDoor`.
        public var verifiedByFrontDoor = false
        /// Extension outputs (a canonical CBOR map) for the authenticator data.
        public var extensions: [UInt8]?
        /// Who asks: another uid's credentials in `allowCredentials` count as unknown (nil: the daemon itself).
        public var requester: Requester?
        public init(
            rpId: String, challenge: [UInt8], allowCredentials: [[UInt8]], origin: String? = nil,
            pin: String? = nil, userVerification: UserVerification = .preferred, caller: PINCaller? = nil,
            allowFinalPinTry: Bool = false, requester: Requester? = nil
        ) {
            self.requester = requester
            self.caller = caller; self.allowFinalPinTry = allowFinalPinTry
            self.rpId = rpId; self.challenge = challenge; self.allowCredentials = allowCredentials
            self.origin = origin; self.pin = pin; self.userVerification = userVerification
        }
    }

    public struct Assertion: Sendable {
        public var credentialId: [UInt8]
        public var authenticatorData: [UInt8]
        public var clientDataJSON: [UInt8]
        public var signature: [UInt8]
        public var userHandle: [UInt8]
        public var signCount: UInt32
        public var userVerified: Bool

        /// The assertion as `passkey.authenticate` returns it (byte strings base64url).
        public var json: [String: JSONValue] {
            [
                "credentialId": .string(Base64URL.encode(credentialId)),
                "authenticatorData": .string(Base64URL.encode(authenticatorData)),
                "clientDataJSON": .string(Base64URL.encode(clientDataJSON)),
                "signature": .string(Base64URL.encode(signature)),
                "userHandle": .string(Base64URL.encode(userHandle)),
                "signCount": .number(Double(signCount)),
                "userVerified": .bool(userVerified),
            ]
        }
    }

    nonisolated(nonsending) public func authenticate(_ r: AuthenticateRequest) async throws(TesseraError) -> Assertion {
        try Self.validate(rpId: r.rpId)
        guard !r.allowCredentials.isEmpty else { throw .invalidInput("allowCredentials must not be empty") }
        try Self.validate(challenge: r.challenge, clientDataHash: r.clientDataHash)
        var candidates: [CredentialRecord] = []
        for id in r.allowCredentials {
            if let rec = try await cachedRecord(id), rec.rpId == r.rpId, (r.requester ?? .daemon).owns(rec.ownerUid) {
                candidates.append(rec)
            }
        }
        guard !candidates.isEmpty else {
            throw TesseraError(.passkeyNotFound, "none of allowCredentials is known for rpId \(r.rpId)")
        }
        candidates = try Self.signing(candidates)
        let present = await tokens()
        guard
            let (record, token) = candidates.lazy.compactMap({ rec in
                present.first(where: { $0.id == rec.tokenId }).map { (rec, $0) }
            }).first
        else {
            throw TesseraError(
                .tokenNotPresent, "the token holding this passkey (\(candidates[0].tokenId)) is not present")
        }
        // Without a PIN the token's own answer (PIN_REQUIRED when not logged in) comes from the signing call.
        let verified = try await authorize(
            token, pin: r.pin, userVerification: r.userVerification, verifiedByFrontDoor: r.verifiedByFrontDoor,
            checkLogin: false)
        // A credential made with credProtect userVerificationRequired is never used without UV, whichever door
        // asks (levels 1 and 2 allow it: this request names the credential).
        if !verified, try await ctapOptions.cachedOptions([record.credentialId])[record.credentialId]?.credProtect == 3
        {
            throw TesseraError(
                .pinRequired, "this credential requires user verification (credProtect 3): give the token PIN")
        }
        let credentialId = [UInt8](record.credentialId)
        let count = try await counters.next(for: credentialId, persistedCeiling: record.counterReserved)
        var flags: AuthenticatorFlags = r.userPresent ? [.userPresent] : []
        if verified { flags.insert(.userVerified) }
        let authData = AuthenticatorData(
            rpIdHash: rpIdHash(r.rpId), flags: flags, signCount: count, attestedCredential: nil,
            extensions: r.extensions
        ).encoded
        let clientData =
            r.clientDataHash == nil
            ? CollectedClientData(type: .get, challenge: r.challenge, origin: r.origin ?? "https://\(r.rpId)").json : []
        let message = Self.message(authData, clientData: clientData, clientDataHash: r.clientDataHash)
        let raw = try await withPIN(r.pin, caller: r.caller, allowFinalTry: r.allowFinalPinTry, token: token) {
            pin throws(TesseraError) in
            try await token.signP256(handle: [UInt8](record.keyHandle), message: message, pin: pin)
        }
        return Assertion(
            credentialId: credentialId, authenticatorData: authData, clientDataJSON: clientData,
            signature: try ECDSASignature.derFromRaw(raw), userHandle: [UInt8](record.userId),
            signCount: count, userVerified: verified)
    }

    // MARK: credentials

    /// HMAC-SHA-256(CredRandom, salt) for each salt, concatenated, computed on the token holding credential `id`
    /// with its CredRandom for use with UV or without (CTAP hmac-secret). The token must be logged in where its
    /// keys need it (PIN_REQUIRED otherwise); UNSUPPORTED_PROTOCOL for a store without hmac-secret keys.
    public func hmacSecret(id: [UInt8], userVerified: Bool, salts: [[UInt8]], requester: Requester? = nil)
        async throws(TesseraError) -> [UInt8]
    {
        guard let record = try await cachedRecord(id), (requester ?? .daemon).owns(record.ownerUid) else {
            throw TesseraError(.passkeyNotFound, "no credential with this id")
        }
        guard let token = await token(id: record.tokenId) else {
            throw TesseraError(.tokenNotPresent, "the token holding this passkey (\(record.tokenId)) is not present")
        }
        var output: [UInt8] = []
        for salt in salts {
            output += try await token.hmacSecret(
                handle: [UInt8](record.keyHandle), userVerified: userVerified, salt: salt)
        }
        return output
    }

    /// The credentials `requester` owns (nil: the daemon itself, all), filtered by relying party and/or user handle.
    public func credentials(rpId: String?, userId: [UInt8]?, requester: Requester? = nil) async throws(TesseraError)
        -> [CredentialRecord]
    {
        let requester = requester ?? .daemon
        return try await store.list(rpId: rpId, userId: userId).filter { requester.owns($0.ownerUid) }
    }

    /// The credential `id` from the in-memory cache assertions use (nil when unknown, or another uid's): no database
    /// read once seen.
    public func cachedCredential(id: [UInt8], requester: Requester? = nil) async throws(TesseraError)
        -> CredentialRecord?
    {
        guard let rec = try await cachedRecord(id), (requester ?? .daemon).owns(rec.ownerUid) else { return nil }
        return rec
    }

    /// The credential `id`; PASSKEY_NOT_FOUND when there is none or it is another uid's (the same answer).
    public func credential(id: [UInt8], requester: Requester? = nil) async throws(TesseraError) -> CredentialRecord {
        guard let rec = try await store.credential(id: id), (requester ?? .daemon).owns(rec.ownerUid) else {
            throw TesseraError(.passkeyNotFound, "no credential with this id")
        }
        return rec
    }

    /// Hands credential `id` to `owner` (an administrator's act, audited); PASSKEY_NOT_FOUND when there is none.
    public func chown(id: [UInt8], to owner: UInt32, actor: String) async throws(TesseraError) -> CredentialRecord {
        guard let rec = try await store.chown(id: id, to: owner, actor: actor) else {
            throw TesseraError(.passkeyNotFound, "no credential with this id")
        }
        records.withLock { $0[ByteKey(id)] = rec }
        logger.notice("credential owner changed", metadata: ["owner": "\(owner)", "actor": "\(actor)"])
        return rec
    }

    /// Deletes the key on its token, then the metadata (noting it in the audit trail); returns the deleted
    /// record. A missing token keeps the metadata and fails clearly. `pin` logs in first under the PIN rules
    /// (tokens whose keys need a login answer PIN_REQUIRED without it).
    @discardableResult
    public func delete(
        id: [UInt8], pin: String? = nil, caller: PINCaller? = nil,
        allowFinalPinTry: Bool = false, actor: String? = nil, requester: Requester? = nil
    ) async throws(TesseraError) -> CredentialRecord {
        let rec = try await credential(id: id, requester: requester)
        if pin != nil { try pinRules.checkBackoff(caller) }
        guard let token = await token(id: rec.tokenId) else {
            throw TesseraError(
                .tokenNotPresent,
                "token \(rec.tokenId) holding this passkey is not present; metadata kept, nothing deleted")
        }
        do {
            try await withPIN(pin, caller: caller, allowFinalTry: allowFinalPinTry, token: token) {
                pin throws(TesseraError) in
                try await token.deleteKey(handle: [UInt8](rec.keyHandle), pin: pin)
            }
        } catch  where error.code == .passkeyNotFound {
            logger.warning("key of credential already absent from its token; removing metadata")
        }
        try await store.delete(
            id: id,
            event: CredentialEvent(
                credentialId: Data(id), at: Date(), fromState: rec.state.rawValue, toState: "deleted",
                actor: actor ?? caller.map { "uid:\($0.uid)" } ?? "daemon", reason: nil))
        _ = records.withLock { $0.removeValue(forKey: ByteKey(id)) }
        await counters.forget(id)
        return rec
    }

    /// Replaces the user name and display name kept with credential `id` (CTAP updateUserInformation), cut to
    /// `maxNameBytes`; PASSKEY_NOT_FOUND when there is no such credential or it is another uid's.
    public func updateUser(id: [UInt8], name: String, displayName: String, requester: Requester? = nil)
        async throws(TesseraError)
    {
        _ = try await credential(id: id, requester: requester)
        guard
            try await store.updateUser(
                id: id, name: name.utf8Prefix(Self.maxNameBytes), displayName: displayName.utf8Prefix(Self.maxNameBytes)
            )
        else {
            throw TesseraError(.passkeyNotFound, "no credential with this id")
        }
        _ = records.withLock { $0.removeValue(forKey: ByteKey(id)) }
    }

    // MARK: helpers

    /// The token a user names, the one rule wherever a token is named (`tokenId` parameters, `ssh-add -s`): its
    /// id, else its label when exactly one present token has it. TOKEN_NOT_PRESENT when none matches,
    /// INVALID_INPUT when the label is ambiguous.
    public func token(named name: String) async throws(TesseraError) -> any KeyStoreToken {
        if let t = try await Self.token(named: name, in: await tokens()) { return t }
        // One the last enumeration did not see (just inserted or made): a fresh one, waited for briefly.
        if let t = try await Self.token(named: name, in: await freshTokens()) { return t }
        throw TesseraError(
            .tokenNotPresent, "no token with id or label '\(name)' is present (tessera tokens lists them)")
    }

    private static func token(
        named name: String, in all: [any KeyStoreToken]
    ) async throws(TesseraError) -> (any KeyStoreToken)? {
        if let t = all.first(where: { $0.id == name }) { return t }
        var labelled: [any KeyStoreToken] = []
        for t in all where await t.describe()["label"]?.stringValue == name { labelled.append(t) }
        if labelled.count > 1 {
            throw TesseraError(
                .invalidInput,
                "\(labelled.count) tokens are labelled '\(name)' (\(labelled.map(\.id).joined(separator: ", "))): name one by its id"
            )
        }
        return labelled.first
    }

    /// The token named `name` (id or label, `token(named:)`), or with nil the first token present;
    /// TOKEN_NOT_PRESENT when there is none.
    public func chooseToken(_ name: String?) async throws(TesseraError) -> any KeyStoreToken {
        if let name { return try await token(named: name) }
        guard let t = await tokens().first else { throw TesseraError(.tokenNotPresent, "no token is present") }
        return t
    }

    /// Runs `operation` with the caller's PIN under `pinRules`, or with nil when the request has no PIN.
    nonisolated(nonsending) private func withPIN<T>(
        _ pin: String?, caller: PINCaller?, allowFinalTry: Bool, token: any KeyStoreToken,
        _ operation: nonisolated(nonsending) (PINAttempt?) async throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        guard let pin else { return try await operation(nil) }
        return try await pinRules.withCallerPIN(pin, caller: caller, allowFinalTry: allowFinalTry, tokenId: token.id) {
            (attempt: PINAttempt) async throws(TesseraError) -> T in try await operation(attempt)
        }
    }

    /// With a PIN, the operation is user-verified (the token checks the PIN in the operation itself and fails it
    /// with PIN_INVALID); without one, checks that the request does not require UV and the token can sign.
    nonisolated(nonsending) private func authorize(
        _ token: any KeyStoreToken, pin: String?, userVerification: UserVerification, verifiedByFrontDoor: Bool,
        checkLogin: Bool = true
    ) async throws(TesseraError) -> Bool {
        if let pin {
            try PINRules.validate(pin)
            return true
        }
        if verifiedByFrontDoor {
            if checkLogin, await token.needsPIN() {
                throw TesseraError(.pinRequired, "token \(token.id) needs its PIN before it can sign")
            }
            return true
        }
        if userVerification == .required {
            throw TesseraError(.pinRequired, "userVerification is required: give the token PIN")
        }
        if checkLogin, await token.needsPIN() {
            throw TesseraError(.pinRequired, "token \(token.id) needs its PIN before it can sign")
        }
        return false
    }

    /// SHA-256 of `rpId`, computed once per relying party.
    private func rpIdHash(_ rpId: String) -> [UInt8] {
        if let hash = rpIdHashes.withLock({ $0[rpId] }) { return hash }
        let hash = MessageDigest.sha256(Array(rpId.utf8))
        rpIdHashes.withLock { cache in
            if cache.count >= 1024 { cache.removeAll(keepingCapacity: true) }
            cache[rpId] = hash
        }
        return hash
    }

    nonisolated(nonsending) private func cachedRecord(_ id: [UInt8]) async throws(TesseraError) -> CredentialRecord? {
        if let hit = records.withLock({ $0[ByteKey(id)] }) { return hit }
        guard let rec = try await store.credential(id: id) else { return nil }
        records.withLock { cache in
            if cache.count >= 65_536 { cache.removeAll(keepingCapacity: true) }
            cache[ByteKey(id)] = rec
        }
        return rec
    }

    /// A challenge of 1 to 1024 bytes, or (CTAP) a 32-byte clientDataHash.
    static func validate(challenge: [UInt8], clientDataHash: [UInt8]?) throws(TesseraError) {
        if let clientDataHash {
            guard clientDataHash.count == 32 else { throw .invalidInput("clientDataHash must be 32 bytes") }
            return
        }
        guard !challenge.isEmpty, challenge.count <= 1024 else {
            throw .invalidInput("challenge must be 1 to 1024 bytes")
        }
    }

    /// What the credential key signs: authenticatorData ‖ SHA-256(clientDataJSON), or ‖ the client's hash.
    static func message(_ authData: [UInt8], clientData: [UInt8], clientDataHash: [UInt8]?) -> [UInt8] {
        if let clientDataHash { return authData + clientDataHash }
        return WebAuthnSigning.dataToSign(authenticatorData: authData, clientDataJSON: clientData)
    }

    static func validate(rpId: String) throws(TesseraError) {
        // One pass over the bytes (this runs on every assertion): a-z 0-9 - . only, no leading, trailing or double dot.
        var count = 0
        var previous: UInt8 = UInt8(ascii: ".")
        var valid = true
        for c in rpId.utf8 {
            switch c {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"): break
            case UInt8(ascii: "."): if previous == UInt8(ascii: ".") { valid = false }
            default: valid = false
            }
            previous = c
            count += 1
        }
        guard valid, count > 0, count <= 253, previous != UInt8(ascii: ".") else {
            throw .invalidInput("rpId must be a lower-case domain name")
        }
    }
}
