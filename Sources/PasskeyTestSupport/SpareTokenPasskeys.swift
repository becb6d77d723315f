import CredentialStore
import KeyStores
import Logging
import Passkeys
import TesseraCore
import TesseraTestSupport

/// A passkey service over a temporary database and a spare SoftHSM2 token of its own, on the process's one PKCS#11
/// key store (SoftHSM2 is process-wide): what the front doors' unit tests stand on.
public struct SpareTokenPasskeys: Sendable {
    public let service: PasskeyService
    public let token: any KeyStoreToken
    public let database: TesseraDatabase

    /// A logger that prints only critical lines (the tests' own output stays readable).
    public static let quietLogger: Logger = {
        var logger = Logger(label: "tessera-test")
        logger.logLevel = .critical
        return logger
    }()

    private static let keyStore = Task { () -> Result<PKCS11KeyStore, TesseraError> in
        do throws(TesseraError) {
            let fixture = try await SoftHSMFixture.shared()
            return .success(
                try await PKCS11KeyStore.open(
                    modules: [fixture.modulePath], embeddedSoftHSMDir: nil, pinFiles: [:], sessionsPerToken: nil,
                    logger: quietLogger))
        } catch {
            return .failure(error)
        }
    }

    /// Claims a spare token and opens a database in a scratch directory named `scratch`. With `login`, the token is
    /// logged in with its PIN under the service's PIN rules, as a PIN file does for the daemon.
    public static func make(
        scratch: String, pinBackoff: PINBackoffPolicy = PINBackoffPolicy(initial: .zero, maximum: .zero),
        login: Bool
    ) async throws -> SpareTokenPasskeys {
        let keyStore = try await keyStore.value.get()
        let label = try await SoftHSMFixture.shared().claimSpareToken()
        var token: (any KeyStoreToken)?
        for t in await keyStore.tokens() where await t.describe()["label"] == .string(label) { token = t }
        guard let token else { throw TesseraError(.tokenNotPresent, "no token labelled \(label)") }
        let database = try TesseraDatabase(path: Scratch.directory(scratch) + "/tessera.sqlite")
        let service = PasskeyService(
            keyStores: [keyStore], store: CredentialStore(database: database), logger: quietLogger,
            pinBackoff: pinBackoff)
        if login {
            try await service.pinRules.withCallerPIN(
                SoftHSMFixture.defaultPIN, caller: nil, allowFinalTry: false, tokenId: token.id
            ) { (attempt: PINAttempt) async throws(TesseraError) in try await token.login(pin: attempt) }
        }
        return SpareTokenPasskeys(service: service, token: token, database: database)
    }
}
