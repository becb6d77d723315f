import ArgumentParser
import CLISupport
import FoundationEssentials
import NFC
import PCSC
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check this host's set-up for Tessera and say how to fix what is wrong.",
        discussion: """
            Checks, in the order a user would debug: tesserad's socket (exists, and its group and mode let you in), the daemon (answers daemon.status: version, uptime), the tokens it sees, the PKCS#11 modules and tokens p11-kit lists, pcscd (reachable at $PCSCLITE_CSOCK_NAME, else /run/pcscd/pcscd.comm), its readers and the installed reader drivers, libnfc devices, your access to hidraw, USB serial and uhid device nodes, and whether SSH_AUTH_SOCK is tesserad's SSH agent.

            Prints one line per check (ok, INFO, WARN, FAIL) with a fix under each WARN and FAIL line; --json prints {ok, checks: [{name, status, detail, fix}]} for tools.

            EXIT STATUS
              0  nothing blocks use (warnings may remain)
              1  at least one check failed: tesserad unreachable, no token, pcscd unreachable...
              64 usage error

            EXAMPLES
              tessera doctor
              tessera --socket /run/user/1000/tessera/tesserad.sock doctor --json
            """)
    @OptionGroup var globals: GlobalOptions

    func run() async throws {
        // libnfc's scan logs to stderr (e.g. "Unable to find USB busses") unless told otherwise; the report says it.
        if ProcessInfo.processInfo.environment["LIBNFC_LOG_LEVEL"] == nil { setenv("LIBNFC_LOG_LEVEL", "0", 1) }
        let checks = Doctor.checks(await DoctorProbes.facts(globals))
        if globals.json {
            print(String(decoding: Doctor.json(checks).serialized(), as: UTF8.self))
        } else {
            print(Doctor.render(checks))
        }
        let status = Doctor.exitStatus(checks)
        if status != 0 { throw ExitCode(status) }
    }
}

/// The probes behind `tessera doctor`: they look at this host and the daemon and judge nothing.
enum DoctorProbes {
    static func facts(_ globals: GlobalOptions) async -> DoctorFacts {
        let env = ProcessInfo.processInfo.environment
        let caller = self.caller()
        let socketPath = globals.socketPath
        let source =
            globals.socket != nil ? "--socket" : env["TESSERA_SOCKET"] != nil ? "$TESSERA_SOCKET" : "the default"
        let daemon = await daemonStatus(socketPath)
        var isTessera = false
        if let sock = env["SSH_AUTH_SOCK"], case .found(let s) = daemon, let agent = s.sshAgentSocket {
            isTessera = sameFile(sock, agent)
        }
        let pcscdSocket = env["PCSCLITE_CSOCK_NAME"] ?? "/run/pcscd/pcscd.comm"
        return DoctorFacts(
            caller: caller, daemonSocketPath: socketPath, daemonSocketSource: source,
            daemonSocket: node(socketPath), daemon: daemon, pcscdSocket: pcscdSocket,
            pcscdFromEnvironment: env["PCSCLITE_CSOCK_NAME"] != nil, pcscReaders: await pcscReaders(),
            pcscDrivers: pcscDrivers(), p11Modules: await p11Modules(), nfcDevices: await nfcDevices(),
            deviceNodes: deviceNodes(), sshAuthSock: env["SSH_AUTH_SOCK"], sshAuthSockIsTessera: isTessera)
    }

    /// uid, user name and groups (from /proc/self/status, names from the group database through /etc/group).
    static func caller() -> DoctorFacts.Caller {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        var gids: Set<UInt32> = [getgid()]
        for line in status.split(separator: "\n") where line.hasPrefix("Groups:") {
            for g in line.dropFirst("Groups:".count).split(whereSeparator: { $0 == " " || $0 == "\t" }) {
                if let gid = UInt32(g) { gids.insert(gid) }
            }
        }
        let names = groupNames()
        return DoctorFacts.Caller(
            uid: getuid(), name: ProcessInfo.processInfo.userName,
            groups: Dictionary(uniqueKeysWithValues: gids.map { ($0, names[$0] ?? String($0)) }))
    }

    static func groupNames() -> [UInt32: String] {
        let text = (try? String(contentsOfFile: "/etc/group", encoding: .utf8)) ?? ""
        var out: [UInt32: String] = [:]
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            if fields.count >= 3, let gid = UInt32(fields[2]) { out[gid] = String(fields[0]) }
        }
        return out
    }

    /// A file's owner, group, mode and whether the caller may read and write it.
    static func node(_ path: String) -> DoctorFacts.Node {
        if access(path, F_OK) != 0 {
            return errno == EACCES ? .hidden : .missing
        }
        var st = stat()
        guard lstat(path, &st) == 0, let attrs = try? FileManager.default.attributesOfItem(atPath: path) else {
            return .hidden
        }
        let isSocket = st.st_mode & S_IFMT == S_IFSOCK
        let accessible = access(path, R_OK | W_OK) == 0
        return .present(
            DoctorFacts.Attributes(
                isSocket: isSocket,
                owner: attrs[.ownerAccountName] as? String ?? String(st.st_uid),
                group: attrs[.groupOwnerAccountName] as? String ?? String(st.st_gid), groupID: st.st_gid,
                mode: UInt32(st.st_mode) & 0o777,
                accessible: accessible,
                stale: isSocket && accessible && connectRefused(path)))
    }

    /// Connecting to the Unix socket at `path` is refused: nothing listens on it.
    static func connectRefused(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return rc != 0 && errno == ECONNREFUSED
    }

    static func sameFile(_ a: String, _ b: String) -> Bool {
        var x = stat()
        var y = stat()
        guard lstat(a, &x) == 0, lstat(b, &y) == 0 else { return false }
        return x.st_dev == y.st_dev && x.st_ino == y.st_ino
    }

    static func daemonStatus(_ path: String) async -> DoctorFacts.Probe<DoctorFacts.DaemonStatus> {
        do throws(TesseraError) {
            let client = try await RPCClient.connect(path: path)
            // A daemon that accepts but never answers: closing the connection fails the call, so doctor goes on.
            let watchdog = Task {
                try await Task.sleep(for: .seconds(15))
                await client.close()
            }
            defer {
                watchdog.cancel()
                Task { await client.close() }
            }
            let r = try await client.call("daemon.status", [:])
            let tokens = (r["tokens"]?.arrayValue ?? []).map { t in
                "\(t["label"]?.stringValue ?? "?") (\(t["id"]?.stringValue ?? "?"))"
            }
            return .found(
                DoctorFacts.DaemonStatus(
                    version: r["version"]?.stringValue ?? "?", uptimeSeconds: r["uptimeSeconds"]?.intValue ?? 0,
                    tokens: tokens, readers: (r["readers"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue },
                    sshAgentSocket: r["sshAgentSocket"]?.stringValue))
        } catch {
            return .failed("\(error.code.rawValue): \(error.message)")
        }
    }

    static func pcscReaders() async -> DoctorFacts.Probe<[String]> {
        do throws(TesseraError) {
            return .found(try await PCSCContext().listReaders().map { r in r.name + (r.cardPresent ? " (card)" : "") })
        } catch {
            return .failed(error.message)
        }
    }

    /// The pcsc-lite drivers installed: USB bundles and serial drivers.
    static func pcscDrivers() -> [String] {
        let fm = FileManager.default
        let root = "/usr/lib/pcsc/drivers"
        let bundles = ((try? fm.contentsOfDirectory(atPath: root)) ?? []).filter { $0.hasSuffix(".bundle") }
        let serial = (try? fm.contentsOfDirectory(atPath: root + "/serial")) ?? []
        return (bundles + serial).sorted()
    }

    static func p11Modules() async -> DoctorFacts.Probe<[DoctorFacts.P11Module]> {
        do throws(TesseraError) {
            // Looked up in PATH by env(1), as TesseraTestSupport's Subprocess does; 127: not found.
            let run = try await ProgramRunner.capture(
                ["/usr/bin/env", "p11-kit", "list-modules"], timeout: .seconds(20))
            if run.status == 127 { return .failed("p11-kit is not installed") }
            guard run.status == 0 else {
                return .failed("p11-kit list-modules failed: " + String(decoding: run.stderr, as: UTF8.self))
            }
            return .found(Doctor.parseP11KitModules(String(decoding: run.stdout, as: UTF8.self)))
        } catch {
            return .failed(error.message)
        }
    }

    static func nfcDevices() async -> DoctorFacts.Probe<[String]> {
        do throws(TesseraError) {
            let context = try NFCContext.shared()
            return .found(await context.listDevices())
        } catch {
            return .failed(error.message)
        }
    }

    /// hidraw (FIDO keys, uhid authenticators), USB serial (PN532 boards) and /dev/uhid.
    static func deviceNodes() -> [DoctorFacts.DeviceNode] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: "/dev")) ?? []).filter { n in
            n.hasPrefix("hidraw") || n.hasPrefix("ttyUSB") || n.hasPrefix("ttyACM") || n == "uhid"
        }
        return names.sorted().compactMap { n in
            guard case .present(let a) = node("/dev/" + n) else { return nil }
            return DoctorFacts.DeviceNode(path: "/dev/" + n, attributes: a)
        }
    }
}
