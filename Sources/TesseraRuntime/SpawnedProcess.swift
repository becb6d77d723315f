internal import CSystemShims
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The one way Tessera starts a program (`ProgramRunner`, `ResidentProgram`): posix_spawn with the program's
/// standard streams on pipes created close-on-exec (`tessera_pipe_cloexec`: no end leaks into a program spawned at
/// the same moment elsewhere in the process, which would keep "end of file" from coming), every other descriptor
/// closed in the child, an empty signal mask and SIGPIPE at its default (a spawned child inherits the spawning
/// thread's mask, so a SIGTERM would not reach it). Our ends are non-blocking. Blocking calls: use a thread of
/// its own (a start itself waits up to 62 ms while the program's file is busy, ETXTBSY).
struct SpawnedProcess {
    /// Where the program's standard output or error goes.
    enum Stream {
        /// A pipe whose read end we keep.
        case pipe
        /// `/dev/null`.
        case discard
        /// This process's own (the log).
        case inherit
        /// Appended to the file at this path (created 0644 when missing).
        case file(String)
    }

    let pid: pid_t
    /// Our ends (-1 when not a pipe, or once closed): the program's stdin (write), stdout and stderr (read).
    var input: Int32
    var output: Int32
    var errors: Int32

    /// Starts `argv[0]` (a path) with the rest as arguments; `environment` merged over this process's, `directory`
    /// its working directory. Throws `INVALID_INPUT` when it cannot be started.
    static func start(
        _ argv: [String], environment: [String: String] = [:], directory: String? = nil, output: Stream,
        errors: Stream
    ) throws(TesseraError) -> SpawnedProcess {
        guard let program = argv.first, !program.isEmpty else { throw TesseraError.invalidInput("empty command") }
        var ours: [Int32] = []
        var theirs: [Int32] = []
        defer { for fd in theirs { close(fd) } }
        func pipe(_ parentReads: Bool) throws(TesseraError) -> (ours: Int32, theirs: Int32) {
            var fds: [Int32] = [-1, -1]
            let result = tessera_pipe_cloexec(&fds)
            guard result == 0 else {
                for fd in ours { close(fd) }
                throw TesseraError(.internalError, "cannot create a pipe: \(String(cString: strerror(-result)))")
            }
            let pair = parentReads ? (fds[0], fds[1]) : (fds[1], fds[0])
            ours.append(pair.0)
            theirs.append(pair.1)
            return pair
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let stdin = try pipe(false)
        posix_spawn_file_actions_adddup2(&actions, stdin.theirs, STDIN_FILENO)  // dup2 clears close-on-exec
        var kept: [Int32] = []
        for (stream, target) in [(output, STDOUT_FILENO), (errors, STDERR_FILENO)] {
            switch stream {
            case .pipe:
                let p = try pipe(true)
                posix_spawn_file_actions_adddup2(&actions, p.theirs, target)
                kept.append(p.ours)
            case .discard:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
                kept.append(-1)
            case .inherit:
                kept.append(-1)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
                kept.append(-1)
            }
        }
        let actionsError = withUnsafeMutablePointer(to: &actions) { pointer in
            if let directory { return tessera_spawn_actions_closefrom_chdir(pointer, 3, directory) }
            return tessera_spawn_actions_closefrom_chdir(pointer, 3, nil)
        }
        guard actionsError == 0 else {
            for fd in ours { close(fd) }
            throw TesseraError(.internalError, "cannot prepare \(program): \(String(cString: strerror(actionsError)))")
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t(), defaults = sigset_t()
        sigemptyset(&empty)
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { _, new in new }
        let envp = merged.map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        // ETXTBSY: the program file is still open for writing somewhere — most often a copy of the writer's
        // descriptor held for a moment by a child forked elsewhere in this process, between its fork and its
        // exec. That passes within milliseconds, so the start is made again (at most 6 tries, 62 ms of waits).
        var error = ETXTBSY
        var wait = 2
        while true {
            error = withCStrings(argv) { cArgv in
                withCStrings(envp) { cEnvp in posix_spawn(&pid, program, &actions, &attributes, cArgv, cEnvp) }
            }
            guard error == ETXTBSY, wait <= 32 else { break }
            var pause = timespec(tv_sec: 0, tv_nsec: wait * 1_000_000)
            nanosleep(&pause, nil)
            wait *= 2
        }
        guard error == 0 else {
            for fd in ours { close(fd) }
            throw TesseraError(.invalidInput, "cannot run \(program): \(String(cString: strerror(error)))")
        }
        for fd in ours { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return SpawnedProcess(pid: pid, input: stdin.ours, output: kept[0], errors: kept[1])
    }

    /// `body` with `strings` as a NULL-terminated array of C strings.
    private static func withCStrings<T>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> T) -> T {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for p in pointers { free(p) } }
        return body(pointers)
    }

    /// `body` with SIGPIPE blocked on the calling thread: a write to a pipe whose reader is gone is EPIPE there,
    /// never a signal for the process; the pending signal is taken before the mask is restored.
    static func withPipeSignalBlocked<T>(_ body: () -> T) -> T {
        var pipeSignal = sigset_t(), savedMask = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &savedMask)
        defer {
            var none = timespec(tv_sec: 0, tv_nsec: 0)
            while sigtimedwait(&pipeSignal, nil, &none) == SIGPIPE {}
            pthread_sigmask(SIG_SETMASK, &savedMask, nil)
        }
        return body()
    }

    /// The status of `pid` when it has ended (the signal number when a signal ended it), else nil.
    static func reap(_ pid: pid_t) -> Int32? {
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    /// SIGTERM, SIGKILL when `pid` still runs after `grace`, then at most 1 s more; its status, nil when it has
    /// not ended by then (it is reaped later on a thread of its own). `reap` is `reap(pid)` unless the caller
    /// keeps the status it reaped (`ChildProcess`).
    static func terminate(_ pid: pid_t, grace: Double, reap: () -> Int32?) -> Int32? {
        kill(pid, SIGTERM)
        if let status = awaitExit(grace, reap) { return status }
        kill(pid, SIGKILL)
        if let status = awaitExit(1, reap) { return status }
        DedicatedThread.detach(name: "tessera.program.reap") { _ = waitpid(pid, nil, 0) }
        return nil
    }

    static func terminate(_ pid: pid_t, grace: Double) -> Int32? { terminate(pid, grace: grace) { reap(pid) } }

    private static func awaitExit(_ seconds: Double, _ reap: () -> Int32?) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if let status = reap() { return status }
            if Date() >= deadline { return nil }
            usleep(2_000)
        }
    }
}
