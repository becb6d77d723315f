import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

/// `--callgrind N`: instructions tesserad executes per `passkey.authenticate`, not counting the token's own
/// signing (C_SignInit + C_Sign), from valgrind's callgrind (a count, not a time: the figure does not move with
/// the machine's load; but work done once per interval, such as the PKCS#11 token list cached for 1 s, comes
/// round more often under valgrind's slowdown and counts more than it would at full speed).
///
/// Two runs of the daemon under callgrind on the same state: both start, answer a warm-up of assertions and stop
/// (SIGTERM); the second answers `N` more. Per assertion = (instructions of run 2 − run 1) / N, less the same
/// difference of SoftHSM2's `C_SignInit` + `C_Sign` (inclusive: SoftHSM2 unwraps and loads the key in `C_SignInit`,
/// which costs about as much as `C_Sign`; raw C_Sign and p11-kit pay both too). Functions are ranked by their
/// difference per assertion: inclusive, own, and own by object.
enum CallgrindBench {
    static let warmup = 200

    /// The bench token (`BenchToken`) and tesserad's arguments for it; `profiled` is the copy valgrind runs.
    struct Setup {
        let hsm: SoftHSMFixture
        let socket: String
        let profiled: String
        let arguments: [String]

        static func make(tesserad: String) async throws -> Setup {
            for tool in ["/usr/bin/valgrind", "/usr/bin/callgrind_annotate", "/usr/bin/objcopy"]
            where !FileManager.default.isExecutableFile(atPath: tool) {
                throw BenchError("\(tool) is missing (apt valgrind; scripts/setup.sh installs it)")
            }
            let token = try await BenchToken.make()
            // valgrind 3.19 cannot read the DWARF 5 debug information Swift 6.3 writes ("unhandled dwarf2 abbrev
            // form code 0x25"): it runs a copy without it. The symbol table, and so the function names, stay.
            let profiled = token.directory + "/tesserad"
            let strip = try await Subprocess.run(
                "/usr/bin/objcopy", ["--strip-debug", tesserad, profiled], timeout: 300)
            guard strip.status == 0 else {
                throw BenchError("objcopy --strip-debug failed: \(strip.output.prefix(500))")
            }
            return Setup(
                hsm: token.hsm, socket: token.socket, profiled: profiled, arguments: token.daemonArguments())
        }

        /// tesserad under callgrind, its profile written to `out` (names as the symbol table has them when
        /// VALGRIND_OPTS says --demangle=no).
        func startProfiled(_ out: String) throws -> ChildProcess {
            try ChildProcess.start(
                ["/usr/bin/valgrind", "--tool=callgrind", "--callgrind-out-file=\(out)", "--quiet", profiled]
                    + arguments, output: .inherit)
        }

        /// SIGTERM, and the clean exit tesserad owes it (valgrind passes its status on).
        func stop(_ daemon: ChildProcess) async throws {
            await Subprocess.terminate(daemon, grace: 120)
            guard daemon.status == 0 else {
                throw BenchError("tesserad under callgrind did not exit cleanly (status \(daemon.status ?? -1))")
            }
        }
    }

    /// `keepIn`: a directory to copy the two profiles to (`callgrind.0.out`, the warm-up only, and `callgrind.1.out`).
    static func run(assertions: Int, tesserad: String, withPIN: Bool, keepIn: String? = nil) async throws {
        guard assertions > 0 else { throw BenchError("--callgrind needs a positive count") }
        let setup = try await Setup.make(tesserad: tesserad)
        defer { setup.hsm.removeDirectory() }
        let work = setup.hsm.directory
        let (socket, profiled, arguments) = (setup.socket, setup.profiled, setup.arguments)

        // Enrol outside valgrind, so both measured runs start from the same state.
        let plain = try ChildProcess.start([tesserad] + arguments, output: .inherit)
        let credentialId: String
        do {
            let client = try await connect(socket, process: plain)
            credentialId = try await BenchToken.enroll(on: client)["credentialId"]!.stringValue!
        } catch {
            await Subprocess.terminate(plain)
            throw error
        }
        await Subprocess.terminate(plain)

        var profiles: [Profile] = []
        for (index, count) in [0, assertions].enumerated() {
            let out = work + "/callgrind.\(index).out"
            let daemon = try setup.startProfiled(out)
            do {
                let client = try await connect(socket, process: daemon)
                _ = try await client.call("daemon.status")
                for batch in [warmup, count] where batch > 0 {
                    _ = try await LoadClient.run(
                        socket: socket, credentialId: credentialId, clients: 1, seconds: 3600,
                        pin: withPIN ? "1234" : nil, count: batch)
                }
            } catch {
                await Subprocess.terminate(daemon, grace: 60)
                throw error
            }
            try await setup.stop(daemon)
            profiles.append(try await Profile.load(out))
            if let keepIn {
                let kept = FilePaths.join(keepIn, "callgrind.\(index).out")
                try FileManager.default.createDirectory(atPath: keepIn, withIntermediateDirectories: true)
                try? FileManager.default.removeItem(atPath: kept)
                try FileManager.default.copyItem(atPath: out, toPath: kept)
            }
        }

        let n = Double(assertions)
        let signA = profiles[0].tokenSign, signB = profiles[1].tokenSign
        let total = Double(profiles[1].total - profiles[0].total) / n
        let sign = Double(signB - signA) / n
        print(
            "tessera-bench --callgrind: tesserad, \(assertions) assertions (after \(warmup) warm-up) \(withPIN ? "with" : "without") the PIN"
        )
        print(
            String(
                printf:
                    "instructions per assertion: %.0f in tesserad without the token's signing (%.0f with it; C_SignInit + C_Sign %.0f)",
                total - sign, total, sign))
        /// Per-assertion differences of run 2 over run 1, largest first.
        func perAssertion(_ costs: (Profile) -> [String: Int64]) -> [(String, Double)] {
            let before = costs(profiles[0])
            return costs(profiles[1]).compactMap { name, cost in
                let delta = Double(cost - (before[name] ?? 0)) / n
                return delta > 0 ? (name, delta) : nil
            }.sorted { $0.1 > $1.1 }
        }
        func show(_ rows: [(String, Double)], limit: Int) {
            for (name, cost) in rows.prefix(limit) {
                let shown = name.replacing(profiled, with: "tesserad")
                print(String(printf: "%12.0f  %5.1f%%  ", cost, 100 * cost / total) + shown)
            }
        }
        // An async function's frames recur through the executor, so callgrind's inclusive cost of one can exceed the
        // total (a cycle): such rows say nothing and are left out, as are thread entry points and the executor loop.
        print(
            "top functions by inclusive instructions per assertion (thread entry points, the executor loop and cycles left out):"
        )
        show(perAssertion(\.inclusive).filter { !isRoot($0.0) && $0.1 <= total }, limit: 15)
        print("top functions by their own instructions per assertion:")
        show(perAssertion(\.exclusive), limit: 15)
        print("the token's PKCS#11 calls, inclusive instructions per assertion:")
        show(perAssertion(\.inclusive).filter { $0.0.contains("softhsm") && $0.0.contains(":C_") }, limit: 12)
        print("own instructions per assertion by object:")
        show(perAssertion(\.byObject), limit: 12)
    }

    /// `--order-profile FILE`: the profile `make order-file` turns into the link order of tesserad's hot code
    /// (scripts/order-file.py): one run under callgrind through what `tessera-bench`'s table measures — start-up,
    /// an enrolment, assertions from 1 and then 16 clients, `idleSeconds` without requests (the idle timers), the
    /// shutdown. Run it with VALGRIND_OPTS=--demangle=no (the order names symbols as the linker sees them).
    static func orderProfile(to file: String, tesserad: String, idleSeconds: Double) async throws {
        let setup = try await Setup.make(tesserad: tesserad)
        defer { setup.hsm.removeDirectory() }
        let out = setup.hsm.directory + "/callgrind.order.out"
        let daemon = try setup.startProfiled(out)
        do {
            let client = try await connect(setup.socket, process: daemon)
            _ = try await client.call("daemon.status")
            let credentialId = try await BenchToken.enroll(on: client)["credentialId"]!.stringValue!
            for clients in [1, 16] {
                _ = try await LoadClient.run(
                    socket: setup.socket, credentialId: credentialId, clients: clients, seconds: 3600, pin: "1234",
                    count: 400)
            }
            try await Task.sleep(for: .seconds(idleSeconds))
        } catch {
            await Subprocess.terminate(daemon, grace: 60)
            throw error
        }
        try await setup.stop(daemon)
        try? FileManager.default.removeItem(atPath: file)
        try FileManager.default.copyItem(atPath: out, toPath: file)
        print("tessera-bench --order-profile: \(file)")
    }

    /// Entry points every thread's work sits under, which say nothing about the path.
    static func isRoot(_ name: String) -> Bool {
        ["start_thread", "clone", "clone3", "(below main)", "0x", "main", "_start", "__libc_start"]
            .contains { name.hasPrefix($0) || name.hasPrefix("???:" + $0) || name.contains(":" + $0 + " ") }
            || name.contains("NIOPosix.NIOThread") || name.contains("SelectableEventLoop.run")
            || name.contains("ThreadPosix") || name.contains("swift_job_run")
    }

    static func connect(_ socket: String, process: ChildProcess) async throws -> RPCClient {
        let deadline = ContinuousClock.now + .seconds(300)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw BenchError("tesserad exited before it was ready") }
            if let client = try? await RPCClient.connect(path: socket) { return client }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchError("tesserad was not ready within 300 s")
    }

    /// One callgrind output, as `callgrind_annotate --inclusive=yes` reports it (Swift names demangled).
    struct Profile {
        var total: Int64 = 0
        var inclusive: [String: Int64] = [:]
        /// Instructions in the function itself (not its callees).
        var exclusive: [String: Int64] = [:]
        /// Own instructions summed by ELF object (the `[object]` of each function).
        var byObject: [String: Int64] = [:]
        /// Inclusive instructions of SoftHSM2's C_SignInit and C_Sign (the token's own signing work).
        var tokenSign: Int64 = 0

        static func load(_ path: String) async throws -> Profile {
            var profile = Profile()
            for inclusive in [true, false] {
                for (name, cost) in try await annotate(path, inclusive: inclusive) {
                    if name.hasPrefix("PROGRAM TOTALS") {
                        profile.total = cost
                    } else if inclusive {
                        profile.inclusive[name, default: 0] += cost
                        if name.contains(":C_Sign ") || name.contains(":C_SignInit "), name.contains("softhsm") {
                            profile.tokenSign += cost
                        }
                    } else {
                        profile.exclusive[name, default: 0] += cost
                        let object = name.split(separator: "[").last.map { "[" + $0 } ?? "?"
                        profile.byObject[object, default: 0] += cost
                    }
                }
            }
            guard profile.total > 0 else { throw BenchError("no PROGRAM TOTALS in \(path)") }
            return profile
        }

        /// `callgrind_annotate`'s rows of `path` (inclusive or own costs), Swift names demangled: (name, cost).
        static func annotate(_ path: String, inclusive: Bool) async throws -> [(String, Int64)] {
            let annotated = try await Subprocess.run(
                "/usr/bin/callgrind_annotate",
                ["--inclusive=\(inclusive ? "yes" : "no")", "--threshold=100", path], timeout: 600)
            guard annotated.status == 0 else {
                throw BenchError("callgrind_annotate failed: \(annotated.output.prefix(500))")
            }
            var text = annotated.stdoutText
            if let demangled = try? await Subprocess.run(
                "swift-demangle", ["--simplified"], input: Array(text.utf8), timeout: 600),
                demangled.status == 0
            {
                text = demangled.stdoutText
            }
            var rows: [(String, Int64)] = []
            for line in text.split(separator: "\n") {
                // "1,234,567 (12.34%)  file:function [object]"
                let trimmed = line.drop { $0 == " " }
                guard let space = trimmed.firstIndex(of: " "),
                    let cost = Int64(trimmed[..<space].filter { $0 != "," })
                else { continue }
                var rest = trimmed[space...].drop { $0 == " " }
                if rest.hasPrefix("("), let close = rest.firstIndex(of: ")") {
                    rest = rest[rest.index(after: close)...].drop { $0 == " " }
                }
                rows.append((String(rest), cost))
            }
            return rows
        }
    }
}
