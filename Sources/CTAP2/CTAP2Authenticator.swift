import CBOR
import TesseraCore

/// A stored credential as the authenticator sees it.
public struct CTAP2Credential: Sendable, Equatable {
    public var id: [UInt8]
    public var rpId: String
    public var user: CTAP2User
    public var discoverable: Bool
    public var credProtect: CredProtect
    /// The credential's public key, COSE_Key bytes (credentialManagement returns it).
    public var publicKey: [UInt8]
    /// The credential has hmac-secret keys (made with the extension on a store that can hold them).
    public var hmacSecret: Bool
    public init(
        id: [UInt8], rpId: String, user: CTAP2User, discoverable: Bool, credProtect: CredProtect,
        publicKey: [UInt8] = [], hmacSecret: Bool = false
    ) {
        self.id = id; self.rpId = rpId; self.user = user; self.discoverable = discoverable;
        self.credProtect = credProtect; self.publicKey = publicKey; self.hmacSecret = hmacSecret
    }
}

/// A new credential's attestation, as makeCredential returns it.
public struct CTAP2Attestation: Sendable, Equatable {
    public var format: String
    public var authData: [UInt8]
    public var statement: CBORValue
    public init(format: String, authData: [UInt8], statement: CBORValue) {
        self.format = format; self.authData = authData; self.statement = statement
    }
}

/// What the user is asked to approve.
public struct PresenceRequest: Sendable, Equatable {
    /// "makeCredential", "getAssertion" or "selection".
    public var operation: String
    public var rpId: String?
    public var userName: String?
    public init(operation: String, rpId: String?, userName: String?) {
        self.operation = operation; self.rpId = rpId; self.userName = userName
    }
}

/// The credential store and keys behind the authenticator (in the daemon: the passkey service and its tokens).
public protocol CTAP2Backend: Sendable {
    /// Credentials of `rpId`, newest first: those in `ids`, or with nil every discoverable one.
    func credentials(rpId: String, ids: [[UInt8]]?) async throws(CTAP2Error) -> [CTAP2Credential]
    /// Creates a credential (key on the token, record in the store) and returns its packed self attestation over
    /// authData with `extensions` (canonical CBOR map) when given.
    /// `userVerified`: a pinUvAuthToken verified the request (the UV flag). `hmacSecret`: make the credential's
    /// hmac-secret keys with it (only asked when `supportsHMACSecret` said yes).
    func makeCredential(
        rpId: String, user: CTAP2User, clientDataHash: [UInt8], discoverable: Bool,
        credProtect: CredProtect, extensions: [UInt8]?, hmacSecret: Bool, userVerified: Bool
    ) async throws(CTAP2Error) -> CTAP2Attestation
    /// Signs authData ‖ clientDataHash with the credential's key (the sign count advances); returns
    /// (authData, DER signature). authData carries `extensions` (canonical CBOR map) when given.
    func assert(
        _ credential: CTAP2Credential, clientDataHash: [UInt8], userPresent: Bool, userVerified: Bool,
        extensions: [UInt8]?
    ) async throws(CTAP2Error) -> (authData: [UInt8], signature: [UInt8])
    /// Whether a new credential can have hmac-secret keys (the store of new credentials makes and uses them on the
    /// token).
    func supportsHMACSecret() async -> Bool
    /// HMAC-SHA-256(CredRandom, salt) of each salt, concatenated, from the credential's CredRandom for use with UV
    /// or without (§12.5), computed where the secret is (on the token).
    func hmacSecret(_ credential: CTAP2Credential, userVerified: Bool, salts: [[UInt8]]) async throws(CTAP2Error)
        -> [UInt8]
    /// Waits for the user's approval; throws OPERATION_DENIED (refused or no presence source),
    /// USER_ACTION_TIMEOUT, or KEEPALIVE_CANCEL when the task is cancelled.
    func userPresence(_ request: PresenceRequest) async throws(CTAP2Error)
    /// PIN tries a CTAP client may still spend on the token (docs/CTAP.md: the token's counter where it tells).
    func pinRetries() async throws(CTAP2Error) -> Int
    /// Checks LEFT(SHA-256(PIN), 16) on the token, one token try at most: PIN_INVALID when wrong, PIN_BLOCKED when
    /// no try may be spent over CTAP.
    func verifyPIN(hash: [UInt8]) async throws(CTAP2Error)
    /// Changes the token's PIN from the one hashing to `currentHash` to the one hashing to `newHash` (one token
    /// try at most; errors as `verifyPIN`).
    func changePIN(currentHash: [UInt8], newHash: [UInt8]) async throws(CTAP2Error)
    /// Every discoverable credential (all RPs) whose token is present, newest first.
    func discoverableCredentials() async throws(CTAP2Error) -> [CTAP2Credential]
    /// Deletes the credential: its key on the token and its record.
    func deleteCredential(_ credential: CTAP2Credential) async throws(CTAP2Error)
    /// Replaces the user name and display name kept with the credential.
    func updateUser(_ credential: CTAP2Credential, user: CTAP2User) async throws(CTAP2Error)
}

/// Who sends a request: the transport's client (connection) and its CTAPHID channel, and the client's uid when
/// the transport knows it. getNextAssertion and credential enumeration continue only on the channel that began
/// them; wrong PINs count against the uid (`nil`: a client without peer credentials, such as the uhid device).
public struct CTAP2Session: Sendable, Equatable {
    public var connection: UInt64
    public var channel: UInt32
    public var uid: UInt32?
    public init(connection: UInt64, channel: UInt32, uid: UInt32?) {
        self.connection = connection; self.channel = channel; self.uid = uid
    }
    /// The one client of an authenticator driven directly (tests, the fuzzer).
    public static let local = CTAP2Session(connection: 0, channel: 0, uid: nil)
}

/// Progress an authenticator reports while it works (the transport turns it into KEEPALIVE).
public enum CTAP2Progress: Sendable {
    case processing
    case waitingForUserPresence
}

/// The CTAP 2.1 authenticator state machine (§6) over a `CTAP2Backend`: decodes a request (command byte ‖ CBOR),
/// runs it, and encodes the response (status byte ‖ CBOR). One request at a time (the transport ensures it).
public actor CTAP2Authenticator {
    /// What getInfo reports.
    public struct Info: Sendable {
        public var aaguid: [UInt8]
        public var maxMessageSize: Int
        /// Whether ClientPIN and pinUvAuthParam are offered (the token's PIN is in the hashed form, docs/CTAP.md).
        public var clientPIN: Bool
        public init(aaguid: [UInt8], maxMessageSize: Int, clientPIN: Bool = false) {
            self.aaguid = aaguid; self.maxMessageSize = maxMessageSize; self.clientPIN = clientPIN
        }
    }

    struct PendingAssertions {
        var session: CTAP2Session
        var credentials: [CTAP2Credential]
        var clientDataHash: [UInt8]
        var userPresent: Bool
        var userVerified: Bool
        var hmacSecret: HMACSecretRequest?
        var expires: ContinuousClock.Instant
    }

    /// A checked hmac-secret input: the protocol, its shared secret and the decrypted salts (1 or 2 of 32 bytes).
    struct HMACSecretRequest {
        var proto: PINUVAuthProtocol
        var sharedSecret: [UInt8]
        var salts: [[UInt8]]
    }

    let backend: any CTAP2Backend
    private let info: Info
    private var pending: PendingAssertions?
    var pin = PINState()
    /// What enumerateRPsGetNextRP and enumerateCredentialsGetNextCredential return next.
    var enumeration = CredentialEnumeration()
    /// How long getNextAssertion may follow getAssertion (§6.3: 30 s).
    static let nextAssertionWindow: Duration = .seconds(30)

    public init(backend: any CTAP2Backend, info: Info) {
        self.backend = backend
        self.info = info
    }

    /// Handles one CTAPHID_CBOR payload from `session`; never throws: failures become a status byte.
    public func handle(
        _ message: [UInt8], from session: CTAP2Session = .local,
        progress: @Sendable (CTAP2Progress) -> Void = { _ in }
    ) async -> [UInt8] {
        do {
            let body = try await run(message, from: session, progress: progress)
            return [CTAP2Status.ok.rawValue] + (body.map { $0.encodedWithDistinctKeys() } ?? [])
        } catch {
            return [error.status.rawValue]
        }
    }

    /// As `handle`, with the failure's message (for the log).
    public func run(
        _ message: [UInt8], from session: CTAP2Session = .local,
        progress: @Sendable (CTAP2Progress) -> Void = { _ in }
    ) async throws(CTAP2Error) -> CBORValue? {
        guard let commandByte = message.first else { throw CTAP2Error(.invalidLength, "empty request") }
        guard let command = CTAP2Command(rawValue: commandByte) else {
            throw CTAP2Error(.invalidCommand, "unknown command 0x\(String(commandByte, radix: 16))")
        }
        // Another command of the same channel ends its getNextAssertion or enumeration state; other channels'
        // commands leave it alone.
        if command != .getNextAssertion, pending?.session == session { pending = nil }
        if command != .credentialManagement, enumeration.session == session { enumeration = CredentialEnumeration() }
        let parameters: CBORValue?
        if message.count > 1 {
            do {
                parameters = try CBORValue(
                    decoding: Array(message.dropFirst()),
                    options: CBORDecodingOptions(maxDepth: 8, maxItems: 4096))
            } catch {
                throw CTAP2Error(.invalidCBOR, "request CBOR: \(error.message)")
            }
        } else {
            parameters = nil
        }
        func required() throws(CTAP2Error) -> CBORValue {
            guard let parameters else { throw CTAP2Error(.missingParameter, "parameters missing") }
            return parameters
        }
        switch command {
        case .getInfo: return getInfo()
        case .makeCredential: return try await makeCredential(MakeCredentialRequest(required()), progress: progress)
        case .getAssertion:
            return try await getAssertion(GetAssertionRequest(required()), session: session, progress: progress)
        case .getNextAssertion: return try await getNextAssertion(session: session)
        case .selection:
            try await presence(PresenceRequest(operation: "selection", rpId: nil, userName: nil), progress: progress)
            return nil
        case .reset:
            throw CTAP2Error(.operationDenied, "authenticatorReset is refused: tokens are not wiped through CTAP")
        case .clientPIN where info.clientPIN:
            return try await clientPIN(ClientPINRequest(required()), uid: session.uid)
        case .credentialManagement where info.clientPIN:
            return try await credentialManagement(CredentialManagementRequest(required()), session: session)
        case .clientPIN, .credentialManagement:
            throw CTAP2Error(.invalidCommand, "command 0x\(String(commandByte, radix: 16)) is not supported")
        }
    }

    func getInfo() -> CBORValue {
        var options: [(key: CBORValue, value: CBORValue)] = [
            ("rk", true), ("up", true), ("uv", false), ("plat", false),
        ]
        if info.clientPIN {
            // makeCredUvNotRqd: credentials are still made without UV (docs/CTAP.md).
            options += [
                ("credMgmt", true), ("clientPin", true), ("pinUvAuthToken", true), ("makeCredUvNotRqd", true),
            ]
        }
        var out: [(key: CBORValue, value: CBORValue)] = [
            (1, ["FIDO_2_0", "FIDO_2_1"]),
            // hmac-secret needs ClientPIN's key agreement (docs/CTAP.md).
            (2, info.clientPIN ? ["credProtect", "hmac-secret"] : ["credProtect"]), (3, .byteString(info.aaguid)),
            (4, .map(options)),
            (5, CBORValue(info.maxMessageSize)),
        ]
        if info.clientPIN { out.append((6, [2, 1])) }
        out += [(9, ["usb"]), (10, [["alg": CBORValue(-7), "type": "public-key"]])]
        return .map(out)
    }

    func makeCredential(_ r: MakeCredentialRequest, progress: @Sendable (CTAP2Progress) -> Void)
        async throws(CTAP2Error) -> CBORValue
    {
        guard r.clientDataHash.count == 32 else { throw CTAP2Error(.invalidLength, "clientDataHash must be 32 bytes") }
        guard r.algorithms.contains(-7) else { throw CTAP2Error(.unsupportedAlgorithm, "only ES256 (-7) is supported") }
        if r.userPresence == false { throw CTAP2Error(.invalidOption, "makeCredential always tests user presence") }
        let presenceRequest = PresenceRequest(operation: "makeCredential", rpId: r.rpId, userName: r.user.name)
        let verified = try await userVerification(
            r.pinUvAuthParam, protocol: r.pinUvAuthProtocol, uv: r.userVerification, clientDataHash: r.clientDataHash,
            permission: .makeCredential, rpId: r.rpId, probe: presenceRequest, progress: progress)
        // CTAP 2.1 §6.1.2 step 6: with a PIN set, makeCredUvNotRqd spares only non-discoverable credentials UV.
        if info.clientPIN && r.residentKey && !verified {
            throw CTAP2Error(.pinUvAuthTokenRequired, "a discoverable credential needs user verification (PIN)")
        }
        if !r.excludeList.isEmpty {
            let excluded = try await backend.credentials(rpId: r.rpId, ids: r.excludeList)
                .filter { verified || $0.credProtect != .userVerificationRequired }
            if !excluded.isEmpty {
                try await presence(presenceRequest, progress: progress)
                throw CTAP2Error(.credentialExcluded, "a credential in excludeList exists")
            }
        }
        try await presence(presenceRequest, progress: progress)
        progress(.processing)
        // hmac-secret only where the store holds its keys, and with ClientPIN (its key agreement); else no output.
        let hmacSecret = r.hmacSecret && info.clientPIN ? await backend.supportsHMACSecret() : false
        // Canonical order: "credProtect" < "hmac-secret" (same length, bytewise).
        var outputs: [(key: CBORValue, value: CBORValue)] = []
        if let level = r.credProtect { outputs.append(("credProtect", CBORValue(Int(level.rawValue)))) }
        if hmacSecret { outputs.append(("hmac-secret", true)) }
        let attestation = try await backend.makeCredential(
            rpId: r.rpId, user: r.user, clientDataHash: r.clientDataHash, discoverable: r.residentKey,
            credProtect: r.credProtect ?? .userVerificationOptional,
            extensions: outputs.isEmpty ? nil : CBORValue.map(outputs).encodedWithDistinctKeys(),
            hmacSecret: hmacSecret, userVerified: verified)
        if verified { usedPinUvAuthToken() }
        return [1: .textString(attestation.format), 2: .byteString(attestation.authData), 3: attestation.statement]
    }

    func getAssertion(
        _ r: GetAssertionRequest, session: CTAP2Session, progress: @Sendable (CTAP2Progress) -> Void
    ) async throws(CTAP2Error) -> CBORValue {
        guard r.clientDataHash.count == 32 else { throw CTAP2Error(.invalidLength, "clientDataHash must be 32 bytes") }
        let verified = try await userVerification(
            r.pinUvAuthParam, protocol: r.pinUvAuthProtocol, uv: r.userVerification, clientDataHash: r.clientDataHash,
            permission: .getAssertion, rpId: r.rpId,
            probe: PresenceRequest(operation: "getAssertion", rpId: r.rpId, userName: nil), progress: progress)
        // Without ClientPIN no platform has the key agreement key: the input is ignored.
        let hmacSecret = try r.hmacSecret.flatMap { input throws(CTAP2Error) in
            info.clientPIN ? try hmacSecretRequest(input, userPresence: r.userPresence) : nil
        }
        let found = try await backend.credentials(rpId: r.rpId, ids: r.allowList)
        let usable = found.filter { c in
            if verified { return true }
            switch c.credProtect {
            case .userVerificationOptional: return true
            case .userVerificationOptionalWithCredentialIDList: return r.allowList != nil
            case .userVerificationRequired: return false
            }
        }
        guard let first = usable.first else { throw CTAP2Error(.noCredentials, "no usable credential for \(r.rpId)") }
        if r.userPresence {
            try await presence(
                PresenceRequest(
                    operation: "getAssertion", rpId: r.rpId,
                    userName: r.allowList == nil && usable.count == 1 ? first.user.name : nil),
                progress: progress)
            progress(.processing)
        }
        var response = try await assertion(
            first, clientDataHash: r.clientDataHash, userPresent: r.userPresence, userVerified: verified,
            hmacSecret: hmacSecret, discoverable: r.allowList == nil)
        // §6.2.2: the permissions go with a presence-tested assertion only (a platform's `up: false` pre-flight over
        // an allowList, as python-fido2's, keeps them for the real request).
        if verified && r.userPresence { usedPinUvAuthToken() }
        if r.allowList == nil, usable.count > 1 {
            response.append((CBORValue(5), CBORValue(usable.count)))
            pending = PendingAssertions(
                session: session, credentials: Array(usable.dropFirst()), clientDataHash: r.clientDataHash,
                userPresent: r.userPresence, userVerified: verified, hmacSecret: hmacSecret,
                expires: .now + Self.nextAssertionWindow)
        }
        return .map(response)
    }

    func getNextAssertion(session: CTAP2Session) async throws(CTAP2Error) -> CBORValue {
        guard var p = pending, p.session == session else {
            throw CTAP2Error(.notAllowed, "no getAssertion of this channel to continue")
        }
        guard ContinuousClock.now < p.expires, !p.credentials.isEmpty else {
            pending = nil
            throw CTAP2Error(.notAllowed, "no getAssertion to continue")
        }
        let next = p.credentials.removeFirst()
        pending = p.credentials.isEmpty ? nil : p
        return .map(
            try await assertion(
                next, clientDataHash: p.clientDataHash, userPresent: p.userPresent, userVerified: p.userVerified,
                hmacSecret: p.hmacSecret, discoverable: true))
    }

    /// Checks the hmac-secret input (§12.5): the protocol, saltAuth over saltEnc with the shared secret (else
    /// PIN_AUTH_INVALID), salts of 32 or 64 bytes (else INVALID_LENGTH); it needs user presence (`up: false`:
    /// UNSUPPORTED_OPTION).
    func hmacSecretRequest(_ input: HMACSecretInput, userPresence: Bool) throws(CTAP2Error) -> HMACSecretRequest {
        guard userPresence else { throw CTAP2Error(.unsupportedOption, "hmac-secret needs user presence") }
        guard let proto = PINUVAuthProtocol(rawValue: input.pinUvAuthProtocol) else {
            throw CTAP2Error(.invalidParameter, "hmac-secret pinUvAuthProtocol \(input.pinUvAuthProtocol)")
        }
        let shared = try pin.keyAgreement.sharedSecret(with: input.keyAgreement, protocol: proto)
        guard proto.verify(key: shared, input.saltEnc, signature: input.saltAuth) else {
            throw CTAP2Error(.pinAuthInvalid, "hmac-secret saltAuth does not verify")
        }
        let salt = try proto.decrypt(key: shared, input.saltEnc)
        guard salt.count == 32 || salt.count == 64 else {
            throw CTAP2Error(.invalidLength, "hmac-secret salts are 32 or 64 bytes, not \(salt.count)")
        }
        return HMACSecretRequest(
            proto: proto, sharedSecret: shared,
            salts: salt.count == 32 ? [salt] : [Array(salt[..<32]), Array(salt[32...])])
    }

    private func assertion(
        _ c: CTAP2Credential, clientDataHash: [UInt8], userPresent: Bool, userVerified: Bool,
        hmacSecret: HMACSecretRequest?, discoverable: Bool
    ) async throws(CTAP2Error) -> [(key: CBORValue, value: CBORValue)] {
        var extensions: [UInt8]?
        // A credential made without hmac-secret keys (or on a store without them) answers without the output.
        if let hmacSecret, c.hmacSecret {
            let output = try await backend.hmacSecret(c, userVerified: userVerified, salts: hmacSecret.salts)
            let encrypted = try hmacSecret.proto.encrypt(key: hmacSecret.sharedSecret, output)
            extensions = CBORValue.map([("hmac-secret", .byteString(encrypted))]).encodedWithDistinctKeys()
        }
        let (authData, signature) = try await backend.assert(
            c, clientDataHash: clientDataHash, userPresent: userPresent, userVerified: userVerified,
            extensions: extensions)
        var out: [(key: CBORValue, value: CBORValue)] = [
            (1, ["id": .byteString(c.id), "type": "public-key"]),
            (2, .byteString(authData)),
            (3, .byteString(signature)),
        ]
        // Without UV only the user id is returned (§6.2.2: identifying fields need UV).
        if discoverable || c.discoverable {
            out.append((4, userVerified ? c.user.cbor : CTAP2User(id: c.user.id).cbor))
        }
        return out
    }

    /// Whether the request is user-verified: a pinUvAuthParam that verifies (§6.1.2, §6.2.2). An empty one is a
    /// client asking whether a PIN is set: presence, then PIN_INVALID. `uv: true` without one: INVALID_OPTION
    /// (no built-in UV).
    private func userVerification(
        _ param: [UInt8]?, protocol version: Int?, uv: Bool, clientDataHash: [UInt8], permission: PINPermissions,
        rpId: String, probe: PresenceRequest, progress: @Sendable (CTAP2Progress) -> Void
    ) async throws(CTAP2Error) -> Bool {
        guard let param else {
            if uv { throw CTAP2Error(.invalidOption, "no built-in user verification: send a pinUvAuthParam") }
            return false
        }
        guard info.clientPIN else { throw CTAP2Error(.pinAuthInvalid, "ClientPIN is not set up on this authenticator") }
        if param.isEmpty {
            try await presence(probe, progress: progress)
            throw CTAP2Error(.pinInvalid, "empty pinUvAuthParam: a PIN is set")
        }
        try verifyPinUvAuthParam(param, protocol: version, message: clientDataHash, permission: permission, rpId: rpId)
        return true
    }

    private func presence(_ request: PresenceRequest, progress: @Sendable (CTAP2Progress) -> Void)
        async throws(CTAP2Error)
    {
        progress(.waitingForUserPresence)
        try await backend.userPresence(request)
        if Task.isCancelled { throw CTAP2Error(.keepaliveCancel, "cancelled") }
    }
}
