import FoundationEssentials
@_spi(Benchmarks) @_spi(Testing) import PKCS11
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The p11-kit remoting peer: `p11-kit server` exporting the SoftHSM2 token on a Unix socket, and this process
/// loading `p11-kit-client.so` pointed at it, so the raw C_Sign loop runs over p11-kit's RPC (apt p11-kit and
/// p11-kit-modules). Immutable once started (the server process is only started and terminated).
final class P11KitPeer: @unchecked Sendable {
    static let clientModule = "/usr/lib/x86_64-linux-gnu/pkcs11/p11-kit-client.so"

    let server: ChildProcess
    let provider: PKCS11Provider
    let token: PKCS11Token

    private init(server: ChildProcess, provider: PKCS11Provider, token: PKCS11Token) {
        self.server = server; self.provider = provider; self.token = token
    }

    /// Starts the server for token `label` of `hsm` and logs in through the client module.
    static func start(hsm: SoftHSMFixture, label: String, pin: String) async throws -> P11KitPeer {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/p11-kit"),
            FileManager.default.fileExists(atPath: clientModule)
        else {
            throw BenchError(
                "p11-kit peer: /usr/bin/p11-kit or \(clientModule) missing (scripts/setup.sh installs them)")
        }
        let socket = hsm.directory + "/p11-kit.sock", log = hsm.directory + "/p11-kit.log"
        let server = try ChildProcess.start(
            ["/usr/bin/p11-kit", "server", "-f", "--provider", hsm.modulePath, "-n", socket, "pkcs11:token=\(label)"],
            environment: ["SOFTHSM2_CONF": hsm.configPath], output: .file(log))
        do {
            var waited = 0
            while !FileManager.default.fileExists(atPath: socket) {
                guard server.isRunning, waited < 10_000 else {
                    let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                    throw BenchError("p11-kit server did not create \(socket): \(output)")
                }
                try await Task.sleep(for: .milliseconds(5))
                waited += 5
            }
            // p11-kit-client.so reads the address when it is initialised.
            setenv("P11_KIT_SERVER_ADDRESS", "unix:path=\(socket)", 1)
            let provider = try PKCS11Provider(modulePaths: [clientModule])
            guard let token = provider.tokens().first(where: { $0.info.label == label }) else {
                provider.finalize()
                throw BenchError("p11-kit client: no token \(label)")
            }
            try await token.login(pin: pin)
            return P11KitPeer(server: server, provider: provider, token: token)
        } catch {
            await Subprocess.terminate(server, grace: 1)
            throw error
        }
    }

    func stop() async {
        provider.finalize()
        await Subprocess.terminate(server, grace: 1)
    }
}
