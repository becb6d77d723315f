import Dispatch
import FoundationEssentials
@_spi(Benchmarks) @_spi(Testing) import PKCS11
import RPC
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `--ssh-agent`: SIGN_REQUEST/s and latency on tesserad's agent socket vs OpenSSH's `ssh-agent` holding the same
/// SoftHSM2 key through its PKCS#11 provider (`ssh-add -s`), vs raw C_Sign, in the same run.
enum SSHAgentBench {
    static func run(seconds: Double, tesserad: String, clientCounts: [Int]) async throws {
        let token = try await BenchToken.make(manyConnections: true)
        let hsm = token.hsm
        defer { hsm.removeDirectory() }
        let work = token.directory
        let socket = token.socket, agentSocket = work + "/agent.sock", opensshSocket = work + "/openssh.sock"

        let daemon = try ChildProcess.start(
            [tesserad] + token.daemonArguments(["--ssh-agent-socket", agentSocket]), output: .inherit)
        // In the foreground (-D); its output (the SSH_AUTH_SOCK line, its PKCS#11 helper's errors) goes to a file.
        let opensshLog = work + "/ssh-agent.log"
        let opensshAgent: ChildProcess
        do {
            opensshAgent = try ChildProcess.start(
                ["/usr/bin/ssh-agent", "-D", "-a", opensshSocket], environment: ["SOFTHSM2_CONF": hsm.configPath],
                output: .file(opensshLog))
        } catch {
            await Subprocess.terminate(daemon)
            throw error
        }
        do {
            var client: RPCClient?
            while client == nil {
                client = try? await RPCClient.connect(path: socket)
                if client == nil { try await Task.sleep(for: .milliseconds(5)) }
            }
            let line = try await client!.call("ssh.keygen", ["comment": "bench"])["publicKey"]!.stringValue!
            let blob = Array(Data(base64Encoded: String(line.split(separator: " ")[1]))!)

            let askpass = work + "/askpass.sh"
            try Data("#!/bin/sh\necho 1234\n".utf8).write(to: URL(fileURLWithPath: askpass))
            chmod(askpass, 0o755)
            while !FileManager.default.fileExists(atPath: opensshSocket) { try await Task.sleep(for: .milliseconds(5)) }
            let added = try await Subprocess.run(
                "/usr/bin/ssh-add", ["-s", hsm.modulePath],
                environment: [
                    "SSH_AUTH_SOCK": opensshSocket, "SSH_ASKPASS": askpass, "SSH_ASKPASS_REQUIRE": "force",
                    "DISPLAY": ":0",
                ])
            guard added.status == 0 else {
                let log = (try? String(contentsOfFile: opensshLog, encoding: .utf8)) ?? ""
                throw BenchError("ssh-add -s failed: \(added.output); ssh-agent: \(log)")
            }

            let provider = try PKCS11Provider(modulePaths: [hsm.modulePath])
            guard let token = provider.tokens().first(where: { $0.info.label == "bench" }) else {
                throw BenchError("no token")
            }
            try await token.login(pin: "1234")
            guard let keyID = try await token.keyIDs(labelPrefix: "ssh:").first else { throw BenchError("no SSH key") }
            let digest = [UInt8](repeating: 0xA5, count: 32)

            print(
                "tessera-bench --ssh-agent: SoftHSM2, P-256, \(seconds)s per point, \(ProcessInfo.processInfo.activeProcessorCount) cores"
            )
            print(
                "CPU µs/sign: user+system CPU time of the agent's processes (OpenSSH: ssh-agent and ssh-pkcs11-helper;"
                    + " raw: this process) per signature; does not depend on other load on the machine")
            print(
                "clients  raw C_Sign/s  tesserad sign/s  median ms  OpenSSH sign/s  median ms  tesserad/OpenSSH  tesserad/raw"
                    + "  raw CPU µs  tesserad CPU µs  OpenSSH CPU µs  OpenSSH/tesserad CPU")
            let daemonPID = daemon.pid, opensshPID = opensshAgent.pid
            for clients in clientCounts {
                let iterations = max(2000, Int(seconds * 4000))
                let rawCPU0 = CPUTime.ofSelf()
                let raw = try await token.rawSignLoop(
                    keyID: keyID, digest: digest, iterations: iterations, sessions: min(clients, 8))
                let rawCPU = (CPUTime.ofSelf() - rawCPU0) / Double(iterations)
                let tCPU0 = CPUTime.of(tree: daemonPID)
                let (t, tMedian, tCount) = try await load(agentSocket, blob: blob, clients: clients, seconds: seconds)
                let tCPU = (CPUTime.of(tree: daemonPID) - tCPU0) / Double(tCount)
                let oCPU0 = CPUTime.of(tree: opensshPID)
                let (o, oMedian, oCount) = try await load(opensshSocket, blob: blob, clients: clients, seconds: seconds)
                let oCPU = (CPUTime.of(tree: opensshPID) - oCPU0) / Double(oCount)
                print(
                    String(
                        printf:
                            "%7d  %12.0f  %15.0f  %9.3f  %14.0f  %9.3f  %16.2f  %12.2f  %10.1f  %15.1f  %14.1f  %20.2f",
                        clients, raw, t, tMedian * 1000, o, oMedian * 1000, t / o, t / raw,
                        rawCPU * 1e6, tCPU * 1e6, oCPU * 1e6, oCPU / tCPU))
            }
            provider.finalize()
        } catch {
            await Subprocess.terminate(opensshAgent, grace: 1)
            await Subprocess.terminate(daemon)
            throw error
        }
        await Subprocess.terminate(opensshAgent, grace: 1)
        await Subprocess.terminate(daemon)
    }

    /// `clients` blocking connections sending SIGN_REQUEST back to back; returns signatures/s, the median latency
    /// and the number of signatures.
    static func load(_ path: String, blob: [UInt8], clients: Int, seconds: Double) async throws -> (Double, Double, Int)
    {
        try await DedicatedThread.run(name: "bench.agent-load") { () throws -> (Double, Double, Int) in
            try blockingLoad(path, blob: blob, clients: clients, seconds: seconds)
        }
    }

    private static func blockingLoad(_ path: String, blob: [UInt8], clients: Int, seconds: Double) throws -> (
        Double, Double, Int
    ) {
        func be32(_ n: Int) -> [UInt8] {
            [UInt8(n >> 24 & 0xff), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
        }
        let data = [UInt8](repeating: 0x42, count: 64)
        let body: [UInt8] = [13] + be32(blob.count) + blob + be32(data.count) + data + be32(0)
        let request = be32(body.count) + body
        let fds = try (0..<clients).map { _ in try LoadClient.connect(path) }
        defer { for fd in fds { close(fd) } }
        let results = Locked([[Double]](repeating: [], count: clients))
        let failure = Locked<String?>(nil)
        let start = LoadClient.monotonicNanos()
        let deadline = start + UInt64(seconds * 1e9)
        let group = DispatchGroup()
        for (i, fd) in fds.enumerated() {
            group.enter()
            DedicatedThread.detach(name: "bench.agent-client.\(i)") {
                var latencies: [Double] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while LoadClient.monotonicNanos() < deadline {
                    let t0 = LoadClient.monotonicNanos()
                    guard LoadClient.writeAll(fd, request) else { failure.withLock { $0 = "write failed" }; break }
                    var have = 0, need = 4
                    while have < need {
                        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + have, need - have) }
                        guard n > 0 else { break }
                        have += n
                        if have == 4 {
                            need =
                                4 + (Int(buffer[0]) << 24 | Int(buffer[1]) << 16 | Int(buffer[2]) << 8 | Int(buffer[3]))
                        }
                    }
                    guard have == need, have > 4, buffer[4] == 14 else {
                        failure.withLock {
                            $0 = "no SIGN_RESPONSE from \(path) (type \(have > 4 ? Int(buffer[4]) : -1))"
                        }
                        break
                    }
                    latencies.append(Double(LoadClient.monotonicNanos() - t0) / 1e9)
                }
                results.withLock { $0[i] = latencies }
                group.leave()
            }
        }
        group.wait()
        let wall = Double(LoadClient.monotonicNanos() - start) / 1e9
        if let f = failure.withLock({ $0 }) { throw BenchError(f) }
        let all = results.withLock { $0 }.flatMap { $0 }.sorted()
        guard !all.isEmpty else { throw BenchError("no signatures") }
        return (Double(all.count) / wall, all[all.count / 2], all.count)
    }
}

/// User + system CPU seconds from /proc (clock ticks), for the CPU cost per signature.
enum CPUTime {
    private static let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// This process (getrusage: microsecond resolution).
    static func ofSelf() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(
            usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// `pid` and its live descendants (ssh-agent's ssh-pkcs11-helper).
    static func of(tree pid: Int32) -> Double {
        var total = 0.0, queue = [pid]
        while let p = queue.popLast() {
            if let stat = try? String(contentsOfFile: "/proc/\(p)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            {
                // Fields after "comm)": state is field 3; utime and stime are fields 14 and 15.
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                if fields.count > 13, let u = Double(fields[11]), let s = Double(fields[12]) {
                    total += (u + s) / ticks
                }
            }
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(p)/task")) ?? []
            for t in tasks {
                let children = (try? String(contentsOfFile: "/proc/\(p)/task/\(t)/children", encoding: .utf8)) ?? ""
                queue += children.split(separator: " ").compactMap { Int32($0) }
            }
        }
        return total
    }
}
