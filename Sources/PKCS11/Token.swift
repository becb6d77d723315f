internal import CPKCS11
import Crypto
import CryptoPrimitives
import Dispatch
import FoundationEssentials
import KeyStores
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// One token in one slot of one module, with its own bounded pool of sessions.
///
/// Obtain tokens from `PKCS11Provider.tokens()`; the same token keeps the same instance (and login state)
/// across enumerations even when its slot number changes.
public final class PKCS11Token: Sendable {
    /// Stable id: "p11-" + 16 hex digits of SHA-256(module file name, manufacturer, model, serial, label).
    public let id: String
    let module: Module
    let slot: Locked<ck_slot_id_t>
    private let infoState: Locked<TokenInfo>
    private let pool: SessionPool
    private let keyHandles = Locked<[ByteKey: ck_object_handle_t]>([:])
    /// `PINVerifier.shared` tag of the PIN of the last successful login.
    private let pinRecord = Locked<[UInt8]?>(nil)
    private let authLock = AsyncLock()
    /// Objects are made on the token one at a time: SoftHSM2 2.6 fails concurrent object creation on one token
    /// (C_GenerateKeyPair / C_GenerateKey from several sessions answer CKR_GENERAL_ERROR now and then: its object
    /// store's file writes race; SoftHSMv2 issue #573, fixed after 2.6.1). It still does now and then while other
    /// threads use the library; `SessionContext.retryingTransientFailure` makes the call again.
    private let creationLock = AsyncLock()
    private let mechanismChoice = Locked<ck_mechanism_type_t?>(nil)

    init(id: String, module: Module, slot: ck_slot_id_t, info: TokenInfo, sessions: Int) {
        self.id = id
        self.module = module
        self.slot = Locked(slot)
        self.infoState = Locked(info)
        // Hardware and removable tokens can take 100+ ms per call: they get dedicated threads; software tokens run inline.
        let software = !(info.flags.isHardwareSlot || info.flags.isRemovableDevice)
        self.pool = SessionPool(
            capacity: sessions, module: module, slot: self.slot, threadName: "tessera.p11.\(id)",
            inline: software)
    }

    /// The token's description as of the last enumeration or login attempt.
    public var info: TokenInfo { infoState.withLock { $0 } }

    /// How many sessions (and dedicated threads) this token's pool may open.
    public var sessionCapacity: Int { pool.capacity }

    /// The slot the token was last seen in (diagnostics only; it changes when tokens move).
    public var slotID: UInt { slot.withLock { $0 } }

    func update(slot newSlot: ck_slot_id_t, info newInfo: TokenInfo) {
        let moved = slot.withLock { s -> Bool in
            defer { s = newSlot }
            return s != newSlot
        }
        if moved { keyHandles.withLock { $0 = [:] } }
        infoState.withLock { $0 = newInfo }
    }

    func shutdown() { pool.shutdown() }

    // MARK: Login

    /// `C_Login(CKU_USER)` exactly once; `CKR_USER_ALREADY_LOGGED_IN` counts as success.
    /// Throws `PIN_INVALID` (with `retriesLeft` only when the token's flags tell), `PIN_LOCKED`, `TOKEN_NOT_PRESENT`.
    public func login(pin: String) async throws(TesseraError) {
        let pinBytes = Array(pin.utf8)
        try await authLock.withLock { () async throws(TesseraError) in
            try await self.loginOnce(pinBytes)
        }
    }

    /// Whether the application is logged in as user (from `C_GetSessionInfo`); false when the token cannot be reached.
    public var isLoggedIn: Bool {
        get async {
            (try? await withSession { (ctx: SessionContext) throws(OperationError) in try ctx.isLoggedIn() }) ?? false
        }
    }

    /// User verification with a PIN: logs in when needed, otherwise checks `pin` against the PIN of the last
    /// successful login (an HMAC tag under the process's `PINVerifier` key, constant-time). On a mismatch it waits
    /// for every pooled session to be free, logs out and calls `C_Login` once with `pin`, so a wrong PIN costs
    /// exactly one token retry and leaves the token logged out.
    ///
    /// Before a `C_Login` (the only step that can cost a retry) it reads the token's flags and calls
    /// `beforeTry(retriesLeft)` — 1 when the token reports `CKF_USER_PIN_FINAL_TRY`, else nil — which may refuse by
    /// throwing; after it, `afterTry` gets nil (correct PIN) or the error. Both run under the token's login lock.
    public func verifyPIN(
        _ pin: String,
        beforeTry: @Sendable (_ retriesLeft: Int?) throws(TesseraError) -> Void = { _ throws(TesseraError) in },
        afterTry: @Sendable (TesseraError?) -> Void = { _ in }
    ) async throws(TesseraError) {
        let pinBytes = Array(pin.utf8)
        try await authLock.withLock { () async throws(TesseraError) in
            let loggedIn = try await self.withSession { (ctx: SessionContext) throws(OperationError) in
                try ctx.isLoggedIn()
            }
            if loggedIn, let recorded = self.pinRecord.withLock({ $0 }),
                PINVerifier.shared.matches(pinBytes, recorded: recorded)
            {
                return
            }
            try beforeTry(await self.retriesLeftIfFinal())
            if loggedIn {
                try await self.drained { (ctx: SessionContext) throws(OperationError) in
                    _ = ctx.logout()
                }
                self.pinRecord.withLock { $0 = nil }
            }
            do throws(TesseraError) {
                try await self.loginOnce(pinBytes)
                afterTry(nil)
            } catch {
                afterTry(error)
                throw error
            }
        }
    }

    /// Changes the user PIN with `C_SetPIN(old, new)`: one token try at most (a wrong `old` costs one, like a
    /// wrong login). `beforeTry` and `afterTry` as for `verifyPIN`, under the token's login lock. A login in force
    /// stays, now recognised by the new PIN. Throws `PIN_INVALID`, `PIN_LOCKED`, `INVALID_INPUT` (the token refuses
    /// the new PIN's length or content).
    public func changePIN(
        old: String, new: String,
        beforeTry: @Sendable (_ retriesLeft: Int?) throws(TesseraError) -> Void = { _ throws(TesseraError) in },
        afterTry: @Sendable (TesseraError?) -> Void = { _ in }
    ) async throws(TesseraError) {
        let oldBytes = Array(old.utf8), newBytes = Array(new.utf8)
        try await authLock.withLock { () async throws(TesseraError) in
            try beforeTry(await self.retriesLeftIfFinal())
            let infoState = self.infoState
            let loggedIn: Bool
            do throws(TesseraError) {
                loggedIn = try await self.withSession { (ctx: SessionContext) throws(OperationError) -> Bool in
                    let rv = ctx.setPIN(old: oldBytes, new: newBytes)
                    Self.refreshFlags(ctx, infoState)
                    switch rv {
                    case ck_rv_t(CKR_OK): return (try? ctx.isLoggedIn()) ?? false
                    case ck_rv_t(CKR_PIN_INCORRECT): throw .failure(Self.pinIncorrect(infoState.withLock { $0.flags }))
                    case ck_rv_t(CKR_PIN_LOCKED):
                        throw .failure(TesseraError(.pinLocked, "the user PIN is locked on the token"))
                    case ck_rv_t(CKR_PIN_LEN_RANGE), ck_rv_t(CKR_PIN_INVALID):
                        throw .failure(.invalidInput("the token refuses the new PIN (length or characters)"))
                    default: throw .call(rv, "C_SetPIN")
                    }
                }
            } catch {
                // Only PIN_INVALID and PIN_LOCKED count as a spent try (PINAttempt ignores other errors).
                afterTry(error)
                throw error
            }
            self.pinRecord.withLock { $0 = loggedIn ? PINVerifier.shared.tag(newBytes) : nil }
            afterTry(nil)
        }
    }

    /// Whether `pin` is the PIN of the login in force (constant-time against the tag of the last successful login),
    /// without a token call or the login lock: what `verifyPIN` would accept without `C_Login` while the token keeps
    /// that login. Should the token have lost it since, its operations fail with `PIN_REQUIRED`; the caller then
    /// goes through `verifyPIN`.
    public func isLoginPIN(_ pin: String) -> Bool {
        guard let recorded = pinRecord.withLock({ $0 }) else { return false }
        return PINVerifier.shared.matches(Array(pin.utf8), recorded: recorded)
    }

    /// Logs out (after in-flight operations finish) and forgets the recorded PIN digest.
    public func logout() async throws(TesseraError) {
        try await authLock.withLock { () async throws(TesseraError) in
            self.pinRecord.withLock { $0 = nil }
            try await self.drained { (ctx: SessionContext) throws(OperationError) in
                let rv = ctx.logout()
                guard rv == CKR_OK || rv == CKR_USER_NOT_LOGGED_IN else { throw .call(rv, "C_Logout") }
            }
        }
    }

    /// Logs the token out but keeps the recorded PIN: how a token that loses its login by itself (a reset, a
    /// re-insertion) looks to this process.
    @_spi(Testing)
    public func loseLoginForTesting() async throws(TesseraError) {
        try await drained { (ctx: SessionContext) throws(OperationError) in _ = ctx.logout() }
    }

    private func loginOnce(_ pin: [UInt8]) async throws(TesseraError) {
        let infoState = self.infoState
        let verified = try await withSession { (ctx: SessionContext) throws(OperationError) -> Bool in
            let rv = ctx.login(pin: pin)
            Self.refreshFlags(ctx, infoState)
            switch rv {
            case ck_rv_t(CKR_OK): return true
            case ck_rv_t(CKR_USER_ALREADY_LOGGED_IN): return false
            case ck_rv_t(CKR_PIN_INCORRECT): throw .failure(Self.pinIncorrect(infoState.withLock { $0.flags }))
            case ck_rv_t(CKR_PIN_LOCKED):
                throw .failure(TesseraError(.pinLocked, "the user PIN is locked on the token"))
            default: throw .call(rv, "C_Login")
            }
        }
        if verified {
            let tag = PINVerifier.shared.tag(pin)
            pinRecord.withLock { $0 = tag }
        }
    }

    /// Reads the token's flags into `infoState`; returns them (nil when the token cannot say).
    @discardableResult
    private static func refreshFlags(_ ctx: SessionContext, _ infoState: Locked<TokenInfo>) -> TokenFlags? {
        guard let token = ctx.tokenInfo() else { return nil }
        let flags = TokenFlags(token: token.flags, slot: ck_flags_t(0))
        infoState.withLock { $0.flags = flags.keepingSlot($0.flags) }
        return flags
    }

    /// 1 when the token reports `CKF_USER_PIN_FINAL_TRY` now, else nil (what `beforeTry` gets).
    private func retriesLeftIfFinal() async throws(TesseraError) -> Int? {
        let infoState = self.infoState
        let finalTry = try await withSession { (ctx: SessionContext) throws(OperationError) -> Bool in
            Self.refreshFlags(ctx, infoState)?.userPinFinalTry ?? false
        }
        return finalTry ? 1 : nil
    }

    private static func pinIncorrect(_ flags: TokenFlags) -> TesseraError {
        if flags.userPinLocked {
            return TesseraError(
                .pinInvalid, "the PIN is incorrect; the token reports the user PIN is now locked",
                details: ["retriesLeft": 0])
        }
        if flags.userPinFinalTry {
            return TesseraError(
                .pinInvalid, "the PIN is incorrect; the token reports one attempt left before it locks",
                details: ["retriesLeft": 1])
        }
        if flags.userPinCountLow {
            return TesseraError(
                .pinInvalid, "the PIN is incorrect; the token reports few attempts left",
                details: ["retriesLow": true])
        }
        return TesseraError(.pinInvalid, "the PIN is incorrect (the token does not report remaining attempts)")
    }

    // MARK: Keys

    /// Generates a P-256 key pair on the token (private: token, private, sensitive, non-extractable, sign-only)
    /// and returns the 65-byte uncompressed public point. Does not check for an existing pair with the same id.
    public func generateP256KeyPair(id keyID: [UInt8], label: String) async throws(TesseraError) -> [UInt8] {
        guard !keyID.isEmpty else { throw .invalidInput("key id must not be empty") }
        let labelBytes = Array(label.utf8)
        let publicTemplate: [(ck_attribute_type_t, AttributeValue)] = [
            (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_PUBLIC_KEY))),
            (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_EC))),
            (ck_attribute_type_t(CKA_TOKEN), .bool(true)),
            (ck_attribute_type_t(CKA_PRIVATE), .bool(false)),
            (ck_attribute_type_t(CKA_VERIFY), .bool(true)),
            (ck_attribute_type_t(CKA_EC_PARAMS), .bytes(P256DER.curveParameters)),
            (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
            (ck_attribute_type_t(CKA_LABEL), .bytes(labelBytes)),
        ]
        let privateTemplate: [(ck_attribute_type_t, AttributeValue)] =
            [
                (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_PRIVATE_KEY))),
                (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_EC))),
            ] + Self.signingKeyAttributes(id: keyID, label: label)
        let cache = keyHandles
        return try await creating { (ctx: SessionContext) throws(OperationError) -> [UInt8] in
            let (publicKey, privateKey) = try ctx.retryingTransientFailure(keyID: keyID) {
                () throws(OperationError) in
                try ctx.generateKeyPair(
                    mechanism: ck_mechanism_type_t(CKM_EC_KEY_PAIR_GEN),
                    publicTemplate: publicTemplate, privateTemplate: privateTemplate)
            }
            let point: [UInt8]
            switch ctx.attribute(publicKey, ck_attribute_type_t(CKA_EC_POINT)) {
            case .success(let value):
                guard let p = P256DER.uncompressedPoint(fromECPoint: value) else {
                    try? ctx.destroy(privateKey); try? ctx.destroy(publicKey)
                    throw .failure(TesseraError(.tokenError, "the token returned an unexpected CKA_EC_POINT"))
                }
                point = p
            case .failure(let failure):
                try? ctx.destroy(privateKey); try? ctx.destroy(publicKey)
                throw .ck(failure)
            }
            cache.withLock { $0[ByteKey(keyID)] = privateKey }
            return point
        }
    }

    /// The attributes of a key that signs and never leaves the token: token, private, sensitive, non-extractable.
    private static func signingKeyAttributes(id keyID: [UInt8], label: String) -> [(
        ck_attribute_type_t, AttributeValue
    )] {
        [
            (ck_attribute_type_t(CKA_TOKEN), .bool(true)),
            (ck_attribute_type_t(CKA_PRIVATE), .bool(true)),
            (ck_attribute_type_t(CKA_SENSITIVE), .bool(true)),
            (ck_attribute_type_t(CKA_EXTRACTABLE), .bool(false)),
            (ck_attribute_type_t(CKA_SIGN), .bool(true)),
            (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
            (ck_attribute_type_t(CKA_LABEL), .bytes(Array(label.utf8))),
        ]
    }

    /// The 65-byte uncompressed public point of the pair with this `CKA_ID`; `PASSKEY_NOT_FOUND` when absent.
    public func publicKeyP256(id keyID: [UInt8]) async throws(TesseraError) -> [UInt8] {
        try await withSession { (ctx: SessionContext) throws(OperationError) -> [UInt8] in
            let found = try ctx.findObjects(
                [
                    (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_PUBLIC_KEY))),
                    (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
                ], limit: 1)
            guard let handle = found.first else {
                throw .failure(TesseraError(.passkeyNotFound, "no public key with this id on the token"))
            }
            switch ctx.attribute(handle, ck_attribute_type_t(CKA_EC_POINT)) {
            case .success(let value):
                guard let point = P256DER.uncompressedPoint(fromECPoint: value) else {
                    throw .failure(TesseraError(.tokenError, "the public key is not an uncompressed P-256 point"))
                }
                return point
            case .failure(let failure): throw .ck(failure)
            }
        }
    }

    /// ECDSA P-256 signature over `message`, as raw `r || s` (64 bytes). Uses `CKM_ECDSA_SHA256` when the token
    /// offers it, otherwise `CKM_ECDSA` over SHA-256(message) computed on the host.
    /// Throws `PASSKEY_NOT_FOUND` for an unknown id and `PIN_REQUIRED` when not logged in.
    nonisolated(nonsending) public func signP256(keyID: [UInt8], message: [UInt8]) async throws(TesseraError) -> [UInt8]
    {
        let mechanism = try await signMechanism()
        let data = mechanism == ck_mechanism_type_t(CKM_ECDSA) ? MessageDigest.sha256(message) : message
        return try await sign(keyID: keyID, mechanism: mechanism, data: data)
    }

    /// As `signP256(keyID:message:)`, with `digest` = SHA-256(message) already computed by the caller
    /// (used instead of hashing on the host when the token only offers raw `CKM_ECDSA`; not checked against `message`).
    public func signP256(keyID: [UInt8], message: [UInt8], digest: [UInt8]) async throws(TesseraError) -> [UInt8] {
        guard digest.count == 32 else { throw .invalidInput("digest must be 32 bytes (SHA-256)") }
        let mechanism = try await signMechanism()
        return try await sign(
            keyID: keyID, mechanism: mechanism,
            data: mechanism == ck_mechanism_type_t(CKM_ECDSA) ? digest : message)
    }

    nonisolated(nonsending) private func sign(keyID: [UInt8], mechanism: ck_mechanism_type_t, data: [UInt8])
        async throws(TesseraError)
        -> [UInt8]
    {
        let signature = try await signature(keyID: keyID, mechanism: mechanism, data: data)
        // PKCS#11 (CKM_ECDSA) returns raw r ‖ s; some tokens return DER instead, not always minimal.
        let raw =
            signature.count == 64
            ? signature : try? ECDSASignature.rawFromDER(signature, group: .p256, strictness: .lenient)
        guard let raw else {
            throw TesseraError(.tokenError, "the token returned a \(signature.count)-byte ECDSA signature")
        }
        return raw
    }

    /// `C_Sign` with the private key of `keyID` (its handle cached), returning the token's signature bytes.
    nonisolated(nonsending) private func signature(keyID: [UInt8], mechanism: ck_mechanism_type_t, data: [UInt8])
        async throws(TesseraError)
        -> [UInt8]
    {
        let cache = keyHandles
        let loginRequired = info.flags.loginRequired
        return try await withSession { (ctx: SessionContext) throws(OperationError) -> [UInt8] in
            let cached = cache.withLock { $0[ByteKey(keyID)] }
            var handle: ck_object_handle_t
            if let cached {
                handle = cached
            } else {
                handle = try Self.findPrivateKey(ctx, keyID, loginRequired: loginRequired)
            }
            var result = ctx.sign(mechanism: mechanism, key: handle, data: data)
            if case .failure(let f) = result, cached != nil,
                f.rv == CKR_KEY_HANDLE_INVALID || f.rv == CKR_OBJECT_HANDLE_INVALID
            {
                cache.withLock { $0[ByteKey(keyID)] = nil }
                handle = try Self.findPrivateKey(ctx, keyID, loginRequired: loginRequired)
                result = ctx.sign(mechanism: mechanism, key: handle, data: data)
            }
            switch result {
            case .success(let signature):
                if cached == nil { cache.withLock { $0[ByteKey(keyID)] = handle } }
                return signature
            case .failure(let failure):
                throw .ck(failure)
            }
        }
    }

    private static func findPrivateKey(
        _ ctx: SessionContext, _ keyID: [UInt8], loginRequired: Bool
    ) throws(OperationError) -> ck_object_handle_t {
        let found = try ctx.findObjects(
            [
                (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_PRIVATE_KEY))),
                (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
            ], limit: 1)
        if let handle = found.first { return handle }
        if loginRequired, try !ctx.isLoggedIn() {
            throw .failure(
                TesseraError(.pinRequired, "the token needs a PIN login before its private keys are visible"))
        }
        throw .failure(TesseraError(.passkeyNotFound, "no private key with this id on the token"))
    }

    nonisolated(nonsending) private func signMechanism() async throws(TesseraError) -> ck_mechanism_type_t {
        if let m = mechanismChoice.withLock({ $0 }) { return m }
        let choice = try await withSession { (ctx: SessionContext) throws(OperationError) -> ck_mechanism_type_t in
            let list = ctx.module.mechanisms(ctx.slot)
            if list.contains(ck_mechanism_type_t(CKM_ECDSA_SHA256)) { return ck_mechanism_type_t(CKM_ECDSA_SHA256) }
            if list.contains(ck_mechanism_type_t(CKM_ECDSA)) { return ck_mechanism_type_t(CKM_ECDSA) }
            throw .failure(TesseraError(.tokenError, "the token offers neither CKM_ECDSA_SHA256 nor CKM_ECDSA"))
        }
        mechanismChoice.withLock { $0 = choice }
        return choice
    }

    /// Destroys the private and public key objects with this `CKA_ID`; returns whether any existed.
    /// Throws `PIN_REQUIRED` when not logged in on a token whose private keys need a login.
    @discardableResult
    public func deleteKeyPair(id keyID: [UInt8]) async throws(TesseraError) -> Bool {
        let cache = keyHandles
        let loginRequired = info.flags.loginRequired
        return try await creating { (ctx: SessionContext) throws(OperationError) -> Bool in
            if loginRequired, try !ctx.isLoggedIn() {
                throw .failure(TesseraError(.pinRequired, "log in before deleting keys"))
            }
            cache.withLock { $0[ByteKey(keyID)] = nil }
            var deleted = false
            for objectClass in [UInt(CKO_PRIVATE_KEY), UInt(CKO_PUBLIC_KEY)] {
                let handles = try ctx.findObjects([
                    (ck_attribute_type_t(CKA_CLASS), .ulong(objectClass)),
                    (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
                ])
                for handle in handles {
                    try ctx.destroy(handle)
                    deleted = true
                }
            }
            return deleted
        }
    }

    // MARK: Secret keys (CTAP hmac-secret)

    /// Whether the token offers `CKM_GENERIC_SECRET_KEY_GEN` and `CKM_SHA256_HMAC` (HMAC secrets made and used on
    /// the token).
    public func supportsHMACSecrets() async -> Bool {
        let found = try? await withSession { (ctx: SessionContext) throws(OperationError) -> Bool in
            let list = ctx.module.mechanisms(ctx.slot)
            return list.contains(ck_mechanism_type_t(CKM_GENERIC_SECRET_KEY_GEN))
                && list.contains(ck_mechanism_type_t(CKM_SHA256_HMAC))
        }
        return found ?? false
    }

    /// Generates a 32-byte generic secret on the token (`CKM_GENERIC_SECRET_KEY_GEN`: token, private, sensitive,
    /// non-extractable, sign-only), so its value never leaves the token.
    public func generateHMACSecret(id keyID: [UInt8], label: String) async throws(TesseraError) {
        guard !keyID.isEmpty else { throw .invalidInput("key id must not be empty") }
        let template: [(ck_attribute_type_t, AttributeValue)] =
            [
                (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_SECRET_KEY))),
                (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_GENERIC_SECRET))),
                (ck_attribute_type_t(CKA_VALUE_LEN), .ulong(32)),
            ]
            // It signs (HMAC) and does nothing else.
            + [CKA_VERIFY, CKA_ENCRYPT, CKA_DECRYPT, CKA_DERIVE, CKA_WRAP, CKA_UNWRAP].map {
                (ck_attribute_type_t($0), AttributeValue.bool(false))
            } + Self.signingKeyAttributes(id: keyID, label: label)
        _ = try await creating { (ctx: SessionContext) throws(OperationError) -> ck_object_handle_t in
            try ctx.retryingTransientFailure(keyID: keyID) { () throws(OperationError) in
                try ctx.generateKey(mechanism: ck_mechanism_type_t(CKM_GENERIC_SECRET_KEY_GEN), template: template)
            }
        }
    }

    /// HMAC-SHA-256 of `data` computed on the token (`C_Sign` with `CKM_SHA256_HMAC`) with the secret key of
    /// `keyID`; `PASSKEY_NOT_FOUND` when absent, `PIN_REQUIRED` when not logged in on a login-required token.
    public func hmacSHA256(secretKeyID keyID: [UInt8], data: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let loginRequired = info.flags.loginRequired
        return try await withSession { (ctx: SessionContext) throws(OperationError) -> [UInt8] in
            let found = try ctx.findObjects(
                [
                    (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_SECRET_KEY))),
                    (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
                ], limit: 1)
            guard let handle = found.first else {
                if loginRequired, try !ctx.isLoggedIn() {
                    throw .failure(TesseraError(.pinRequired, "the token needs a PIN login before its secret keys"))
                }
                throw .failure(TesseraError(.passkeyNotFound, "no secret key with this id on the token"))
            }
            switch ctx.sign(mechanism: ck_mechanism_type_t(CKM_SHA256_HMAC), key: handle, data: data) {
            case .success(let mac):
                guard mac.count == 32 else {
                    throw .failure(TesseraError(.tokenError, "the token returned a \(mac.count)-byte HMAC-SHA-256"))
                }
                return mac
            case .failure(let failure): throw .ck(failure)
            }
        }
    }

    /// Destroys the secret key objects with these `CKA_ID`s; returns whether any existed.
    /// Throws `PIN_REQUIRED` when not logged in on a token whose private objects need a login.
    @discardableResult
    public func deleteSecretKeys(ids: [[UInt8]]) async throws(TesseraError) -> Bool {
        let loginRequired = info.flags.loginRequired
        return try await creating { (ctx: SessionContext) throws(OperationError) -> Bool in
            if loginRequired, try !ctx.isLoggedIn() {
                throw .failure(TesseraError(.pinRequired, "log in before deleting keys"))
            }
            var deleted = false
            for keyID in ids {
                let handles = try ctx.findObjects([
                    (ck_attribute_type_t(CKA_CLASS), .ulong(UInt(CKO_SECRET_KEY))),
                    (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
                ])
                for handle in handles {
                    try ctx.destroy(handle)
                    deleted = true
                }
            }
            return deleted
        }
    }

    /// Whether a private or public key object with this `CKA_ID` is visible (private ones only when logged in).
    public func hasKeyPair(id keyID: [UInt8]) async throws(TesseraError) -> Bool {
        try await withSession { (ctx: SessionContext) throws(OperationError) -> Bool in
            for objectClass in [UInt(CKO_PRIVATE_KEY), UInt(CKO_PUBLIC_KEY)] {
                let found = try ctx.findObjects(
                    [
                        (ck_attribute_type_t(CKA_CLASS), .ulong(objectClass)),
                        (ck_attribute_type_t(CKA_ID), .bytes(keyID)),
                    ], limit: 1)
                if !found.isEmpty { return true }
            }
            return false
        }
    }

    /// `CKA_ID`s of the EC key objects whose `CKA_LABEL` starts with `labelPrefix` (all when nil), without duplicates.
    @_spi(Testing)
    public func keyIDs(labelPrefix: String?) async throws(TesseraError) -> [[UInt8]] {
        let prefix = labelPrefix.map { Array($0.utf8) }
        return try await withSession { (ctx: SessionContext) throws(OperationError) -> [[UInt8]] in
            var seen = Set<[UInt8]>()
            var ids: [[UInt8]] = []
            for objectClass in [UInt(CKO_PRIVATE_KEY), UInt(CKO_PUBLIC_KEY)] {
                let handles = try ctx.findObjects(
                    [
                        (ck_attribute_type_t(CKA_CLASS), .ulong(objectClass)),
                        (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_EC))),
                    ], limit: 100_000)
                for handle in handles {
                    guard case .success(let keyID) = ctx.attribute(handle, ck_attribute_type_t(CKA_ID)) else {
                        continue
                    }
                    if let prefix {
                        guard case .success(let label) = ctx.attribute(handle, ck_attribute_type_t(CKA_LABEL)),
                            label.starts(with: prefix)
                        else { continue }
                    }
                    if seen.insert(keyID).inserted { ids.append(keyID) }
                }
            }
            return ids
        }
    }

    /// The P-256 public key objects on the token (visible without login): `CKA_ID`, `CKA_LABEL` and the point.
    /// Objects on other curves or with an unreadable point are left out.
    public func publicKeysP256() async throws(TesseraError) -> [TokenPublicKey] {
        try await objects(class: UInt(CKO_PUBLIC_KEY), (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_EC)))) {
            ctx, handle, keyID, label in
            guard case .success(let params) = ctx.attribute(handle, ck_attribute_type_t(CKA_EC_PARAMS)),
                params == P256DER.curveParameters,
                case .success(let value) = ctx.attribute(handle, ck_attribute_type_t(CKA_EC_POINT)),
                let point = P256DER.uncompressedPoint(fromECPoint: value)
            else { return nil }
            return TokenPublicKey(id: keyID, label: label, point: point)
        }
    }

    /// The RSA public key objects on the token (visible without login): `CKA_ID`, `CKA_LABEL`, modulus and exponent.
    public func publicKeysRSA() async throws(TesseraError) -> [TokenRSAPublicKey] {
        try await objects(class: UInt(CKO_PUBLIC_KEY), (ck_attribute_type_t(CKA_KEY_TYPE), .ulong(UInt(CKK_RSA)))) {
            ctx, handle, keyID, label in
            guard case .success(let modulus) = ctx.attribute(handle, ck_attribute_type_t(CKA_MODULUS)),
                !modulus.isEmpty,
                case .success(let exponent) = ctx.attribute(handle, ck_attribute_type_t(CKA_PUBLIC_EXPONENT)),
                !exponent.isEmpty
            else { return nil }
            return TokenRSAPublicKey(id: keyID, label: label, modulus: modulus, exponent: exponent)
        }
    }

    /// The X.509 certificate objects on the token (visible without login): `CKA_ID`, `CKA_LABEL` and the DER
    /// certificate. Objects without a value are left out.
    public func certificatesX509() async throws(TesseraError) -> [TokenCertificate] {
        try await objects(
            class: UInt(CKO_CERTIFICATE), (ck_attribute_type_t(CKA_CERTIFICATE_TYPE), .ulong(UInt(CKC_X_509)))
        ) { ctx, handle, keyID, label in
            guard case .success(let value) = ctx.attribute(handle, ck_attribute_type_t(CKA_VALUE)), !value.isEmpty
            else { return nil }
            return TokenCertificate(id: keyID, label: label, der: value)
        }
    }

    /// The objects of `objectClass` with the attribute `type`, each with a non-empty `CKA_ID` and its `CKA_LABEL`
    /// read into a value by `read` (nil leaves the object out).
    private func objects<T: Sendable>(
        class objectClass: UInt, _ type: (ck_attribute_type_t, AttributeValue),
        _ read: @escaping @Sendable (SessionContext, ck_object_handle_t, _ id: [UInt8], _ label: String) -> T?
    ) async throws(TesseraError) -> [T] {
        try await withSession { (ctx: SessionContext) throws(OperationError) -> [T] in
            let handles = try ctx.findObjects(
                [(ck_attribute_type_t(CKA_CLASS), .ulong(objectClass)), type], limit: 100_000)
            var values: [T] = []
            for handle in handles {
                guard case .success(let keyID) = ctx.attribute(handle, ck_attribute_type_t(CKA_ID)), !keyID.isEmpty
                else { continue }
                let label = (try? ctx.attribute(handle, ck_attribute_type_t(CKA_LABEL)).get()) ?? []
                if let value = read(ctx, handle, keyID, String(decoding: label, as: UTF8.self)) { values.append(value) }
            }
            return values
        }
    }

    /// RSA PKCS#1 v1.5 signature over `message` with the hash's `CKM_SHA*_RSA_PKCS` mechanism (the token hashes).
    /// Throws `PASSKEY_NOT_FOUND` for an unknown id and `PIN_REQUIRED` when not logged in.
    public func signRSA(keyID: [UInt8], message: [UInt8], hash: RSASignatureHash) async throws(TesseraError) -> [UInt8]
    {
        let mechanism: ck_mechanism_type_t =
            switch hash {
            case .sha1: ck_mechanism_type_t(CKM_SHA1_RSA_PKCS)
            case .sha256: ck_mechanism_type_t(CKM_SHA256_RSA_PKCS)
            case .sha512: ck_mechanism_type_t(CKM_SHA512_RSA_PKCS)
            }
        return try await signature(keyID: keyID, mechanism: mechanism, data: message)
    }

    /// Reads back the protection attributes of the private key with this `CKA_ID` and tries to read `CKA_VALUE`.
    @_spi(Testing)
    public func privateKeyAttributes(id keyID: [UInt8]) async throws(TesseraError) -> PrivateKeyAttributes {
        let loginRequired = info.flags.loginRequired
        return try await withSession { (ctx: SessionContext) throws(OperationError) -> PrivateKeyAttributes in
            let handle = try Self.findPrivateKey(ctx, keyID, loginRequired: loginRequired)
            func flag(_ type: UInt) -> Bool? { ctx.boolAttribute(handle, ck_attribute_type_t(type)) }
            let value = ctx.attribute(handle, ck_attribute_type_t(CKA_VALUE))
            let label = (try? ctx.attribute(handle, ck_attribute_type_t(CKA_LABEL)).get()) ?? []
            let valueResult: String
            switch value {
            case .success: valueResult = "CKR_OK"
            case .failure(let f): valueResult = ReturnValue.name(f.rv)
            }
            return PrivateKeyAttributes(
                label: String(decoding: label, as: UTF8.self),
                isTokenObject: flag(UInt(CKA_TOKEN)), isPrivate: flag(UInt(CKA_PRIVATE)),
                sensitive: flag(UInt(CKA_SENSITIVE)), extractable: flag(UInt(CKA_EXTRACTABLE)),
                alwaysSensitive: flag(UInt(CKA_ALWAYS_SENSITIVE)), neverExtractable: flag(UInt(CKA_NEVER_EXTRACTABLE)),
                canSign: flag(UInt(CKA_SIGN)),
                valueReadable: { if case .success(let v) = value { return !v.isEmpty } else { return false } }(),
                valueReadResult: valueResult)
        }
    }

    // MARK: Benchmark baseline

    /// Signs `digest` `iterations` times over `sessions` fresh sessions on as many dedicated threads, bypassing the
    /// pool, and returns signatures per second. The token must already be logged in when its keys need it.
    /// Uses the same mechanism as `signP256` (with `digest` as the input either way).
    @_spi(Benchmarks)
    public func rawSignLoop(keyID: [UInt8], digest: [UInt8], iterations: Int, sessions: Int) async throws(TesseraError)
        -> Double
    {
        guard iterations > 0, sessions > 0, sessions <= 256 else {
            throw .invalidInput("iterations and sessions must be positive")
        }
        guard digest.count == 32 else { throw .invalidInput("digest must be 32 bytes (SHA-256)") }
        let mechanism = try await signMechanism()
        let loginRequired = info.flags.loginRequired
        let key = try await withSession { (ctx: SessionContext) throws(OperationError) in
            try Self.findPrivateKey(ctx, keyID, loginRequired: loginRequired)
        }
        let module = self.module
        let slot = self.slotID
        return try await DedicatedThread.run(name: "tessera.p11.rawsign") {
            RawSignLoop.run(
                module: module, slot: slot, key: key, mechanism: mechanism, data: digest,
                iterations: iterations, sessions: sessions)
        }.get()
    }

    // MARK: Sessions

    nonisolated(nonsending) private func withSession<T: Sendable>(
        _ body: @escaping @Sendable (SessionContext) throws(OperationError) -> T
    ) async throws(TesseraError) -> T {
        guard let worker = await pool.acquire() else { throw Self.finalizedError }
        let result = await worker.run(body)
        pool.release(worker)
        return try result.get()
    }

    /// `withSession` for a call that makes or destroys objects on the token, one at a time (`creationLock`).
    private func creating<T: Sendable>(
        _ body: @escaping @Sendable (SessionContext) throws(OperationError) -> T
    ) async throws(TesseraError) -> T {
        try await creationLock.withLock { () async throws(TesseraError) -> T in try await self.withSession(body) }
    }

    /// Runs `body` on one session while holding every session of the pool (no other operation in flight).
    private func drained(_ body: @escaping @Sendable (SessionContext) throws(OperationError) -> Void)
        async throws(TesseraError)
    {
        guard let workers = await pool.acquireAll() else { throw Self.finalizedError }
        let result = await workers[0].run(body)
        workers.forEach(pool.release)
        try result.get()
    }

    static let finalizedError = TesseraError(.shuttingDown, "the PKCS#11 provider was finalized")
}

extension TokenFlags {
    fileprivate func keepingSlot(_ previous: TokenFlags) -> TokenFlags {
        var flags = self
        flags.isHardwareSlot = previous.isHardwareSlot
        flags.isRemovableDevice = previous.isRemovableDevice
        return flags
    }
}

/// The benchmark baseline: N sessions signing in parallel on plain threads.
enum RawSignLoop {
    static func run(
        module: Module, slot: ck_slot_id_t, key: ck_object_handle_t, mechanism: ck_mechanism_type_t,
        data: [UInt8], iterations: Int, sessions: Int
    ) -> Result<Double, TesseraError> {
        var handles: [ck_session_handle_t] = []
        defer { for h in handles { _ = module.f.C_CloseSession?(h) } }
        for _ in 0..<sessions {
            var h: ck_session_handle_t = 0
            let rv =
                module.f.C_OpenSession?(slot, ck_flags_t(CKF_SERIAL_SESSION), nil, nil, &h)
                ?? ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED)
            guard rv == CKR_OK else {
                return .failure(mapFailure(CKFailure(rv, "C_OpenSession"), module: module, slot: slot))
            }
            handles.append(h)
        }
        let firstFailure = Locked<CKFailure?>(nil)
        let start = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        for (i, handle) in handles.enumerated() {
            let count = iterations / sessions + (i < iterations % sessions ? 1 : 0)
            group.enter()
            DedicatedThread.detach(name: "tessera.p11.rawsign.\(i)") {
                start.wait()
                let ctx = SessionContext(module: module, slot: slot, session: handle)
                for _ in 0..<count {
                    if case .failure(let f) = ctx.sign(mechanism: mechanism, key: key, data: data) {
                        firstFailure.withLock { if $0 == nil { $0 = f } }
                        break
                    }
                }
                group.leave()
            }
        }
        let began = DispatchTime.now().uptimeNanoseconds
        for _ in handles { start.signal() }
        group.wait()
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - began) / 1e9
        if let f = firstFailure.withLock({ $0 }) { return .failure(mapFailure(f, module: module, slot: slot)) }
        return .success(Double(iterations) / max(elapsed, 1e-9))
    }
}
