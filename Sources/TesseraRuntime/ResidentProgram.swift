import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A helper program kept running between requests (the MRZ reader; the face matcher may follow): started on the
/// first request, one request per line on its stdin, one answer per line on its stdout, stderr shared with this
/// process's (the log). Requests go one at a time. A program that dies, prints nothing in time or closes its output
/// is stopped (SIGTERM, SIGKILL 1 s later) and started again by the next request; after `idleTimeout` without a
/// request it is stopped.
///
/// Started by `SpawnedProcess` (close-on-exec pipes for stdin and stdout, our ends non-blocking so a program that
/// stops reading cannot block a writer past the deadline; empty signal mask, SIGPIPE at its default); a write to a
/// program that died is EPIPE on the writing thread, never a SIGPIPE for the process.
public actor ResidentProgram {
    /// The program and its arguments (no shell).
    public let command: [String]
    private let idleTimeout: Duration
    private let log: @Sendable (String) -> Void
    private var child: Child?
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var lastUse = ContinuousClock.now
    private var idleWatch: Task<Void, Never>?
    /// How many times the program was started (tests and the log).
    public private(set) var starts = 0

    struct Child: Sendable {
        var pid: pid_t
        /// Our ends: the program's stdin (write) and stdout (read).
        var input: Int32
        var output: Int32
        /// Bytes read past the last answer's newline.
        var pending: [UInt8] = []
    }

    /// `log` gets one line per start and stop (never a request or an answer).
    public init(command: [String], idleTimeout: Duration = .seconds(120), log: @escaping @Sendable (String) -> Void) {
        self.command = command
        self.idleTimeout = idleTimeout
        self.log = log
    }

    /// Whether the program runs now.
    public var isRunning: Bool { child != nil }

    /// Sends `line` (one line: no newline in it) and returns the program's next line of output (without its
    /// newline). Starts the program when it does not run. Throws `INTERNAL` when it cannot be started, when it
    /// closes its output or dies, or when no answer comes within `timeout` (the program is stopped then).
    public func request(_ line: [UInt8], timeout: Duration) async throws(TesseraError) -> [UInt8] {
        guard !line.contains(UInt8(ascii: "\n")) else {
            throw TesseraError(.invalidInput, "a request to a resident program is one line")
        }
        await acquire()
        defer { release() }
        lastUse = .now
        if child == nil {
            child = try Self.spawn(command)
            starts += 1
            log("started \(command[0]) (pid \(child!.pid))")
            watchIdle()
        }
        let current = child!
        let deadline = ContinuousClock.now + timeout
        let result = await DedicatedThread.run(name: "tessera.resident") {
            Self.exchange(current, line + [UInt8(ascii: "\n")], deadline: deadline)
        }
        lastUse = .now
        switch result {
        case .success(let (answer, rest)):
            child?.pending = rest
            return answer
        case .failure(let error):
            await stopChild(reason: error.message)
            throw error
        }
    }

    /// Stops the program if it runs (the next request starts it again).
    public func stop() async {
        idleWatch?.cancel()
        idleWatch = nil
        await stopChild(reason: "stopped")
    }

    // MARK: one request at a time

    private func acquire() async {
        if busy {
            await withCheckedContinuation { waiters.append($0) }  // handed over by release()
        } else {
            busy = true
        }
    }

    private func release() {
        if waiters.isEmpty { busy = false } else { waiters.removeFirst().resume() }
    }

    private func watchIdle() {
        idleWatch?.cancel()
        let every = min(idleTimeout, .seconds(5))
        idleWatch = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: every)
                guard let self, await self.stopIfIdle() else { continue }
                return
            }
        }
    }

    /// Stops the program once `idleTimeout` passed since the last request; true when it no longer runs.
    private func stopIfIdle() async -> Bool {
        guard child != nil else { return true }
        guard !busy, ContinuousClock.now - lastUse >= idleTimeout else { return false }
        await stopChild(reason: "idle for \(idleTimeout)")
        return true
    }

    private func stopChild(reason: String) async {
        guard let c = child else { return }
        child = nil
        log("stopping \(command[0]) (pid \(c.pid)): \(reason)")
        await DedicatedThread.run(name: "tessera.resident") { Self.terminate(c) }
    }

    // MARK: blocking parts (on a dedicated thread)

    static func spawn(_ argv: [String]) throws(TesseraError) -> Child {
        let process = try SpawnedProcess.start(argv, output: .pipe, errors: .inherit)
        return Child(pid: process.pid, input: process.input, output: process.output)
    }

    /// Writes `request`, then reads up to the next newline, both before `deadline`: (answer, bytes after it).
    static func exchange(_ c: Child, _ request: [UInt8], deadline: ContinuousClock.Instant) -> Result<
        ([UInt8], [UInt8]), TesseraError
    > {
        // A dead reader is EPIPE here, never a SIGPIPE for the process.
        SpawnedProcess.withPipeSignalBlocked { exchangeBlocking(c, request, deadline: deadline) }
    }

    private static func exchangeBlocking(_ c: Child, _ request: [UInt8], deadline: ContinuousClock.Instant) -> Result<
        ([UInt8], [UInt8]), TesseraError
    > {
        var written = 0
        while written < request.count {
            guard wait(c.input, for: Int16(POLLOUT), until: deadline) else {
                return .failure(failure("no answer in time (it does not read its input)"))
            }
            let n = request[written...].withUnsafeBytes { write(c.input, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                return .failure(failure("it stopped reading its input (\(String(cString: strerror(errno))))"))
            }
            written += n
        }
        var buffer = c.pending
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                return .success((Array(buffer[..<newline]), Array(buffer[(newline + 1)...])))
            }
            guard buffer.count <= 16 << 20 else { return .failure(failure("an answer longer than 16 MiB")) }
            guard wait(c.output, for: Int16(POLLIN), until: deadline) else {
                return .failure(failure("no answer in time"))
            }
            let n = chunk.withUnsafeMutableBytes { read(c.output, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                return .failure(failure("cannot read its output (\(String(cString: strerror(errno))))"))
            }
            if n == 0 { return .failure(failure("it closed its output (exited or crashed)")) }
            buffer += chunk[..<n]
        }
    }

    /// Polls `fd` for `events` until `deadline`: true when ready (or hung up: the read or write tells).
    private static func wait(_ fd: Int32, for events: Int16, until deadline: ContinuousClock.Instant) -> Bool {
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return false }
            let ms = Int32(
                min(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            var p = pollfd(fd: fd, events: events, revents: 0)
            let r = poll(&p, 1, ms)
            if r > 0 { return true }
            if r < 0 && errno != EINTR { return true }
        }
    }

    /// Closes our ends, SIGTERM, SIGKILL after 1 s, and reaps it.
    static func terminate(_ c: Child) {
        close(c.input)
        close(c.output)
        _ = SpawnedProcess.terminate(c.pid, grace: 1)
    }

    private static func failure(_ message: String) -> TesseraError {
        TesseraError(.internalError, message)
    }
}
