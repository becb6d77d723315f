import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// A private pcscd with vsmartcard vpcd readers, for tests that need real PC/SC.
///
/// Isolation (verified on pcsc-lite 1.9.9): pcscd itself ignores `PCSCLITE_CSOCK_NAME` and always uses
/// /run/pcscd/{pcscd.comm,pcscd.pid}; the client library (libpcsclite) does honour the variable. So pcscd runs
/// as `unshare -m` (`-r -m` when not root) with a private directory bind-mounted on /run/pcscd, and this process
/// points its client library at `<dir>/pcscd.comm` through `PCSCLITE_CSOCK_NAME`. A pcscd already running on
/// the host is neither seen nor touched.
///
/// Constraints:
/// - libpcsclite reads `PCSCLITE_CSOCK_NAME` once per process, so the socket path is fixed per test process and
///   only one fixture can run at a time. `acquire` waits for the running one to be stopped; `start` fails fast.
///   Start the fixture before the first PC/SC call in the process.
/// - Nothing here blocks a cooperative thread: waits for pcscd and its clients happen on threads of their own or
///   as `Task.sleep` polls. A fixture never stopped is stopped when the process exits (its pcscd killed, its
///   directory removed).
/// - The vpcd driver keeps per-slot global state, so one pcscd serves exactly one vpcd reader line, which gives
///   two readers: "<name> 00 00" on port P and "<name> 00 01" on port P+1.
public final class PCSCDaemonFixture: Sendable {
    /// One vpcd reader slot: the PC/SC reader name and the TCP port its virtual card connects to.
    public struct Reader: Sendable, Hashable {
        public var name: String
        public var port: UInt16
    }

    /// The PC/SC name prefix of the readers ("Tessera VPCD 00 00", "Tessera VPCD 00 01").
    public static let friendlyName = "Tessera VPCD"

    /// The vpcd readers, slot 0 first.
    public let readers: [Reader]
    /// The pcscd socket this process's PC/SC client library uses.
    public let socketPath: String
    /// Environment a child process (opensc-tool, pcsc_scan, …) needs to reach this pcscd.
    public let environment: [String: String]
    /// pcscd's log (stdout and stderr, info level).
    public let logPath: String
    public let directory: String
    private let configPath: String
    private let state: Locked<DaemonState>

    private struct DaemonState {
        var process: ChildProcess?
        var released = false
        var exitCleanup: ExitCleanup.Token?
    }

    private init(readers: [Reader], socketPath: String, directory: String, configPath: String, logPath: String) {
        self.readers = readers
        self.socketPath = socketPath
        self.directory = directory
        self.configPath = configPath
        self.logPath = logPath
        self.environment = ["PCSCLITE_CSOCK_NAME": socketPath]
        self.state = Locked(DaemonState())
    }

    deinit { stop() }

    /// The port of the first reader slot (where a test's virtual card usually connects).
    public var port: UInt16 { readers[0].port }
    /// The name of the first reader slot.
    public var readerName: String { readers[0].name }

    // MARK: Starting and stopping

    /// Starts a private pcscd with vpcd readers on `vpcdPorts` (`[]`: free ports are chosen; `[P]` or `[P, P+1]`:
    /// the reader slots use P and P+1), waits until it lists the readers, and points this process's PC/SC
    /// client at it. Throws INTERNAL when another fixture of this process is still running (or still stopping:
    /// `stop` returns before pcscd has exited) or pcscd cannot start.
    public static func start(vpcdPorts: [UInt16] = []) async throws(TesseraError) -> PCSCDaemonFixture {
        guard lease.tryAcquire() else {
            throw .internalError("another PCSCDaemonFixture is running in this process; stop it first or use acquire()")
        }
        do {
            return try await launch(vpcdPorts: vpcdPorts)
        } catch {
            lease.release()
            throw error
        }
    }

    /// Like `start`, but waits (without blocking a thread) until no other fixture of this process is running.
    public static func acquire(vpcdPorts: [UInt16] = []) async throws(TesseraError) -> PCSCDaemonFixture {
        await lease.acquire()
        do {
            return try await launch(vpcdPorts: vpcdPorts)
        } catch {
            lease.release()
            throw error
        }
    }

    /// Stops pcscd, removes its directory and releases the fixture, without waiting: pcscd gets SIGTERM now, and a
    /// thread of its own waits for it to exit (SIGKILL after 5 s) before the next fixture may start (`acquire`
    /// waits for that). Idempotent; also on deinit, so it suits `defer`.
    public func stop() {
        let (process, exitCleanup, first) = state.withLock { s in
            defer { s.process = nil; s.released = true }
            return (s.process, s.exitCleanup, !s.released)
        }
        guard first else { return }
        let directory = directory
        let finish: @Sendable () -> Void = {
            try? FileManager.default.removeItem(atPath: directory)
            if let exitCleanup { ExitCleanup.cancel(exitCleanup) }
            Self.lease.release()
        }
        guard let process else { return finish() }
        process.terminate()
        DedicatedThread.detach(name: "tessera.test.pcscd-stop") {
            Subprocess.terminateBlocking(process)
            finish()
        }
    }

    /// Stops pcscd (waiting for it to exit) but keeps the fixture, so `startDaemon()` can bring the same daemon
    /// back (same socket, ports).
    public func stopDaemon() async {
        let process = state.withLock { s -> ChildProcess? in
            defer { s.process = nil }
            return s.process
        }
        guard let process else { return }
        await Subprocess.terminate(process)
        try? FileManager.default.removeItem(atPath: socketPath)
    }

    /// Starts pcscd again after `stopDaemon()` and waits until it answers.
    public func startDaemon() async throws(TesseraError) {
        try state.withLock { s throws(TesseraError) in
            guard !s.released else { throw .internalError("PCSCDaemonFixture was stopped") }
            guard s.process == nil else { return }
        }
        let process = try Self.spawn(directory: directory, configPath: configPath, logPath: logPath)
        state.withLock { $0.process = process }
        try await waitUntilReady(process: process)
    }

    /// Whether pcscd is running.
    public var isRunning: Bool { state.withLock { $0.process?.isRunning ?? false } }

    /// The process id of the private pcscd, if running.
    public var pid: Int32? { state.withLock { s in s.process.flatMap { $0.isRunning ? $0.pid : nil } } }

    /// pcscd's log so far (for failure messages).
    public func log() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Runs a PC/SC command-line client (opensc-tool, pcsc_scan, …) against this pcscd; returns exit code and output.
    /// Waits off the cooperative pool (`Subprocess.run`), so a virtual card served by this process keeps answering.
    public func runClient(_ executable: String, _ arguments: [String], timeout: TimeInterval = 20)
        async throws(TesseraError) -> (status: Int32, output: String)
    {
        let r = try await Subprocess.run(executable, arguments, environment: environment, timeout: timeout)
        return (r.status, r.output)
    }

    // MARK: Internals

    private static let lease = FixtureLease()

    private static func launch(vpcdPorts: [UInt16]) async throws(TesseraError) -> PCSCDaemonFixture {
        let socketPath = try clientSocketPath()
        let directory = FilePaths.directory(of: socketPath)
        try prepareDirectory(directory)
        let configPath = directory + "/reader.conf"
        let logPath = directory + "/pcscd.log"
        var attempts = vpcdPorts.isEmpty ? 5 : 1
        while true {
            attempts -= 1
            let base = try vpcdPorts.isEmpty ? pickFreePortPair() : validate(vpcdPorts)
            let readers = [
                Reader(name: friendlyName + " 00 00", port: base),
                Reader(name: friendlyName + " 00 01", port: base + 1),
            ]
            let config = """
                FRIENDLYNAME "\(friendlyName)"
                DEVICENAME   /dev/null:0x\(String(base, radix: 16, uppercase: true))
                LIBPATH      \(try vpcdDriverPath())
                CHANNELID    0x\(String(base, radix: 16, uppercase: true))

                """
            do {
                try config.write(toFile: configPath, atomically: true, encoding: .utf8)
            } catch {
                throw .internalError("cannot write \(configPath): \(error)")
            }
            let fixture = PCSCDaemonFixture(
                readers: readers, socketPath: socketPath, directory: directory,
                configPath: configPath, logPath: logPath)
            let state = fixture.state
            let token = ExitCleanup.register {
                // At exit: a fixture nobody stopped (or a test process ending mid-test) takes its pcscd along.
                if let process = state.withLock({ s in s.process }) {
                    Subprocess.terminateBlocking(process, grace: 2)
                }
                try? FileManager.default.removeItem(atPath: directory)
            }
            fixture.state.withLock { $0.exitCleanup = token }
            do {
                try await fixture.startDaemon()
                return fixture
            } catch {
                await fixture.stopDaemon()
                ExitCleanup.cancel(token)
                fixture.state.withLock { $0.released = true }  // the caller releases the lease
                if attempts <= 0 { throw error }
            }
        }
    }

    /// The socket path libpcsclite uses in this process: `PCSCLITE_CSOCK_NAME` if set, else a per-process one
    /// that is exported now (libpcsclite reads the variable on its first call).
    private static func clientSocketPath() throws(TesseraError) -> String {
        if let existing = ProcessInfo.processInfo.environment["PCSCLITE_CSOCK_NAME"], !existing.isEmpty {
            guard FilePaths.name(of: existing) == "pcscd.comm" else {
                throw .internalError("PCSCLITE_CSOCK_NAME must end in /pcscd.comm (pcscd always creates that name)")
            }
            return existing
        }
        let path = FilePaths.join(Scratch.temporaryDirectory, "tessera-pcscd-\(getpid())/pcscd.comm")
        setenv("PCSCLITE_CSOCK_NAME", path, 1)
        return path
    }

    private static func prepareDirectory(_ directory: String) throws(TesseraError) {
        reapStaleDaemons(besides: directory)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw .internalError("cannot create \(directory): \(error)")
        }
        for name in ["pcscd.comm", "pcscd.pid"] { try? FileManager.default.removeItem(atPath: directory + "/" + name) }
    }

    /// Stops pcscds left behind by crashed test processes (their directory names a dead pid).
    private static func reapStaleDaemons(besides current: String) {
        let tmp = Scratch.temporaryDirectory
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: tmp) else { return }
        for entry in entries where entry.hasPrefix("tessera-pcscd-") {
            let dir = FilePaths.join(tmp, entry)
            guard dir != current, let owner = Int32(entry.dropFirst("tessera-pcscd-".count)),
                kill(owner, 0) != 0 && errno == ESRCH
            else { continue }
            if let text = try? String(contentsOfFile: dir + "/pcscd.pid", encoding: .utf8),
                let pid = Int32(text.filter(\.isNumber)),
                let cmdline = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
                cmdline.contains(dir + "/reader.conf")
            {
                kill(pid, SIGTERM)
            }
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    private static func vpcdDriverPath() throws(TesseraError) -> String {
        let candidates = [
            "/usr/lib/pcsc/drivers/serial/libifdvpcd.so", "/usr/local/lib/pcsc/drivers/serial/libifdvpcd.so",
        ]
        guard let path = candidates.first(where: FileManager.default.fileExists(atPath:)) else {
            throw .internalError("vpcd driver not found (apt-get install vsmartcard-vpcd)")
        }
        return path
    }

    private static func executable(_ name: String) throws(TesseraError) -> String {
        let dirs =
            (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
            + ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        guard let path = dirs.map({ $0 + "/" + name }).first(where: FileManager.default.isExecutableFile(atPath:))
        else {
            throw .internalError("\(name) not found (apt-get install pcscd vsmartcard-vpcd util-linux)")
        }
        return path
    }

    private static func validate(_ ports: [UInt16]) throws(TesseraError) -> UInt16 {
        guard let base = ports.first, base < UInt16.max, ports.count <= 2, ports.count == 1 || ports[1] == base + 1
        else {
            throw .invalidInput("vpcd ports must be [P] or [P, P+1]: one vpcd reader line has two slots on P and P+1")
        }
        let busy = busyTCPPorts()
        if busy.contains(base) || busy.contains(base + 1) {
            throw .internalError("vpcd port \(base) or \(base + 1) is already in use")
        }
        return base
    }

    /// A port P with P and P+1 unused, from a range outside the usual ephemeral ports of other fixtures.
    private static func pickFreePortPair() throws(TesseraError) -> UInt16 {
        let busy = busyTCPPorts()
        for _ in 0..<200 {
            let base = UInt16.random(in: 20000...29998)
            if !busy.contains(base) && !busy.contains(base + 1) { return base }
        }
        throw .internalError("no free TCP port pair found for vpcd")
    }

    /// Local TCP ports in any state (from /proc/net/tcp and tcp6).
    private static func busyTCPPorts(listeningOnly: Bool = false) -> Set<UInt16> {
        var ports = Set<UInt16>()
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count > 3, let colon = fields[1].lastIndex(of: ":"),
                    let port = UInt16(fields[1][fields[1].index(after: colon)...], radix: 16)
                else { continue }
                if listeningOnly && fields[3] != "0A" { continue }
                ports.insert(port)
            }
        }
        return ports
    }

    private static func spawn(directory: String, configPath: String, logPath: String) throws(TesseraError)
        -> ChildProcess
    {
        let unshare = try executable("unshare")
        let pcscd = try executable("pcscd")
        // In the new mount namespace: our directory becomes /run/pcscd (tmpfs over /run first when the host has
        // no /run/pcscd to mount on), then pcscd runs in the foreground with our reader.conf.
        let script = """
            set -e
            if [ ! -d /run/pcscd ]; then mount -t tmpfs -o mode=0755 tessera-run /run; mkdir -p /run/pcscd; fi
            mount --bind "$1" /run/pcscd
            exec "$2" --foreground --info --config "$3"
            """
        let argv =
            [unshare] + (geteuid() == 0 ? ["-m"] : ["-r", "-m"])
            + ["/bin/sh", "-c", script, "tessera-pcscd", directory, pcscd, configPath]
        // A fresh log for each start: readiness is read from it.
        do throws(OpenFile.Failure) {
            try OpenFile.forWriting(logPath, truncate: true).close()
        } catch {
            throw .internalError("cannot open \(logPath): \(error)")
        }
        do {
            return try ChildProcess.start(argv, output: .file(logPath))
        } catch {
            throw .internalError("cannot start pcscd via unshare: \(error.message)")
        }
    }

    /// Waits until the socket exists, pcscd logged readiness, the vpcd ports listen and pcsc_scan lists the readers.
    private func waitUntilReady(process: ChildProcess, timeout: TimeInterval = 15) async throws(TesseraError) {
        let deadline = Date().addingTimeInterval(timeout)
        var stage = "socket"
        while Date() < deadline {
            if let status = process.status {
                throw .internalError("private pcscd exited (status \(status)) during startup:\n\(log())")
            }
            if FileManager.default.fileExists(atPath: socketPath) {
                stage = "readers"
                let listening = Self.busyTCPPorts(listeningOnly: true)
                if log().contains("daemon ready") && readers.allSatisfy({ listening.contains($0.port) }) {
                    stage = "client"
                    guard let scan = try? Self.executable("pcsc_scan") else { return }
                    if let (status, output) = try? await runClient(scan, ["-r"], timeout: 5), status == 0,
                        readers.allSatisfy({ output.contains($0.name) })
                    {
                        return
                    }
                }
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        await stopDaemon()
        throw .internalError("private pcscd not ready (waiting for \(stage)) after \(Int(timeout)) s:\n\(log())")
    }

}

/// The process-wide "one private pcscd at a time" lease (libpcsclite's socket path is per process).
private final class FixtureLease: Sendable {
    private struct State {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    func tryAcquire() -> Bool {
        state.withLock { s in
            if s.held { return false }
            s.held = true
            return true
        }
    }

    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { s -> Bool in
                if s.held {
                    s.waiters.append(continuation)
                    return false
                }
                s.held = true
                return true
            }
            if granted { continuation.resume() }
        }
    }

    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst()  // ownership passes on; `held` stays true
        }
        next?.resume()
    }
}
