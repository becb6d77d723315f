import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The one way Tessera runs a program to completion (the daemon's configured helper programs, the test support's
/// openssl/softhsm2-util/…): on a thread of its own (`DedicatedThread`), never on the cooperative pool, with a
/// timeout that cannot hang.
///
/// Standard input and output go through pipes, never files: what a program is given or answers (a PIN, a face image)
/// never touches a file system. The pipes are created close-on-exec, so no end leaks into a program spawned
/// concurrently elsewhere in the process (which would keep "end of file" from coming); the runner's thread writes the
/// input and reads both outputs without blocking, so neither a program that does not read its input nor one that
/// writes much before reading blocks the other side. Started by `SpawnedProcess` (empty signal mask, SIGPIPE at
/// its default), so the SIGTERM of a timeout reaches it.
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
    /// this process's; `directory` is its working directory. Standard output and error are each kept up to
    /// `outputLimit` bytes (the rest is read and dropped). Throws `INVALID_INPUT` when it cannot be started.
    public static func capture(
        _ argv: [String], input: [UInt8] = [], environment: [String: String] = [:], directory: String? = nil,
        timeout: Duration, killGrace: Duration = .seconds(1), keepOutput: Bool = true,
        outputLimit: Int = 64 << 20
    ) async throws(TesseraError) -> Completion {
        guard let program = argv.first else { throw TesseraError.invalidInput("empty command") }
        let request = Request(
            program: program, arguments: Array(argv.dropFirst()), input: input,
            environment: environment, directory: directory, timeout: seconds(timeout),
            killGrace: seconds(killGrace), keepOutput: keepOutput, outputLimit: outputLimit)
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

    private struct Request: Sendable {
        var program: String
        var arguments: [String]
        var input: [UInt8]
        var environment: [String: String]
        var directory: String?
        var timeout: Double
        var killGrace: Double
        var keepOutput: Bool
        var outputLimit: Int
    }

    private static func runBlocking(_ r: Request, cancelled: () -> Bool) -> Result<Completion, TesseraError> {
        SpawnedProcess.withPipeSignalBlocked { runSpawned(r, cancelled: cancelled) }
    }

    private static func runSpawned(_ r: Request, cancelled: () -> Bool) -> Result<Completion, TesseraError> {
        let process: SpawnedProcess
        do throws(TesseraError) {
            process = try SpawnedProcess.start(
                [r.program] + r.arguments, environment: r.environment, directory: r.directory,
                output: r.keepOutput ? .pipe : .discard, errors: r.keepOutput ? .pipe : .discard)
        } catch {
            return .failure(error)
        }
        let pid = process.pid
        var pipes = OpenPipes(input: process.input, output: process.output, errors: process.errors)
        defer { pipes.closeAll() }
        if r.input.isEmpty { pipes.closeInput() }
        var transfer = Transfer(input: r.input, limit: r.outputLimit)
        let deadline = Date().addingTimeInterval(r.timeout)
        var status: Int32?
        var completion = Completion(status: nil, timedOut: false, cancelled: false, stdout: [], stderr: [])
        while true {
            if let exited = SpawnedProcess.reap(pid) {
                status = exited
                break
            }
            if Date() >= deadline || cancelled() {
                completion.cancelled = cancelled()
                completion.timedOut = !completion.cancelled
                status = SpawnedProcess.terminate(pid, grace: r.killGrace)
                break
            }
            let wait: Int32 = pipes.anyOpen ? 50 : 2
            transfer.step(&pipes, waitMilliseconds: wait)
        }
        // What the program wrote before it ended; a grandchild holding the pipes open is not waited for.
        transfer.drain(&pipes)
        completion.status = status
        completion.stdout = transfer.stdout
        completion.stderr = transfer.stderr
        return .success(completion)
    }

    /// Our ends of the program's pipes (input write end, output and error read ends, non-blocking; -1 once closed).
    private struct OpenPipes {
        var input: Int32, output: Int32, errors: Int32

        var anyOpen: Bool { input >= 0 || output >= 0 || errors >= 0 }

        mutating func closeInput() { Self.close(&input) }
        mutating func closeOutput() { Self.close(&output) }
        mutating func closeErrors() { Self.close(&errors) }

        mutating func closeAll() {
            closeInput(); closeOutput(); closeErrors()
        }

        private static func close(_ fd: inout Int32) {
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
    }

    /// The input still to write and the output read so far (each kept up to `limit` bytes, the rest read and
    /// dropped so the program never blocks on a full pipe).
    private struct Transfer {
        let input: [UInt8]
        let limit: Int
        var written = 0
        var stdout: [UInt8] = []
        var stderr: [UInt8] = []

        init(input: [UInt8], limit: Int) { self.input = input; self.limit = limit }

        /// Waits up to `waitMilliseconds` for any pipe to be ready, then moves what it can without blocking.
        mutating func step(_ pipes: inout OpenPipes, waitMilliseconds: Int32) {
            var fds: [pollfd] = []
            if pipes.input >= 0 { fds.append(pollfd(fd: pipes.input, events: Int16(POLLOUT), revents: 0)) }
            if pipes.output >= 0 { fds.append(pollfd(fd: pipes.output, events: Int16(POLLIN), revents: 0)) }
            if pipes.errors >= 0 { fds.append(pollfd(fd: pipes.errors, events: Int16(POLLIN), revents: 0)) }
            guard !fds.isEmpty else {
                usleep(UInt32(waitMilliseconds) * 1000)
                return
            }
            guard poll(&fds, nfds_t(fds.count), waitMilliseconds) > 0 else { return }
            let limit = self.limit
            for p in fds where p.revents != 0 {
                if p.fd == pipes.input {
                    writeInput(&pipes)
                } else if p.fd == pipes.output {
                    if !Self.read(p.fd, into: &stdout, limit: limit) { pipes.closeOutput() }
                } else if p.fd == pipes.errors {
                    if !Self.read(p.fd, into: &stderr, limit: limit) { pipes.closeErrors() }
                }
            }
        }

        /// Reads what the ended program left in its pipes (at most 1 MiB each: a grandchild holding them open and
        /// writing on is not followed).
        mutating func drain(_ pipes: inout OpenPipes) {
            pipes.closeInput()
            let limit = self.limit
            if pipes.output >= 0 { _ = Self.read(pipes.output, into: &stdout, limit: limit) }
            if pipes.errors >= 0 { _ = Self.read(pipes.errors, into: &stderr, limit: limit) }
        }

        private mutating func writeInput(_ pipes: inout OpenPipes) {
            let fd = pipes.input
            while written < input.count {
                let offset = written
                let n = input.withUnsafeBytes { bytes in
                    Glibc.write(fd, bytes.baseAddress! + offset, min(bytes.count - offset, 1 << 16))
                }
                if n > 0 {
                    written += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else if n < 0 && errno == EAGAIN {
                    return
                } else {
                    break  // EPIPE: the program closed its input without reading all of it
                }
            }
            pipes.closeInput()
        }

        /// Reads until the pipe would block or 1 MiB has come (true: a program that never stops writing does not
        /// keep the runner from its deadline) or the pipe ends (false).
        private static func read(_ fd: Int32, into out: inout [UInt8], limit: Int) -> Bool {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            for _ in 0..<16 {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
                if n > 0 {
                    out.append(contentsOf: buffer[0..<min(n, max(0, limit - out.count))])
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return n < 0 && errno == EAGAIN
                }
            }
            return true
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
