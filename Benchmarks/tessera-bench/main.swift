import Foundation
import PKCS11
import RPC
import TesseraCore
import TesseraTestSupport

/// Assertions per second over the daemon's socket against raw PKCS#11 C_Sign on the same SoftHSM2 token,
/// measured in the same run. Usage: tessera-bench [--seconds S] [--tesserad PATH]
@main
enum Bench {
    static func main() async throws {
        var seconds = 5.0
        var tesserad = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("tesserad").path
        var piv = false  // --piv: the PIV card benchmark (PIVBench.swift) instead of PKCS#11
        var it = CommandLine.arguments.dropFirst().makeIterator()
        while let a = it.next() {
            switch a {
            case "--seconds": seconds = Double(it.next() ?? "") ?? seconds
            case "--tesserad": tesserad = it.next() ?? tesserad
            case "--piv": piv = true
            default: print("usage: tessera-bench [--seconds S] [--tesserad PATH] [--piv]"); return
            }
        }
        if piv { try await PIVBench.run(seconds: seconds, tesserad: tesserad); return }
        let hsm = try SoftHSMFixture(label: "bench", pin: "1234")
        defer { hsm.removeDirectory() }
        let work = hsm.directory
        let pinFile = work + "/pin"
        try Data("1234".utf8).write(to: URL(fileURLWithPath: pinFile))
        let config = work + "/tesserad.json"
        try Data(#"{"pinFiles": {"bench": "\#(pinFile)"}}"#.utf8).write(to: URL(fileURLWithPath: config))

        // Start the daemon and time it to readiness.
        let socket = work + "/tesserad.sock"
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: tesserad)
        daemon.arguments = ["--socket", socket, "--state-dir", work + "/state", "--pkcs11-module", hsm.modulePath,
                            "--no-embedded-softhsm", "--config", config, "--log-level", "warning"]
        let spawned = ContinuousClock.now
        try daemon.run()
        defer { daemon.terminate(); daemon.waitUntilExit() }
        var client: RPCClient?
        while client == nil {
            client = try? await RPCClient.connect(path: socket)
            if client == nil { try await Task.sleep(for: .milliseconds(1)) }
        }
        _ = try await client!.call("daemon.status")
        let ready = ContinuousClock.now - spawned
        try await Task.sleep(for: .seconds(1))
        let idleRSS = rssKiB(pid: daemon.processIdentifier)

        let reg = try await client!.call("passkey.enroll", [
            "rpId": "bench.example", "user": ["id": "dXNlcg", "name": "bench"], "challenge": "Y2hhbGxlbmdlY2hhbGxlbmdl",
        ])
        let credentialId = reg["credentialId"]!.stringValue!
        let sessions = 8  // the daemon's default pool size for software tokens

        // Baseline: raw C_Sign in this process on the same token, same key.
        let provider = try PKCS11Provider(modulePaths: [hsm.modulePath])
        guard let token = provider.tokens().first(where: { $0.info.label == "bench" }) else { fatalError("no token") }
        try await token.login(pin: "1234")
        let keyHandle = try await firstKeyID(token)
        let digest = [UInt8](repeating: 0xA5, count: 32)

        print("tessera-bench: SoftHSM2, P-256, \(seconds)s per point, \(ProcessInfo.processInfo.activeProcessorCount) cores")
        print("startup to ready: \(format(ready)); idle RSS: \(idleRSS.map { "\($0) KiB" } ?? "?")")
        print("clients  raw C_Sign/s (sessions)  assertions/s  ratio  median ms  p99 ms  daemon CPU µs/assertion")
        var rawSingleLatency = 0.0
        for clients in [1, 4, 16] {
            let rawSessions = min(clients, sessions)
            let iterations = max(2000, Int(seconds * 4000) * rawSessions)
            let raw = try await token.rawSignLoop(keyID: keyHandle, digest: digest, iterations: iterations, sessions: rawSessions)
            if clients == 1 { rawSingleLatency = 1.0 / raw }
            let cpuBefore = cpuSeconds(pid: daemon.processIdentifier)
            let (rate, latencies) = try await assertionLoad(socket: socket, credentialId: credentialId, clients: clients, seconds: seconds)
            let cpu = (cpuSeconds(pid: daemon.processIdentifier) - cpuBefore) / Double(latencies.count)
            let sorted = latencies.sorted()
            let median = sorted[sorted.count / 2], p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
            print(String(format: "%7d  %12.0f (%2d)          %12.0f  %5.2f  %9.3f  %6.3f  %8.0f", clients, raw, rawSessions,
                         rate, rate / raw, median * 1000, p99 * 1000, cpu * 1e6))
            if clients == 1 {
                print(String(format: "         added latency per assertion at 1 client (median − raw C_Sign): %.0f µs",
                             (median - rawSingleLatency) * 1e6))
            }
        }
        provider.finalize()
    }

    /// Runs `clients` connections, each issuing assertions back to back for `seconds`.
    static func assertionLoad(socket: String, credentialId: String, clients: Int, seconds: Double) async throws -> (Double, [Double]) {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        let started = ContinuousClock.now
        let all = try await withThrowingTaskGroup(of: [Double].self) { group in
            for _ in 0..<clients {
                group.addTask {
                    let c = try await RPCClient.connect(path: socket)
                    var lat: [Double] = []
                    let params: JSONValue = ["rpId": "bench.example", "challenge": "YmVuY2gtY2hhbGxlbmdlLTAxMjM0NTY3",
                                             "allowCredentials": [.string(credentialId)]]
                    while ContinuousClock.now < deadline {
                        let t0 = ContinuousClock.now
                        _ = try await c.call("passkey.authenticate", params)
                        lat.append(Bench.seconds(ContinuousClock.now - t0))
                    }
                    await c.close()
                    return lat
                }
            }
            var out: [Double] = []
            for try await l in group { out += l }
            return out
        }
        return (Double(all.count) / Bench.seconds(ContinuousClock.now - started), all)
    }

    static func firstKeyID(_ token: PKCS11Token) async throws -> [UInt8] {
        guard let id = try await token.keyIDs(labelPrefix: "tessera:").first else { fatalError("no key on token") }
        return id
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    static func format(_ d: Duration) -> String { String(format: "%.1f ms", seconds(d) * 1000) }

    /// utime + stime of a process in seconds (from /proc/PID/stat, clock ticks of 1/100 s).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = s.lastIndex(of: ")") else { return 0 }
        let fields = s[s.index(after: close)...].split(separator: " ")
        // After the command: state(0) ppid(1) … utime(11) stime(12).
        guard fields.count > 12, let u = Double(fields[11]), let k = Double(fields[12]) else { return 0 }
        return (u + k) / 100
    }

    static func rssKiB(pid: Int32) -> Int? {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in s.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "")
        }
        return nil
    }
}
