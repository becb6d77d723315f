import Foundation
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
/// Started with posix_spawn and two pipes whose ends are close-on-exec (another program spawned meanwhile does not
/// keep them) and non-blocking (a program that stops reading cannot block a writer past the deadline); a write
/// to a program that died is EPIPE on the writing thread, never a SIGPIPE for the process. The program starts with
/// an empty signal mask and SIGPIPE at its default.
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
        guard let program = argv.first, !program.isEmpty else { throw TesseraError.invalidInput("empty command") }
        var toChild: [Int32] = [-1, -1]
        var fromChild: [Int32] = [-1, -1]
        guard pipe(&toChild) == 0 else { throw failure("cannot make a pipe") }
        guard pipe(&fromChild) == 0 else {
            close(toChild[0])
            close(toChild[1])
            throw failure("cannot make a pipe")
        }
        // Close-on-exec at once (Glibc's module has no pipe2): only the program gets its ends, as 0 and 1.
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)  // dup2 clears close-on-exec on 0 and 1
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let arguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let environment: [UnsafeMutablePointer<CChar>?] =
            ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in arguments + environment { free(p) } }
        var pid = pid_t()
        let rc = posix_spawn(&pid, program, &actions, &attributes, arguments, environment)
        close(toChild[0])
        close(fromChild[1])
        guard rc == 0 else {
            close(toChild[1])
            close(fromChild[0])
            throw TesseraError(.invalidInput, "cannot run \(program): \(String(cString: strerror(rc)))")
        }
        for fd in [toChild[1], fromChild[0]] { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return Child(pid: pid, input: toChild[1], output: fromChild[0])
    }

    /// Writes `request`, then reads up to the next newline, both before `deadline`: (answer, bytes after it).
    static func exchange(_ c: Child, _ request: [UInt8], deadline: ContinuousClock.Instant) -> Result<
        ([UInt8], [UInt8]), TesseraError
    > {
        // SIGPIPE blocked on this thread while writing: a dead reader is EPIPE here; the pending signal is taken.
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        var saved = sigset_t()
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &saved)
        defer {
            var none = timespec(tv_sec: 0, tv_nsec: 0)
            while sigtimedwait(&pipeSignal, nil, &none) == SIGPIPE {}
            pthread_sigmask(SIG_SETMASK, &saved, nil)
        }
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
        kill(c.pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<100 {
            if waitpid(c.pid, &status, WNOHANG) != 0 { return }
            usleep(10_000)
        }
        kill(c.pid, SIGKILL)
        _ = waitpid(c.pid, &status, 0)
    }

    private static func failure(_ message: String) -> TesseraError {
        TesseraError(.internalError, message)
    }
}
