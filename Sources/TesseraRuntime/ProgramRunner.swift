import Foundation
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The one way Tessera runs a program to completion (the daemon's configured helper programs, the test support's
/// openssl/softhsm2-util/…): on a thread of its own (`DedicatedThread`), never on the cooperative pool, with a
/// timeout that cannot hang.
///
/// Standard input and output go through unlinked temporary files, never pipes: a pipe's end leaked into a program
/// spawned concurrently elsewhere in the process (a long-lived daemon) would keep "end of file" from ever coming,
/// and a program that does not read its input would block the writer of a full pipe. The program starts with an
/// empty signal mask (a spawned child inherits the spawning thread's mask), so the SIGTERM of a timeout reaches it.
public enum ProgramRunner {
    public enum Outcome: Sendable, Equatable {
        case exited(Int32)
        case timedOut
    }

    /// The end of a `capture` run.
    public struct Completion: Sendable {
        /// The exit status (the signal number when a signal ended it); nil when it had not ended 1 s after SIGKILL.
        public var status: Int32?
        /// Stopped because the timeout ran out, or because the calling task was cancelled.
        public var timedOut: Bool
        public var cancelled: Bool
        public var stdout: [UInt8]
        public var stderr: [UInt8]
    }

    /// Starts `argv[0]` with the rest as arguments, `input` on stdin and its output discarded; kills it after
    /// `timeout` (SIGTERM, SIGKILL 1 s later). Throws `INVALID_INPUT` when it cannot be started.
    public static func run(_ argv: [String], input: [UInt8], timeout: Duration) async throws(TesseraError) -> Outcome {
        let completion = try await capture(argv, input: input, timeout: timeout, keepOutput: false)
        if completion.timedOut || completion.cancelled { return .timedOut }
        return .exited(completion.status ?? SIGKILL)
    }

    /// Runs `argv[0]` (a path) with the rest as arguments to completion, `timeout` or the task's cancellation
    /// (then SIGTERM, SIGKILL after `killGrace`), and returns its status and output. `environment` is merged over
    /// this process's; `directory` is its working directory. Throws `INVALID_INPUT` when it cannot be started.
    public static func capture(
        _ argv: [String], input: [UInt8] = [], environment: [String: String] = [:], directory: String? = nil,
        timeout: Duration, killGrace: Duration = .seconds(1), keepOutput: Bool = true
    ) async throws(TesseraError) -> Completion {
        guard let program = argv.first else { throw TesseraError.invalidInput("empty command") }
        let request = Request(
            program: program, arguments: Array(argv.dropFirst()), input: input,
            environment: environment, directory: directory, timeout: seconds(timeout),
            killGrace: seconds(killGrace), keepOutput: keepOutput)
        let cancellation = Locked(false)
        let result = await withTaskCancellationHandler {
            await DedicatedThread.run(name: "tessera.program") { () -> Result<Completion, TesseraError> in
                runBlocking(request, cancelled: { cancellation.withLock { $0 } })
            }
        } onCancel: {
            cancellation.withLock { $0 = true }
        }
        return try result.get()
    }

    /// `process.run()` with an empty signal mask on the calling thread meanwhile, for programs that outlive the
    /// call (test fixtures' daemons). Call it on a thread of your own, not the cooperative pool.
    public static func spawn(_ process: Process) throws {
        var empty = sigset_t()
        var saved = sigset_t()
        sigemptyset(&empty)
        pthread_sigmask(SIG_SETMASK, &empty, &saved)
        defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
        try process.run()
    }

    /// Stops `process`: SIGTERM, SIGKILL when it is still running after `grace`, then waits at most 1 s more.
    /// Blocks the calling thread: call it on a thread of your own.
    public static func stop(_ process: Process, grace: Duration) {
        guard process.isRunning else { return }
        process.terminate()
        if !waitForExit(process, seconds(grace)) {
            kill(process.processIdentifier, SIGKILL)
            // Foundation may see the exit late (or never) while a grandchild keeps an inherited descriptor: bounded.
            _ = waitForExit(process, 1)
        }
    }

    private struct Request: Sendable {
        var program: String
        var arguments: [String]
        var input: [UInt8]
        var environment: [String: String]
        var directory: String?
        var timeout: Double
        var killGrace: Double
        var keepOutput: Bool
    }

    private static func runBlocking(_ r: Request, cancelled: () -> Bool) -> Result<Completion, TesseraError> {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: r.program)
        process.arguments = r.arguments
        if !r.environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(r.environment) { _, new in new }
        }
        if let directory = r.directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let stdin: FileHandle
        var stdout: FileHandle?
        var stderr: FileHandle?
        do throws(TesseraError) {
            stdin = try anonymousFile(contents: r.input)
            if r.keepOutput {
                stdout = try anonymousFile(contents: [])
                stderr = try anonymousFile(contents: [])
            }
        } catch {
            return .failure(error)
        }
        defer { for handle in [stdin, stdout, stderr] { try? handle?.close() } }
        process.standardInput = stdin
        process.standardOutput = stdout ?? FileHandle.nullDevice
        process.standardError = stderr ?? FileHandle.nullDevice
        do { try spawn(process) } catch {
            return .failure(TesseraError(.invalidInput, "cannot run \(r.program): \(error.localizedDescription)"))
        }
        let finished = waitForExit(process, r.timeout, cancelled: cancelled)
        var completion = Completion(status: nil, timedOut: false, cancelled: false, stdout: [], stderr: [])
        if !finished {
            completion.cancelled = cancelled()
            completion.timedOut = !completion.cancelled
            stop(process, grace: .milliseconds(Int64(r.killGrace * 1000)))
        }
        if !process.isRunning { completion.status = process.terminationStatus }
        completion.stdout = stdout.map(readAll) ?? []
        completion.stderr = stderr.map(readAll) ?? []
        return .success(completion)
    }

    /// Polls until `process` has exited (true), `seconds` pass or `cancelled` says so (false).
    private static func waitForExit(_ process: Process, _ seconds: Double, cancelled: () -> Bool = { false }) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning {
            if Date() >= deadline || cancelled() { return false }
            usleep(2_000)
        }
        return true
    }

    /// A temporary file already unlinked (nothing to clean up), holding `contents`, positioned at its start.
    private static func anonymousFile(contents: [UInt8]) throws(TesseraError) -> FileHandle {
        var template = Array((FileManager.default.temporaryDirectory.path + "/tessera-run.XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else {
            throw TesseraError(.internalError, "cannot create a temporary file: \(String(cString: strerror(errno)))")
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        unlink(template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: contents)
            try handle.seek(toOffset: 0)
        } catch {
            throw TesseraError(.internalError, "cannot write a temporary file: \(error.localizedDescription)")
        }
        return handle
    }

    private static func readAll(_ handle: FileHandle) -> [UInt8] {
        guard (try? handle.seek(toOffset: 0)) != nil, let data = try? handle.readToEnd() else { return [] }
        return [UInt8](data)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
