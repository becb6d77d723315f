import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A private SoftHSM2 token directory for tests.
///
/// Creating a fixture (`make`) writes `softhsm2.conf` into a fresh scratch dir and sets `SOFTHSM2_CONF` for the whole process
/// (`setenv`): SoftHSM2 reads it in `C_Initialize`, so create the fixture **before** any PKCS#11 provider
/// initialises, and keep one fixture per test process (`SoftHSMFixture.shared()`), with suites that use it serialised.
///
/// SoftHSM2 scans its token directory only in `C_Initialize`: tokens added later are invisible to modules already
/// initialised in the process. Tests that want a token of their own therefore claim one of the spare tokens
/// created up front (`claimSpareToken()`), which works whichever provider initialised first.
public final class SoftHSMFixture: Sendable {
    public static let defaultModulePath = "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"
    public static let defaultLabel = "tessera-test"
    public static let defaultPIN = "123456"
    public static let defaultSOPIN = "12345678"

    /// The temp directory holding the config and the token store.
    public let directory: String
    public let configPath: String
    public let tokenDirectory: String
    /// Path of `libsofthsm2.so`, for `PKCS11Provider(modulePaths:)`.
    public let modulePath: String
    /// Label and PIN of the token created by `init`.
    public let label: String
    public let pin: String
    public let soPIN: String
    /// Labels of the extra tokens created by `init` (same PINs), handed out by `claimSpareToken()`.
    public let spareLabels: [String]
    private let claimed = ClaimCounter()

    /// Creates the directory (under `Scratch.root`, so it goes when the process exits) and config, sets
    /// `SOFTHSM2_CONF`, and initialises the token `label` plus `spareTokens` more labelled "<label>-spare-<n>"
    /// with `softhsm2-util` (waiting off the cooperative pool).
    /// Throws `INTERNAL` (never skips) when SoftHSM2 or `softhsm2-util` is missing or fails.
    public static func make(
        label: String = SoftHSMFixture.defaultLabel, pin: String = SoftHSMFixture.defaultPIN,
        soPIN: String = SoftHSMFixture.defaultSOPIN, spareTokens: Int = 0,
        modulePath: String = SoftHSMFixture.defaultModulePath
    ) async throws(TesseraError)
        -> SoftHSMFixture
    {
        let fixture = try SoftHSMFixture(
            label: label, pin: pin, soPIN: soPIN, spareTokens: spareTokens,
            modulePath: modulePath)
        do {
            try await fixture.addToken(label: label, pin: pin, soPIN: soPIN)
            for spare in fixture.spareLabels { try await fixture.addToken(label: spare, pin: pin, soPIN: soPIN) }
        } catch {
            fixture.removeDirectory()
            throw error
        }
        return fixture
    }

    /// Writes the directory and config and sets `SOFTHSM2_CONF`; `make` adds the tokens.
    private init(label: String, pin: String, soPIN: String, spareTokens: Int, modulePath: String) throws(TesseraError) {
        let fm = FileManager.default
        guard fm.fileExists(atPath: modulePath) else {
            throw .internalError(
                "SoftHSM2 module not found at \(modulePath); install it with `apt-get install -y softhsm2`")
        }
        guard Self.utilityPath() != nil else {
            throw .internalError("softhsm2-util not found in PATH; install it with `apt-get install -y softhsm2`")
        }
        let base = URL(fileURLWithPath: Scratch.directory("softhsm"))
        let tokens = base.appendingPathComponent("tokens")
        do {
            try fm.createDirectory(at: tokens, withIntermediateDirectories: true)
        } catch {
            throw .internalError("cannot create \(tokens.path): \(error)")
        }
        let config = base.appendingPathComponent("softhsm2.conf")
        let text = """
            directories.tokendir = \(tokens.path)
            objectstore.backend = file
            log.level = ERROR
            slots.removable = false

            """
        do {
            try Data(text.utf8).write(to: config)
        } catch {
            throw .internalError("cannot write \(config.path): \(error)")
        }
        directory = base.path
        configPath = config.path
        tokenDirectory = tokens.path
        self.modulePath = modulePath
        self.label = label
        self.pin = pin
        self.soPIN = soPIN
        spareLabels = (0..<max(0, spareTokens)).map { "\(label)-spare-\($0)" }
        setenv("SOFTHSM2_CONF", config.path, 1)
    }

    /// The label of a spare token nobody has claimed yet (PIN `pin`); `INTERNAL` when all are taken.
    public func claimSpareToken() throws(TesseraError) -> String {
        guard let index = claimed.next(below: spareLabels.count) else {
            throw .internalError("all \(spareLabels.count) spare SoftHSM2 tokens are claimed; raise spareTokens")
        }
        return spareLabels[index]
    }

    /// Initialises another token in the next free slot (`softhsm2-util --init-token --free`).
    /// Only providers whose module is initialised afterwards see it (see the type's note).
    public func addToken(label: String, pin: String, soPIN: String? = nil) async throws(TesseraError) {
        try await runUtility([
            "--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", soPIN ?? self.soPIN,
        ])
    }

    /// Deletes a token and its objects by label.
    public func deleteToken(label: String) async throws(TesseraError) {
        try await runUtility(["--delete-token", "--token", label])
    }

    /// Removes the directory now (the process keeps `SOFTHSM2_CONF` pointing at it); it goes at exit anyway.
    public func removeDirectory() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Created by the first `shared()` call; later callers await the same task instead of blocking on it.
    private static let sharedFixture = Task { () -> Result<SoftHSMFixture, TesseraError> in
        do throws(TesseraError) { return .success(try await SoftHSMFixture.make(spareTokens: sharedSpareTokens)) } catch
        {
            return .failure(error)
        }
    }

    /// Spare tokens in the shared fixture.
    public static let sharedSpareTokens = 64

    /// The process-wide fixture (created on first use with the default label and PINs and `sharedSpareTokens`
    /// spares; its directory is removed when the process exits).
    public static func shared() async throws(TesseraError) -> SoftHSMFixture { try await sharedFixture.value.get() }

    private static func utilityPath() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
            let candidate = "\(dir)/softhsm2-util"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    private func runUtility(_ arguments: [String]) async throws(TesseraError) {
        guard let tool = Self.utilityPath() else {
            throw .internalError("softhsm2-util not found in PATH; install it with `apt-get install -y softhsm2`")
        }
        let r = try await Subprocess.run(tool, arguments, environment: ["SOFTHSM2_CONF": configPath])
        guard r.status == 0 else {
            let text = r.output
            throw .internalError("softhsm2-util \(arguments.first ?? "") failed (\(r.status)): \(text)")
        }
    }
}

private final class ClaimCounter: Sendable {
    private let count = Locked(0)

    func next(below limit: Int) -> Int? {
        count.withLock { count in
            guard count < limit else { return nil }
            count += 1
            return count - 1
        }
    }
}
