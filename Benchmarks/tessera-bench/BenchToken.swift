import FoundationEssentials
import RPC
import TesseraCore
import TesseraTestSupport

/// The SoftHSM2 token the PKCS#11 benchmarks sign with (label "bench", PIN 1234 in a PIN file the daemon's config
/// names), and tesserad's arguments for it: socket, state and config in the token's directory.
struct BenchToken {
    let hsm: SoftHSMFixture
    let config: String
    var directory: String { hsm.directory }
    var socket: String { hsm.directory + "/tesserad.sock" }

    /// `manyConnections`: the per-uid connection bound raised to fit any --clients (every load client is this
    /// process's uid).
    static func make(manyConnections: Bool = false) async throws -> BenchToken {
        let hsm = try await SoftHSMFixture.make(label: "bench", pin: "1234")
        let pinFile = hsm.directory + "/pin"
        try Data("1234".utf8).write(to: URL(fileURLWithPath: pinFile))
        let config = hsm.directory + "/tesserad.json"
        let bounds = manyConnections ? #", "maxConnections": 4096, "maxConnectionsPerUid": 4096"# : ""
        try Data(#"{"pinFiles": {"bench": "\#(pinFile)"}\#(bounds)}"#.utf8).write(to: URL(fileURLWithPath: config))
        return BenchToken(hsm: hsm, config: config)
    }

    /// tesserad's arguments (after the program) on this token, `extra` (other sockets) among them.
    func daemonArguments(_ extra: [String] = []) -> [String] {
        ["--socket", socket] + extra + [
            "--state-dir", directory + "/state", "--pkcs11-module", hsm.modulePath, "--no-embedded-softhsm",
            "--config", config, "--log-level", "warning",
        ]
    }

    /// A passkey made on the token over `client`; its `passkey.enroll` answer.
    static func enroll(on client: RPCClient, _ extra: [String: JSONValue] = [:]) async throws -> JSONValue {
        var params: [String: JSONValue] = [
            "rpId": "bench.example", "user": ["id": "dXNlcg", "name": "bench"], "challenge": "Y2hhbGxlbmdlY2hhbGxlbmdl",
        ]
        params.merge(extra) { _, new in new }
        return try await client.call("passkey.enroll", .object(params))
    }
}
