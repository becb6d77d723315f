import FoundationEssentials
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The harness's `Subprocess.run`: an in-process PN532 once missed libnfc's 300 ms timeout while programs blocked
/// both cooperative threads.
@Suite("Subprocess.run (test harness)")
struct SubprocessTests {
    @Test("waiting for programs leaves the cooperative threads free")
    func waitingDoesNotBlockThePool() async throws {
        let programs = ProcessInfo.processInfo.activeProcessorCount + 1  // more than the pool has threads
        // The programs outlive any plausible stall of the pool by other suites running in parallel (CI once saw
        // 12 s): if waiting for them held cooperative threads, the ticker could only finish after they exit.
        let first = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<programs {
                group.addTask {
                    _ = try await Subprocess.run("sleep", ["60"])
                    return "program"
                }
            }
            group.addTask {
                for _ in 0..<5 { try await Task.sleep(for: .milliseconds(20)) }
                return "ticker"
            }
            let first = try await group.next()
            group.cancelAll()  // terminates the programs (SIGTERM)
            try await group.waitForAll()
            return first
        }
        #expect(first == "ticker")
    }

    @Test("cancelling the task terminates the program with SIGTERM (not blocked in the child)")
    func cancellation() async throws {
        let task = Task { try await Subprocess.run("sleep", ["30"]) }
        try await Task.sleep(for: .milliseconds(200))
        task.cancel()
        // SIGKILL (9) would mean SIGTERM was ignored until the grace period ran out.
        #expect(try await task.value.status == SIGTERM)
    }

    @Test("input, stdout and stderr go through files")
    func output() async throws {
        let echo = try await Subprocess.run("/bin/sh", ["-c", "cat; echo err >&2"], input: Array("in".utf8))
        #expect(echo.status == 0 && echo.stdoutText == "in" && echo.stderrText == "err\n")
    }
}
