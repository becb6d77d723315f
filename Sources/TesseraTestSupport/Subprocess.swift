import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// Runs helper programs (openssl, softhsm2-util, nfc-list, opensc-tool, …) for tests: a thin wrapper over
/// `TesseraRuntime.ProgramRunner` (pipes, never files; a thread of its own; a timeout that cannot hang) that looks
/// names up in PATH and returns the output.
///
/// There is deliberately no blocking variant: Swift Testing runs even synchronous `@Test` functions on the
/// cooperative pool (two threads on a two-core machine), so a test that runs a program is made `async` instead.
public enum Subprocess {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: [UInt8]
        public var stderr: [UInt8]
        public var output: String { String(decoding: stdout + stderr, as: UTF8.self) }
        public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
        public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    }

    /// Runs `executable` (a path, or a name looked up in PATH) to completion or until `timeout` (then SIGTERM, and
    /// SIGKILL 5 s later). No cooperative thread is blocked meanwhile (an in-process emulator the program talks to
    /// keeps running); cancelling the task terminates the program. `status` is the signal number when a signal
    /// ended the program.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        input: [UInt8]? = nil, directory: String? = nil,
        timeout: TimeInterval = 60
    ) async throws(TesseraError) -> Result {
        let argv = executable.contains("/") ? [executable] + arguments : ["/usr/bin/env", executable] + arguments
        let completion = try await ProgramRunner.capture(
            argv, input: input ?? [], environment: environment, directory: directory,
            timeout: .milliseconds(Int64(timeout * 1000)), killGrace: .seconds(5))
        return Result(status: completion.status ?? SIGKILL, stdout: completion.stdout, stderr: completion.stderr)
    }

    /// Stops a program started with `ChildProcess`: SIGTERM, then SIGKILL when it has not exited after `grace`.
    /// Waits on a thread of its own.
    public static func terminate(_ process: ChildProcess, grace: TimeInterval = 5) async {
        await DedicatedThread.run(name: "tessera.test.terminate") { terminateBlocking(process, grace: grace) }
    }

    /// `terminate`, blocking the calling thread: only for threads of our own (a waiter thread, `atexit`).
    static func terminateBlocking(_ process: ChildProcess, grace: TimeInterval = 5) {
        process.stop(grace: .milliseconds(Int64(grace * 1000)))
    }
}
