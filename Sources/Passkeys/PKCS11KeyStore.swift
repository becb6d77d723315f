import CryptoPrimitives
import FoundationEssentials
import KeyStores
import Logging
import PKCS11
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// PKCS#11 tokens (through p11-kit or explicit modules) as a passkey key store.
///
/// Requests read the token list's snapshot (`PKCS11TokenList`): none enumerates the modules itself.
public final class PKCS11KeyStore: KeyStore {
    private let provider: PKCS11Provider
    private let list: PKCS11TokenList
    private let logger: Logger

    init(provider: PKCS11Provider, initial: [PKCS11Token], logger: Logger, pinFileTokens: Set<String> = []) {
        self.provider = provider
        self.logger = logger
        list = PKCS11TokenList(provider: provider, initial: initial) { token in
            guard Self.isUsable(token) else { return nil }
            return PKCS11TokenAdapter(token: token, hasConfiguredPIN: pinFileTokens.contains(token.id))
        }
    }

    /// Loads the modules and logs in unattended software tokens that have a PIN file.
    /// With `embeddedSoftHSMDir`, SoftHSM2 keeps its tokens there, and a token is created when no usable one exists.
    public static func open(
        modules: [String], embeddedSoftHSMDir: String?, pinFiles: [String: String],
        sessionsPerToken: Int?, logger: Logger
    ) async throws(TesseraError) -> PKCS11KeyStore {
        var pinFiles = pinFiles
        let embedded = embeddedSoftHSMDir.map { EmbeddedSoftHSM(directory: $0) }
        if let embedded { try embedded.prepare(logger: logger) }
        let configuration = PKCS11Provider.Configuration(sessionsPerToken: sessionsPerToken)
        var provider = try PKCS11Provider(modulePaths: modules.isEmpty ? nil : modules, configuration: configuration)
        var usable = await provider.tokensAsync().filter(Self.isUsable)
        if usable.isEmpty, let embedded, embedded.active {
            try embedded.createToken(with: provider, logger: logger)
            provider.finalize()
            provider = try PKCS11Provider(modulePaths: modules.isEmpty ? nil : modules, configuration: configuration)
            usable = await provider.tokensAsync().filter(Self.isUsable)
        }
        if let embedded, embedded.active, FileManager.default.fileExists(atPath: embedded.pinFile) {
            pinFiles[EmbeddedSoftHSM.label] = pinFiles[EmbeddedSoftHSM.label] ?? embedded.pinFile
        }
        logger.info("PKCS#11 modules: \(provider.moduleNames.joined(separator: ", "))")
        var pinFileTokens = Set<String>()
        for token in usable {
            logger.info("token \(token.id): \(token.info.label) (\(token.info.manufacturer) \(token.info.model))")
            guard let file = pinFiles[token.id] ?? pinFiles[token.info.label] else { continue }
            if token.info.flags.isHardwareSlot || token.info.flags.isRemovableDevice {
                logger.warning(
                    "refusing PIN file for hardware token \(token.id): PINs of hardware tokens come from the user")
                continue
            }
            do {
                let pin = try String(contentsOfFile: file, encoding: .utf8).trimmingWhitespace()
                try await token.login(pin: pin)
                pinFileTokens.insert(token.id)
                logger.info("token \(token.id) logged in with its PIN file")
            } catch {
                logger.error("PIN file login for token \(token.id) failed: \(error)")
            }
        }
        return PKCS11KeyStore(provider: provider, initial: usable, logger: logger, pinFileTokens: pinFileTokens)
    }

    /// Initialised, writable tokens (p11-kit's read-only trust store is not a key store).
    static func isUsable(_ token: PKCS11Token) -> Bool {
        token.info.flags.tokenInitialized && !token.info.flags.writeProtected
    }

    nonisolated(nonsending) public func tokens() async -> [any KeyStoreToken] { list.current().tokens }

    public func freshTokens(within limit: Duration) async -> [any KeyStoreToken] {
        await list.fresh(within: limit).tokens
    }

    public func beginCardPresentation() async { await list.beginCardPresentation() }

    public func endCardPresentation() async { list.endCardPresentation() }

    public func close() async {
        provider.finalize()
    }
}

/// One PKCS#11 token seen through the `KeyStoreToken` protocol.
struct PKCS11TokenAdapter: KeyStoreToken {
    let token: PKCS11Token
    /// Logged in with a PIN file when the daemon started.
    var hasConfiguredPIN = false
    var id: String { token.id }
    var backend: String { "pkcs11" }

    func describe() async -> JSONValue {
        let i = token.info
        let loggedIn = await token.isLoggedIn
        return [
            "id": .string(token.id), "label": .string(i.label), "manufacturer": .string(i.manufacturer),
            "model": .string(i.model), "serial": .string(i.serial), "backend": "pkcs11", "present": true,
            "module": .string(i.moduleName),
            "flags": [
                "loginRequired": .bool(i.flags.loginRequired), "loggedIn": .bool(loggedIn),
                "pinCountLow": .bool(i.flags.userPinCountLow), "pinFinalTry": .bool(i.flags.userPinFinalTry),
                "pinLocked": .bool(i.flags.userPinLocked), "hardware": .bool(i.flags.isHardwareSlot),
                "removable": .bool(i.flags.isRemovableDevice),
            ],
        ]
    }

    func needsPIN() async -> Bool {
        guard token.info.flags.loginRequired else { return false }
        return await !token.isLoggedIn
    }

    func generateP256Key(handle: [UInt8], label: String, pin: PINAttempt?) async throws(TesseraError) -> [UInt8] {
        try await verify(pin)
        return try await token.generateP256KeyPair(id: handle, label: label)
    }

    nonisolated(nonsending) func signP256(handle: [UInt8], message: [UInt8], pin: PINAttempt?)
        async throws(TesseraError)
        -> [UInt8]
    {
        // The PIN of the login in force signs without the login lock and its session call (the per-assertion path);
        // a token that lost that login since answers PIN_REQUIRED, and the full check below logs in again. The
        // message is hashed on the host only for a token that signs with raw CKM_ECDSA.
        if let pin, token.isLoginPIN(pin.pin) {
            do {
                return try await token.signP256(keyID: handle, message: message)
            } catch  where error.code == .pinRequired {}
        }
        try await verify(pin)
        return try await token.signP256(keyID: handle, message: message)
    }

    func deleteKey(handle: [UInt8], pin: PINAttempt?) async throws(TesseraError) {
        try await verify(pin)
        try await token.deleteSecretKeys(ids: Self.hmacSecretIDs(handle))
        guard try await token.deleteKeyPair(id: handle) else {
            throw TesseraError(.passkeyNotFound, "no key with this handle on token \(token.id)")
        }
    }

    func supportsHMACSecret() async -> Bool { await token.supportsHMACSecrets() }

    /// Two `CKK_GENERIC_SECRET` keys made on the token: `CKA_ID` handle ‖ 0x01 (CredRandomWithoutUV, label
    /// suffix " hmac-secret") and handle ‖ 0x02 (CredRandomWithUV, " hmac-secret-uv").
    func createHMACSecrets(handle: [UInt8], label: String) async throws(TesseraError) {
        do {
            for uv in [false, true] {
                try await token.generateHMACSecret(
                    id: Self.hmacSecretID(handle, userVerified: uv),
                    label: label + (uv ? " hmac-secret-uv" : " hmac-secret"))
            }
        } catch {
            _ = try? await token.deleteSecretKeys(ids: Self.hmacSecretIDs(handle))
            throw error
        }
    }

    func hmacSecret(handle: [UInt8], userVerified: Bool, salt: [UInt8]) async throws(TesseraError) -> [UInt8] {
        try await token.hmacSHA256(secretKeyID: Self.hmacSecretID(handle, userVerified: userVerified), data: salt)
    }

    /// The `CKA_ID` of a key's CredRandom for use with or without UV.
    static func hmacSecretID(_ handle: [UInt8], userVerified: Bool) -> [UInt8] {
        handle + [userVerified ? 0x02 : 0x01]
    }

    /// Both CredRandoms' `CKA_ID`s of a key.
    static func hmacSecretIDs(_ handle: [UInt8]) -> [[UInt8]] {
        [false, true].map { hmacSecretID(handle, userVerified: $0) }
    }

    /// The P-256 and RSA public key objects, then the keys of X.509 certificates whose `CKA_ID` no public key
    /// object has (a key imported with its certificate only, as OpenSSH's PKCS#11 provider offers it).
    func publicKeys() async throws(TesseraError) -> [TokenKey] {
        let needsPIN = token.info.flags.loginRequired
        var keys =
            try await token.publicKeysP256().map {
                TokenKey(handle: $0.id, label: $0.label, publicPoint: $0.point, needsPIN: needsPIN)
            }
            + token.publicKeysRSA().map {
                TokenKey(
                    handle: $0.id, label: $0.label, value: .rsa(modulus: $0.modulus, exponent: $0.exponent),
                    needsPIN: needsPIN)
            }
        var ids = Set(keys.map(\.handle))
        for certificate in try await token.certificatesX509() where !ids.contains(certificate.id) {
            guard let value = TokenKey.Value(certificate: certificate.der) else { continue }
            keys.append(TokenKey(handle: certificate.id, label: certificate.label, value: value, needsPIN: needsPIN))
            ids.insert(certificate.id)
        }
        return keys
    }

    func signRSA(handle: [UInt8], message: [UInt8], hash: RSASignatureHash) async throws(TesseraError) -> [UInt8] {
        try await token.signRSA(keyID: handle, message: message, hash: hash)
    }

    func login(pin: PINAttempt) async throws(TesseraError) { try await verify(pin) }

    func logout() async { try? await token.logout() }

    func changePIN(old: PINAttempt, new: String) async throws(TesseraError) {
        try await token.changePIN(
            old: old.pin, new: new, beforeTry: { n throws(TesseraError) in try old.willSpendTry(retriesLeft: n) },
            afterTry: { old.didSpendTry($0) })
    }

}

extension PKCS11TokenAdapter {
    /// The PIN check under the PIN rules: the token's final-try flag and the caller's back-off are checked right
    /// before `C_Login`, under the token's login lock.
    private func verify(_ pin: PINAttempt?) async throws(TesseraError) {
        guard let pin else { return }
        try await token.verifyPIN(
            pin.pin, beforeTry: { n throws(TesseraError) in try pin.willSpendTry(retriesLeft: n) },
            afterTry: { pin.didSpendTry($0) })
    }
}

/// The daemon's own SoftHSM2 token store in the state dir (used when no hardware token is available).
struct EmbeddedSoftHSM {
    static let label = "Tessera Embedded"
    let directory: String
    var configPath: String { directory + "/softhsm2.conf" }
    var pinFile: String { directory + "/user.pin" }
    /// False when the environment already points SoftHSM2 elsewhere (SOFTHSM2_CONF): that choice wins.
    var active: Bool { ProcessInfo.processInfo.environment["SOFTHSM2_CONF"] == configPath }

    /// Writes the config and points SOFTHSM2_CONF at it, unless the environment names another config.
    func prepare(logger: Logger) throws(TesseraError) {
        if let existing = ProcessInfo.processInfo.environment["SOFTHSM2_CONF"], existing != configPath {
            logger.debug("SOFTHSM2_CONF=\(existing) set; embedded SoftHSM2 store not used")
            return
        }
        let fm = FileManager.default
        do {
            try fm.createDirectory(
                atPath: directory + "/tokens", withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            if !fm.fileExists(atPath: configPath) {
                let text = "directories.tokendir = \(directory)/tokens\nobjectstore.backend = file\nlog.level = ERROR\n"
                try Data(text.utf8).write(to: URL(fileURLWithPath: configPath))
            }
        } catch {
            throw TesseraError(.storageError, "cannot prepare embedded SoftHSM2 store in \(directory): \(error)")
        }
        setenv("SOFTHSM2_CONF", configPath, 1)
    }

    /// Creates the embedded token with random PINs through PKCS#11 (`C_InitToken`, `C_InitPIN` in SoftHSM2's free
    /// slot); the user PIN goes to `user.pin` (0600), the SO PIN is forgotten. No PIN is ever on a command line.
    func createToken(with provider: PKCS11Provider, logger: Logger) throws(TesseraError) {
        let pin = Self.randomDigits(8)
        let soPIN = Self.randomDigits(12)
        do {
            try provider.initializeFreeToken(
                moduleFileNameContaining: "softhsm2", label: Self.label, soPIN: soPIN, userPIN: pin)
        } catch  where error.code == .tokenNotPresent {
            throw TesseraError(
                .tokenNotPresent,
                "no token found and SoftHSM2 cannot create one (apt-get install softhsm2): \(error.message)")
        }
        guard
            FileManager.default.createFile(
                atPath: pinFile, contents: Data(pin.utf8), attributes: [.posixPermissions: 0o600])
        else {
            throw TesseraError(.storageError, "cannot write \(pinFile)")
        }
        logger.notice("no usable token found: created the embedded SoftHSM2 token '\(Self.label)' in \(directory)")
    }

    static func randomDigits(_ n: Int) -> String {
        var g = SystemRandomNumberGenerator()
        return String((0..<n).map { _ in Character(String(Int.random(in: 0...9, using: &g))) })
    }
}
