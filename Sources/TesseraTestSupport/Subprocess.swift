import Foundation
import TesseraCore

/// Runs helper programs (openssl, softhsm2-util, nfc-list, opensc-tool, …) for tests.
///
/// Output goes through temp files (under `Scratch.root`), never pipes: tests spawn long-lived daemons (pcscd)
/// concurrently, and a pipe's write end that leaks into such a daemon would make "read to end of file" wait until
/// that daemon exits. A file descriptor of a regular file that leaks the same way is harmless, and the parent closes
/// its copies right after the spawn. `run` waits on a thread of its own (which needs no descriptors either).
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
    /// SIGKILL 5 s later). The wait happens on a thread of its own, so no cooperative thread is blocked meanwhile
    /// (an in-process emulator the program talks to keeps running); cancelling the task terminates the program.
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                           input: [UInt8]? = nil, directory: String? = nil,
                           timeout: TimeInterval = 60) async throws(TesseraError) -> Result {
        let cancellation = Cancellation()
        let result = await withTaskCancellationHandler {
            await DedicatedThread.run { () -> Swift.Result<Result, TesseraError> in
                do throws(TesseraError) {
                    return .success(try runBlocking(executable, arguments, environment: environment, input: input,
                                                    directory: directory, timeout: timeout, cancellation: cancellation))
                } catch {
                    return .failure(error)
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
        return try result.get()
    }

    /// Stops a program started with `Process`: SIGTERM, then SIGKILL when it has not exited after `grace`.
    /// Waits on a thread of its own.
    public static func terminate(_ process: Process, grace: TimeInterval = 5) async {
        let box = ProcessBox(process)
        await DedicatedThread.run { terminateBlocking(box.process, grace: grace) }
    }

    /// `terminate`, blocking the calling thread: only for threads of our own (a waiter thread, `atexit`).
    static func terminateBlocking(_ process: Process, grace: TimeInterval = 5) {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(grace)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    private static func runBlocking(_ executable: String, _ arguments: [String], environment: [String: String],
                                    input: [UInt8]?, directory: String?, timeout: TimeInterval,
                                    cancellation: Cancellation?) throws(TesseraError) -> Result {
        let process = Process()
        if executable.contains("/") {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [executable] + arguments
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let base = Scratch.file("subprocess")
        let paths = [base + ".out", base + ".err", base + ".in"]
        defer { for p in paths { try? FileManager.default.removeItem(atPath: p) } }
        _ = FileManager.default.createFile(atPath: paths[0], contents: nil)
        _ = FileManager.default.createFile(atPath: paths[1], contents: nil)
        _ = FileManager.default.createFile(atPath: paths[2], contents: Data(input ?? []))
        guard let out = FileHandle(forWritingAtPath: paths[0]), let err = FileHandle(forWritingAtPath: paths[1]),
              let inp = FileHandle(forReadingAtPath: paths[2]) else {
            throw .internalError("cannot create temp files for \(executable)")
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = inp
        do {
            try spawnWithDefaultSignalMask(process)
        } catch {
            try? out.close(); try? err.close(); try? inp.close()
            throw .internalError("cannot run \(executable): \(error)")
        }
        try? out.close(); try? err.close(); try? inp.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline && !(cancellation?.isCancelled ?? false) { usleep(2_000) }
        if process.isRunning { terminateBlocking(process) }
        process.waitUntilExit()
        return Result(status: process.terminationStatus,
                      stdout: [UInt8](FileManager.default.contents(atPath: paths[0]) ?? Data()),
                      stderr: [UInt8](FileManager.default.contents(atPath: paths[1]) ?? Data()))
    }

    /// `process.run()` with nothing blocked in the child. The test runner blocks most signals (SIGTERM too) in all
    /// its threads, and a spawned child inherits the spawning thread's mask: a program started plainly would ignore
    /// the SIGTERM of a timeout or a cancellation. Call on a thread of our own: its mask is cleared only meanwhile.
    static func spawnWithDefaultSignalMask(_ process: Process) throws {
        var empty = sigset_t(), saved = sigset_t()
        sigemptyset(&empty)
        pthread_sigmask(SIG_SETMASK, &empty, &saved)
        defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
        try process.run()
    }

    private final class Cancellation: Sendable {
        private let flag = FixtureLock(false)
        var isCancelled: Bool { flag.withLock { $0 } }
        func cancel() { flag.withLock { $0 = true } }
    }

}

/// A `Process` handed to the thread that waits for it (Foundation does not declare `Process` Sendable; its
/// `isRunning`, `terminate` and `waitUntilExit` are safe from any thread).
struct ProcessBox: @unchecked Sendable {
    let process: Process
    init(_ process: Process) { self.process = process }
}

/// Blocking work (a program's run, a blocking C call, a poll loop) from async code, on a thread of its own.
public enum DedicatedThread {
    /// Runs `body` on a new thread and suspends until it returns; the caller's cooperative thread stays free.
    public static func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Swift.Result<T, E> = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                do throws(E) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
