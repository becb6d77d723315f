import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A program that runs beyond one call (a test fixture's daemon), started like every program (`SpawnedProcess`:
/// posix_spawn, close-on-exec pipes, empty signal mask), in place of Foundation's `Process`. Its standard input
/// is at its end from the start; its output goes where `output` says. The status is kept once it is reaped, so
/// `isRunning`, `status` and `stop` may be called from any thread, in any order.
public final class ChildProcess: Sendable {
    /// Where the program's standard output and error go.
    public enum Output: Sendable {
        /// `/dev/null`.
        case discard
        /// This process's own.
        case inherit
        /// Appended to the file at this path (created 0644 when missing).
        case file(String)
    }

    public let pid: Int32
    private let exit = Locked<Int32?>(nil)

    private init(pid: Int32) { self.pid = pid }

    /// Starts `argv[0]` (a path) with the rest as arguments; `environment` merged over this process's. Throws
    /// `INVALID_INPUT` when it cannot be started.
    public static func start(
        _ argv: [String], environment: [String: String] = [:], directory: String? = nil, output: Output
    ) throws(TesseraError) -> ChildProcess {
        let stream: SpawnedProcess.Stream =
            switch output {
            case .discard: .discard
            case .inherit: .inherit
            case .file(let path): .file(path)
            }
        let spawned = try SpawnedProcess.start(
            argv, environment: environment, directory: directory, output: stream, errors: stream)
        for fd in [spawned.input, spawned.output, spawned.errors] where fd >= 0 { close(fd) }
        return ChildProcess(pid: spawned.pid)
    }

    /// The exit status (the signal number when a signal ended it) once it has ended, else nil.
    public var status: Int32? {
        exit.withLock { status in
            if status == nil { status = SpawnedProcess.reap(pid) }
            return status
        }
    }

    public var isRunning: Bool { status == nil }

    /// Sends SIGTERM without waiting.
    public func terminate() {
        exit.withLock { status in
            if status == nil { kill(pid, SIGTERM) }
        }
    }

    /// SIGTERM, SIGKILL when it still runs after `grace`, then at most 1 s more; its status, nil when it has not
    /// ended by then. Blocks the calling thread: call it on a thread of your own.
    @discardableResult
    public func stop(grace: Duration) -> Int32? {
        if let status { return status }
        let seconds = Double(grace.components.seconds) + Double(grace.components.attoseconds) / 1e18
        return SpawnedProcess.terminate(pid, grace: seconds) { self.status }
    }
}
