import FoundationEssentials
@_spi(Benchmarks) @_spi(Testing) import PKCS11
import RPC
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

/// Assertions per second over the daemon's socket against raw PKCS#11 C_Sign and the same C_Sign loop through
/// p11-kit's remoting (`p11-kit server` + `p11-kit-client.so`) on the same SoftHSM2 token, measured in the same run.
/// Ends with the summary table of docs/PERFORMANCE.md (raw, p11-kit, tesserad) and tesserad's idle RSS after the load.
/// Usage: tessera-bench [--seconds S] [--tesserad PATH] [--clients 1,4,16] [--daemon-cpus LIST]
/// [--piv | --ssh-agent | --ctap | --callgrind N | --order-profile FILE] [--no-pin]. The load comes from `LoadClient` (blocking sockets, one thread per client), not
/// from `RPCClient`; its own CPU time is reported beside the daemon's so a shared machine can be judged.
@main
enum Bench {
    static let usage = """
        usage: tessera-bench [--seconds S] [--tesserad PATH] [--clients 1,4,16] [--daemon-cpus LIST]
                             [--piv | --ssh-agent | --ctap | --callgrind N | --order-profile FILE] [--no-pin]
          --no-pin            send no PIN with the assertions (default: the token's PIN in every one, as a
                              relying party asking for user verification does)
          --no-p11-kit        leave out the p11-kit remoting peer
          --callgrind N       instructions per assertion in tesserad under valgrind --tool=callgrind (N assertions
                              after a warm-up, less a run without them), without the token's signing; top functions
          --callgrind-out DIR keep the two callgrind profiles in DIR (e.g. for callgrind_annotate --tree=caller)
          --order-profile FILE  one callgrind profile of tesserad through start-up, an enrolment, assertions
                              from 1 and 16 clients, --idle-seconds without requests and the shutdown, for
                              `make order-file` (run with VALGRIND_OPTS=--demangle=no)
          --idle-seconds S    after the load, wait S seconds (default 60) and print tesserad's idle RSS
          --daemon-cpus LIST  run tesserad under `taskset -c LIST` (e.g. 1; start the bench itself under
                              `taskset -c 0` to give load generator and daemon a core each)
        """

    static func main() async throws {
        var seconds = 5.0
        var clientCounts = [1, 4, 16]
        var daemonCPUs: String?
        var idleSeconds = 60.0
        var tesserad = FilePaths.join(FilePaths.directory(of: CommandLine.arguments[0]), "tesserad")
        var piv = false  // --piv: the PIV card benchmark (PIVBench.swift) instead of PKCS#11
        var withPIN = true
        var withP11Kit = true
        var callgrindCount: Int?
        var callgrindOut: String?
        var orderProfile: String?
        var sshAgent = false  // --ssh-agent: the SSH agent benchmark (SSHAgentBench.swift)
        var ctap = false  // --ctap: CTAP getAssertion latency (CTAPBench.swift)
        var it = CommandLine.arguments.dropFirst().makeIterator()
        if CommandLine.arguments.count == 4, CommandLine.arguments[1] == "--echo-peer" {
            TransportFloor.serve(path: CommandLine.arguments[2], answerBytes: Int(CommandLine.arguments[3]) ?? 1)
        }
        while let a = it.next() {
            switch a {
            case "--seconds": seconds = Double(it.next() ?? "") ?? seconds
            case "--tesserad": tesserad = it.next() ?? tesserad
            case "--piv": piv = true
            case "--pin": withPIN = true
            case "--no-pin": withPIN = false
            case "--no-p11-kit": withP11Kit = false
            case "--callgrind": callgrindCount = Int(it.next() ?? "") ?? 1000
            case "--callgrind-out": callgrindOut = it.next()
            case "--order-profile": orderProfile = it.next()
            case "--ssh-agent": sshAgent = true
            case "--ctap": ctap = true
            case "--clients":
                clientCounts = (it.next() ?? "").split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
            case "--daemon-cpus": daemonCPUs = it.next()
            case "--idle-seconds": idleSeconds = Double(it.next() ?? "") ?? idleSeconds
            default: print(usage); return
            }
        }
        if let orderProfile {
            try await CallgrindBench.orderProfile(to: orderProfile, tesserad: tesserad, idleSeconds: idleSeconds)
            return
        }
        if let callgrindCount {
            try await CallgrindBench.run(
                assertions: callgrindCount, tesserad: tesserad, withPIN: withPIN, keepIn: callgrindOut)
            return
        }
        if piv { try await PIVBench.run(seconds: seconds, tesserad: tesserad); return }
        if ctap { try await CTAPBench.run(seconds: seconds, tesserad: tesserad); return }
        if sshAgent {
            try await SSHAgentBench.run(seconds: seconds, tesserad: tesserad, clientCounts: clientCounts); return
        }
        let token = try await BenchToken.make(manyConnections: true)
        let hsm = token.hsm
        defer { hsm.removeDirectory() }
        let work = token.directory

        // Start the daemon and time it to readiness.
        let socket = token.socket
        let spawned = ContinuousClock.now
        let daemon = try ChildProcess.start(
            (daemonCPUs.map { ["/usr/bin/taskset", "-c", $0] } ?? []) + [tesserad] + token.daemonArguments(),
            output: .inherit)
        var p11kit: P11KitPeer?
        do {
            var client: RPCClient?
            while client == nil {
                client = try? await RPCClient.connect(path: socket)
                if client == nil { try await Task.sleep(for: .milliseconds(1)) }
            }
            _ = try await client!.call("daemon.status")
            let ready = ContinuousClock.now - spawned
            try await Task.sleep(for: .seconds(1))
            let idleRSS = memory(pid: daemon.pid)

            let reg = try await BenchToken.enroll(on: client!)
            let credentialId = reg["credentialId"]!.stringValue!
            let sessions = 8  // the daemon's default pool size for software tokens

            // Baseline: raw C_Sign in this process on the same token, same key.
            let provider = try PKCS11Provider(modulePaths: [hsm.modulePath])
            guard let token = provider.tokens().first(where: { $0.info.label == "bench" }) else {
                fatalError("no token")
            }
            try await token.login(pin: "1234")
            let keyHandle = try await firstKeyID(token)
            let digest = [UInt8](repeating: 0xA5, count: 32)
            if withP11Kit { p11kit = try await P11KitPeer.start(hsm: hsm, label: "bench", pin: "1234") }

            print(
                "tessera-bench: SoftHSM2, P-256, \(seconds)s per point, \(ProcessInfo.processInfo.activeProcessorCount) cores"
            )
            print("startup to ready: \(format(ready)); idle RSS: \(idleRSS)")
            if let daemonCPUs { print("tesserad pinned to CPUs \(daemonCPUs)") }
            if withPIN { print("every assertion carries the PIN (checked against the last good PIN's verifier)") }
            print(
                "clients  raw C_Sign/s (sessions)  p11-kit/s  ratio  assertions/s  ratio  median ms  p99 ms  daemon CPU µs/a  client CPU µs/a  daemon cs/a"
            )
            var rawSingleLatency = 0.0
            var summary = Summary()
            for clients in clientCounts {
                let rawSessions = min(clients, sessions)
                let iterations = max(2000, Int(seconds * 4000) * rawSessions)
                let raw = try await token.rawSignLoop(
                    keyID: keyHandle, digest: digest, iterations: iterations, sessions: rawSessions)
                if clients == 1 { rawSingleLatency = 1.0 / raw }
                let remote = try await p11kit?.token.rawSignLoop(
                    keyID: keyHandle, digest: digest, iterations: iterations / 2,
                    sessions: rawSessions)
                let pid = daemon.pid
                let cpuBefore = cpuSeconds(pid: pid), ownBefore = LoadClient.ownCPUSeconds(),
                    csBefore = contextSwitches(pid: pid)
                // tesserad's peak RSS during the run, sampled every 100 ms.
                let sampler = Task {
                    var peak = 0
                    while !Task.isCancelled {
                        peak = max(peak, residentKiB(pid: pid))
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                    return peak
                }
                let (latencies, wall, sizes) = try await LoadClient.run(
                    socket: socket, credentialId: credentialId, clients: clients, seconds: seconds,
                    pin: withPIN ? "1234" : nil)
                sampler.cancel()
                let peakRSS = await sampler.value
                summary.assertions += latencies.count
                let n = Double(latencies.count)
                let cpu = (cpuSeconds(pid: pid) - cpuBefore) / n
                let own = (LoadClient.ownCPUSeconds() - ownBefore) / n
                let cs = Double(contextSwitches(pid: pid) - csBefore) / n
                let rate = n / wall
                let sorted = latencies.sorted()
                let median = sorted[sorted.count / 2], p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
                print(
                    String(
                        printf:
                            "%7d  %12.0f (%2d)          %9.0f  %5.2f  %12.0f  %5.2f  %9.3f  %6.3f  %15.0f  %15.0f  %11.1f",
                        clients, raw, rawSessions, remote ?? .nan, (remote ?? .nan) / raw, rate, rate / raw,
                        median * 1000, p99 * 1000, cpu * 1e6, own * 1e6, cs))
                summary.rows[clients] = (remote.map { $0 / raw }, rate / raw, peakRSS)
                if clients == 1 {
                    summary.addedMedian = median - rawSingleLatency
                    summary.p11KitAddedMean = remote.map { 1 / $0 - rawSingleLatency }
                    print(
                        String(
                            printf:
                                "         added latency at 1 client: tesserad median − raw C_Sign %.0f µs (mean %.0f µs); "
                                + "p11-kit mean %.0f µs", (median - rawSingleLatency) * 1e6,
                            (wall / n - rawSingleLatency) * 1e6,
                            ((remote.map { 1 / $0 } ?? .nan) - rawSingleLatency) * 1e6))
                    let floor = try await TransportFloor.measure(
                        requestBytes: sizes.request, answerBytes: sizes.answer, seconds: min(seconds, 2),
                        directory: work, cpus: daemonCPUs
                    ).sorted()
                    print(
                        String(
                            printf:
                                "         transport floor: Unix socket round trip to a process that only answers "
                                + "(%d-byte request, %d-byte answer) median %.0f µs, p99 %.0f µs",
                            sizes.request, sizes.answer, floor[floor.count / 2] * 1e6,
                            floor[min(floor.count - 1, floor.count * 99 / 100)] * 1e6))
                }
            }
            print("tesserad RSS after the load: \(memory(pid: daemon.pid))")
            if let p11kit { summary.p11KitRSS = residentKiB(pid: p11kit.server.pid, withChildren: true) }
            if idleSeconds > 0 {
                try await Task.sleep(for: .seconds(idleSeconds))
                summary.idleRSS = residentKiB(pid: daemon.pid)
                summary.idleSeconds = idleSeconds
                print(
                    "tesserad idle RSS after \(summary.assertions) assertions + \(Int(idleSeconds)) s idle: "
                        + memory(pid: daemon.pid))
            }
            summary.print()
            print("CPU per assertion: tesserad from /proc/PID/stat, the load generator (this process) from getrusage;")
            print(
                "cs/a: tesserad context switches (all threads) per assertion; ratios are to raw C_Sign of the same row")
            print(
                "p11-kit: the raw loop through p11-kit server + p11-kit-client.so (one connection; mean latency = 1/rate)"
            )
            await p11kit?.stop()
            provider.finalize()
        } catch {
            await p11kit?.stop()
            await Subprocess.terminate(daemon)
            throw error
        }
        await Subprocess.terminate(daemon)
    }

    static func firstKeyID(_ token: PKCS11Token) async throws -> [UInt8] {
        guard let id = try await token.keyIDs(labelPrefix: "tessera:").first else { fatalError("no key on token") }
        return id
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    static func format(_ d: Duration) -> String { String(printf: "%.1f ms", seconds(d) * 1000) }

    /// `s` left-aligned in `width` columns (printf's `%-*s`, which `String(printf:)` does not take).
    static func pad(_ s: String, _ width: Int) -> String { s + String(repeating: " ", count: max(0, width - s.count)) }

    /// utime + stime of a process in seconds (from /proc/PID/stat, clock ticks of 1/100 s).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = s.lastIndex(of: ")")
        else { return 0 }
        let fields = s[s.index(after: close)...].split(separator: " ")
        // After the command: state(0) ppid(1) … utime(11) stime(12).
        guard fields.count > 12, let u = Double(fields[11]), let k = Double(fields[12]) else { return 0 }
        return (u + k) / 100
    }

    /// Voluntary + involuntary context switches of every thread of a process.
    static func contextSwitches(pid: Int32) -> Int {
        let dir = "/proc/\(pid)/task"
        guard let tids = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return 0 }
        var total = 0
        for tid in tids {
            guard let s = try? String(contentsOfFile: "\(dir)/\(tid)/status", encoding: .utf8) else { continue }
            for line in s.split(separator: "\n") where line.contains("ctxt_switches:") {
                total += Int(line.split(separator: "\t").last?.trimmingWhitespace() ?? "") ?? 0
            }
        }
        return total
    }

    /// VmRSS of a process in KiB (0 when it is gone), with `withChildren` plus that of its children (p11-kit server
    /// forks a `p11-kit remote` per connection).
    static func residentKiB(pid: Int32, withChildren: Bool = false) -> Int {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        let own =
            s.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }.flatMap {
                $0.split(separator: " ").dropFirst().first.flatMap { Int($0) }
            } ?? 0
        guard withChildren,
            let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)
        else { return own }
        return own + children.split(separator: " ").compactMap { Int32($0) }.map { residentKiB(pid: $0) }.reduce(0, +)
    }

    /// "N KiB (anonymous M KiB)" from /proc/PID/status. The file-backed rest (code, read-only data, libraries) is
    /// clean and shared, and it moves with the page cache's state from run to run; the anonymous part is the
    /// daemon's own memory.
    static func memory(pid: Int32) -> String {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return "?" }
        func field(_ name: String) -> String {
            s.split(separator: "\n").first { $0.hasPrefix(name + ":") }.flatMap {
                $0.split(separator: " ").dropFirst().first.map(String.init)
            } ?? "?"
        }
        return "\(field("VmRSS")) KiB (anonymous \(field("RssAnon")) KiB)"
    }
}

/// The three-row table of docs/PERFORMANCE.md, printed at the end of the default run.
struct Summary {
    /// By client count: p11-kit's and tesserad's ratio to raw C_Sign, and tesserad's peak RSS (KiB) during the run.
    var rows: [Int: (p11kit: Double?, tesserad: Double, peakRSS: Int)] = [:]
    var addedMedian = Double.nan
    var p11KitAddedMean: Double?
    var p11KitRSS: Int?
    var idleRSS: Int?
    var idleSeconds = 0.0
    var assertions = 0

    func print() {
        func ratio(_ v: Double?) -> String { v.map { String(printf: "%.2f", $0) } ?? "–" }
        func mb(_ kib: Int) -> String { String(printf: "%.1f MB", Double(kib) / 1024) }
        let one = rows[1], many = rows.keys.max().flatMap { rows[$0] }, manyCount = rows.keys.max() ?? 0
        Swift.print("summary (ratios to raw C_Sign in the same run):")
        Swift.print("| path | 1 client | \(manyCount) clients | added at 1 client | RSS |")
        Swift.print("|---|---|---|---|---|")
        Swift.print("| raw C_Sign (in process) | 1.00 | 1.00 | 0 µs | – |")
        Swift.print(
            "| p11-kit server remoting | \(ratio(one?.p11kit)) | \(ratio(many?.p11kit)) | "
                + (p11KitAddedMean.map { String(printf: "+%.0f µs (mean)", $0 * 1e6) } ?? "–") + " | "
                + (p11KitRSS.map { mb($0) + " (server + remote)" } ?? "–") + " |")
        let idle = idleRSS.map { "idle \(mb($0)) after \(assertions) assertions + \(Int(idleSeconds)) s" } ?? "idle –"
        Swift.print(
            "| tesserad passkey.authenticate | \(ratio(one?.tesserad)) | \(ratio(many?.tesserad)) | "
                + String(printf: "+%.0f µs (median)", addedMedian * 1e6) + " | \(idle); "
                + (many.map { "\(mb($0.peakRSS)) peak at \(manyCount) clients" } ?? "") + " |")
    }
}
