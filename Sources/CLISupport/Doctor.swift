import TesseraCore

/// The outcome of one `tessera doctor` check: what was found and, when it is not right, what to do.
public struct DoctorCheck: Sendable, Equatable {
    /// `fail` blocks use (the exit status is non-zero); `warn` limits it; `info` is only reported.
    public enum Status: String, Sendable, Equatable {
        case ok, info, warn, fail
    }

    public var name: String
    public var status: Status
    public var detail: String
    public var fix: String?

    public init(_ name: String, _ status: Status, _ detail: String, fix: String? = nil) {
        self.name = name
        self.status = status
        self.detail = detail
        self.fix = fix
    }
}

/// What the probes of `tessera doctor` found on this host; `Doctor.checks` turns it into checks.
public struct DoctorFacts: Sendable {
    /// A probe's answer, or why it had none.
    public enum Probe<Value: Sendable>: Sendable {
        case found(Value)
        case failed(String)
    }

    /// The user running `tessera doctor`.
    public struct Caller: Sendable {
        public var uid: UInt32
        public var name: String
        /// Every group the process has (primary and supplementary), gid → name.
        public var groups: [UInt32: String]

        public init(uid: UInt32, name: String, groups: [UInt32: String]) {
            self.uid = uid
            self.name = name
            self.groups = groups
        }
    }

    /// A socket (or device node) on the file system and whether the caller may open it for writing.
    public enum Node: Sendable, Equatable {
        case missing
        /// A directory on the way cannot be searched by the caller.
        case hidden
        case present(Attributes)
    }

    /// Owner, group, mode and the caller's access to a file.
    public struct Attributes: Sendable, Equatable {
        public var isSocket: Bool
        public var owner: String
        public var group: String
        public var groupID: UInt32
        /// Permission bits (0o777).
        public var mode: UInt32
        /// The caller may open it for reading and writing (`access(2)`, directories on the way included).
        public var accessible: Bool
        /// A socket nothing listens on (connecting is refused): left behind by a daemon that is gone.
        public var stale: Bool

        public init(
            isSocket: Bool, owner: String, group: String, groupID: UInt32, mode: UInt32, accessible: Bool,
            stale: Bool = false
        ) {
            self.isSocket = isSocket
            self.owner = owner
            self.group = group
            self.groupID = groupID
            self.mode = mode
            self.accessible = accessible
            self.stale = stale
        }
    }

    /// What `daemon.status` answered.
    public struct DaemonStatus: Sendable {
        public var version: String
        public var uptimeSeconds: Int
        /// "label (id)" of each token.
        public var tokens: [String]
        public var readers: [String]
        /// The SSH agent socket tesserad serves, when it serves one.
        public var sshAgentSocket: String?

        public init(
            version: String, uptimeSeconds: Int, tokens: [String], readers: [String], sshAgentSocket: String?
        ) {
            self.version = version
            self.uptimeSeconds = uptimeSeconds
            self.tokens = tokens
            self.readers = readers
            self.sshAgentSocket = sshAgentSocket
        }
    }

    /// A p11-kit module and the tokens it shows.
    public struct P11Module: Sendable, Equatable {
        public var name: String
        public var path: String?
        public var tokens: [String]

        public init(name: String, path: String?, tokens: [String]) {
            self.name = name
            self.path = path
            self.tokens = tokens
        }
    }

    /// A device node readers and authenticators use (hidraw, USB serial, uhid).
    public struct DeviceNode: Sendable, Equatable {
        public var path: String
        public var attributes: Attributes

        public init(path: String, attributes: Attributes) {
            self.path = path
            self.attributes = attributes
        }
    }

    public var caller: Caller
    public var daemonSocketPath: String
    /// Where the path came from: "--socket", "$TESSERA_SOCKET" or "the default".
    public var daemonSocketSource: String
    public var daemonSocket: Node
    public var daemon: Probe<DaemonStatus>
    public var pcscdSocket: String
    /// The pcscd socket came from `PCSCLITE_CSOCK_NAME`.
    public var pcscdFromEnvironment: Bool
    /// Reader names as this process's PC/SC client sees them.
    public var pcscReaders: Probe<[String]>
    /// Installed pcsc-lite drivers (bundle or library names).
    public var pcscDrivers: [String]
    public var p11Modules: Probe<[P11Module]>
    public var nfcDevices: Probe<[String]>
    public var deviceNodes: [DeviceNode]
    public var sshAuthSock: String?
    /// `SSH_AUTH_SOCK` is the same file as tesserad's agent socket.
    public var sshAuthSockIsTessera: Bool

    public init(
        caller: Caller, daemonSocketPath: String, daemonSocketSource: String, daemonSocket: Node,
        daemon: Probe<DaemonStatus>, pcscdSocket: String, pcscdFromEnvironment: Bool, pcscReaders: Probe<[String]>,
        pcscDrivers: [String], p11Modules: Probe<[P11Module]>, nfcDevices: Probe<[String]>,
        deviceNodes: [DeviceNode], sshAuthSock: String?, sshAuthSockIsTessera: Bool
    ) {
        self.caller = caller
        self.daemonSocketPath = daemonSocketPath
        self.daemonSocketSource = daemonSocketSource
        self.daemonSocket = daemonSocket
        self.daemon = daemon
        self.pcscdSocket = pcscdSocket
        self.pcscdFromEnvironment = pcscdFromEnvironment
        self.pcscReaders = pcscReaders
        self.pcscDrivers = pcscDrivers
        self.p11Modules = p11Modules
        self.nfcDevices = nfcDevices
        self.deviceNodes = deviceNodes
        self.sshAuthSock = sshAuthSock
        self.sshAuthSockIsTessera = sshAuthSockIsTessera
    }
}

/// `tessera doctor`'s judgement and rendering; the probes that gather `DoctorFacts` live in the CLI.
public enum Doctor {
    /// One check per line of the report, in the order a user would debug: socket, daemon, tokens, PC/SC, NFC, nodes,
    /// SSH agent.
    public static func checks(_ f: DoctorFacts) -> [DoctorCheck] {
        [
            socketCheck(f), daemonCheck(f), tokensCheck(f), p11Check(f), pcscdCheck(f), readersCheck(f), nfcCheck(f),
            nodesCheck(f), sshCheck(f),
        ]
    }

    /// 1 when a check failed (something blocks use), else 0.
    public static func exitStatus(_ checks: [DoctorCheck]) -> Int32 {
        checks.contains { $0.status == .fail } ? 1 : 0
    }

    /// `ls -l`'s form of the permission bits of a socket or device (`srw-rw----`).
    public static func modeString(_ mode: UInt32, kind: Character) -> String {
        var s = String(kind)
        for shift in [6, 3, 0] {
            let bits = (mode >> UInt32(shift)) & 7
            s += (bits & 4 != 0 ? "r" : "-") + (bits & 2 != 0 ? "w" : "-") + (bits & 1 != 0 ? "x" : "-")
        }
        return s
    }

    static func describe(_ path: String, _ a: DoctorFacts.Attributes) -> String {
        "\(path) \(modeString(a.mode, kind: a.isSocket ? "s" : "c")) \(a.owner):\(a.group)"
    }

    static func groupsText(_ caller: DoctorFacts.Caller) -> String {
        caller.groups.sorted { $0.key < $1.key }.map(\.value).joined(separator: ", ")
    }

    /// Why the caller cannot open a file with these attributes, and what would let them.
    static func accessAdvice(_ a: DoctorFacts.Attributes, _ caller: DoctorFacts.Caller) -> (String, String) {
        let groupWritable = a.mode & 0o020 != 0
        if groupWritable && a.groupID == 0 && caller.groups[0] == nil {
            return (
                "its group is root and you (\(caller.name)) are not in it",
                "give the socket a group for its users (socketGroup in tesserad's config, docs/CONFIG.md), then join it: sudo usermod -aG GROUP \(caller.name)"
            )
        }
        if groupWritable && caller.groups[a.groupID] == nil {
            return (
                "you (\(caller.name); groups \(groupsText(caller))) are not in group \(a.group)",
                "sudo usermod -aG \(a.group) \(caller.name), then log out and in again (or run `newgrp \(a.group)`)"
            )
        }
        if groupWritable {
            return (
                "you are in group \(a.group) but a directory on the way is closed to you",
                "open the directories above it to group \(a.group) (chmod g+x), or use the socket the service provides"
            )
        }
        return (
            "only \(a.owner) may open it",
            "run as \(a.owner), or give the socket a group you are in (socketGroup and socketMode in the config, docs/CONFIG.md)"
        )
    }

    static func socketCheck(_ f: DoctorFacts) -> DoctorCheck {
        let name = "daemon socket"
        let path = f.daemonSocketPath
        switch f.daemonSocket {
        case .missing:
            return DoctorCheck(
                name, .fail, "no socket at \(path) (\(f.daemonSocketSource))",
                fix:
                    "start tesserad (\(DaemonHints.start(socket: path))), or name its socket with --socket PATH or TESSERA_SOCKET"
            )
        case .hidden:
            return DoctorCheck(
                name, .fail, "a directory above \(path) is closed to you (\(f.caller.name))",
                fix: DaemonHints.isPerUser(socket: path)
                    ? "it is another user's per-user daemon: run your own (\(DaemonHints.start(socket: path))), or use the system daemon's socket (--socket /run/tesserad/tesserad.sock)"
                    : "ask for the group of tesserad's socket directory (ls -ld \(parent(path))), or use another socket"
            )
        case .present(let a) where !a.isSocket:
            return DoctorCheck(
                name, .fail, "\(path) is not a socket", fix: "give the socket's path with --socket or TESSERA_SOCKET")
        case .present(let a) where !a.accessible:
            let (why, fix) = accessAdvice(a, f.caller)
            return DoctorCheck(name, .fail, describe(path, a) + ": " + why, fix: fix)
        case .present(let a) where a.stale:
            return DoctorCheck(
                name, .fail,
                describe(path, a)
                    + ": a stale socket, nothing listens on it (connection refused): tesserad stopped and left it",
                fix: "start tesserad again (\(DaemonHints.start(socket: path))); it replaces the stale socket")
        case .present(let a):
            return DoctorCheck(name, .ok, describe(path, a) + " (\(f.daemonSocketSource))")
        }
    }

    static func daemonCheck(_ f: DoctorFacts) -> DoctorCheck {
        switch f.daemon {
        case .found(let s):
            return DoctorCheck("daemon", .ok, "tesserad \(s.version), up \(s.uptimeSeconds) s")
        case .failed(let message):
            let why = reason(message)
            let socketOK: Bool
            if case .present(let a) = f.daemonSocket, a.accessible { socketOK = true } else { socketOK = false }
            return DoctorCheck(
                "daemon", .fail, why,
                fix: socketOK
                    ? "tesserad does not answer on its socket: restart it and read its log (\(DaemonHints.log(socket: f.daemonSocketPath)))"
                    : "see the daemon socket line")
        }
    }

    static func tokensCheck(_ f: DoctorFacts) -> DoctorCheck {
        guard case .found(let s) = f.daemon else {
            return DoctorCheck("tokens", .info, "not checked: tesserad does not answer")
        }
        if s.tokens.isEmpty {
            return DoctorCheck(
                "tokens", .fail, "tesserad sees no token",
                fix:
                    "plug in a token or a PIV card (in a reader of pcscd), or give tesserad --pkcs11-module PATH (a module p11-kit lists below); tesserad's embedded SoftHSM2 token is off under --no-embedded-softhsm"
            )
        }
        return DoctorCheck("tokens", .ok, s.tokens.joined(separator: "; "))
    }

    static func p11Check(_ f: DoctorFacts) -> DoctorCheck {
        switch f.p11Modules {
        case .failed(let why):
            return DoctorCheck(
                "p11-kit", .warn, why,
                fix: "sudo apt install p11-kit (tesserad can still load a module given with --pkcs11-module)")
        case .found(let modules) where modules.isEmpty:
            return DoctorCheck(
                "p11-kit", .warn, "no PKCS#11 module registered",
                fix: "install your token's module (e.g. opensc-pkcs11, softhsm2), which registers it with p11-kit")
        case .found(let modules):
            let text = modules.map { m in
                m.name + (m.tokens.isEmpty ? " (no token)" : " (token " + m.tokens.joined(separator: ", ") + ")")
            }
            return DoctorCheck("p11-kit", .ok, text.joined(separator: "; "))
        }
    }

    static func pcscdCheck(_ f: DoctorFacts) -> DoctorCheck {
        let origin = f.pcscdFromEnvironment ? "PCSCLITE_CSOCK_NAME" : "the default"
        switch f.pcscReaders {
        case .found:
            return DoctorCheck("pcscd", .ok, "\(f.pcscdSocket) (\(origin))")
        case .failed(let message):
            let why = reason(message)
            return DoctorCheck(
                "pcscd", .fail, "cannot reach pcscd at \(f.pcscdSocket) (\(origin)): \(why)",
                fix: f.pcscdFromEnvironment
                    ? "start the private pcscd that owns \(f.pcscdSocket), or unset PCSCLITE_CSOCK_NAME to use the system's"
                    : "start pcscd: sudo systemctl start pcscd.socket (sudo apt install pcscd)")
        }
    }

    static func readersCheck(_ f: DoctorFacts) -> DoctorCheck {
        let drivers = f.pcscDrivers.isEmpty ? "none installed" : f.pcscDrivers.joined(separator: ", ")
        guard case .found(let readers) = f.pcscReaders else {
            return DoctorCheck("readers", .info, "not checked: pcscd does not answer; drivers: \(drivers)")
        }
        if readers.isEmpty {
            return DoctorCheck(
                "readers", .warn, "pcscd has no reader; drivers: \(drivers)",
                fix:
                    "plug in a reader; USB CCID readers need sudo apt install libccid; a virtual one: tessera lab emulate-passport with vsmartcard's vpcd"
            )
        }
        return DoctorCheck("readers", .ok, readers.joined(separator: "; ") + "; drivers: \(drivers)")
    }

    static func nfcCheck(_ f: DoctorFacts) -> DoctorCheck {
        switch f.nfcDevices {
        case .failed(let why):
            return DoctorCheck("libnfc", .info, why)
        case .found(let devices) where devices.isEmpty:
            return DoctorCheck(
                "libnfc", .info,
                "no libnfc device found (serial readers are found only when configured: /etc/nfc/libnfc.conf, LIBNFC_DEFAULT_DEVICE, or tesserad --nfc-device)"
            )
        case .found(let devices):
            return DoctorCheck("libnfc", .ok, devices.joined(separator: "; "))
        }
    }

    static func nodesCheck(_ f: DoctorFacts) -> DoctorCheck {
        if f.deviceNodes.isEmpty {
            return DoctorCheck("device nodes", .info, "no hidraw, USB serial or uhid node")
        }
        let closed = f.deviceNodes.filter { !$0.attributes.accessible }
        if closed.isEmpty {
            return DoctorCheck(
                "device nodes", .ok, "open to you: " + f.deviceNodes.map(\.path).joined(separator: ", "))
        }
        return DoctorCheck(
            "device nodes", .warn,
            "closed to you (\(f.caller.name)): "
                + closed.map { describe($0.path, $0.attributes) }.joined(separator: ", "),
            fix:
                "for readers and FIDO devices you use directly, install Tessera's udev rules (sudo cp udev/*.rules /etc/udev/rules.d/ && sudo udevadm trigger) or join the node's group (sudo usermod -aG GROUP \(f.caller.name))"
        )
    }

    static func sshCheck(_ f: DoctorFacts) -> DoctorCheck {
        let name = "SSH_AUTH_SOCK"
        guard case .found(let s) = f.daemon else {
            return DoctorCheck(
                name, .info, (f.sshAuthSock ?? "not set") + " (tesserad does not answer: cannot tell whose agent it is)"
            )
        }
        guard let agent = s.sshAgentSocket else {
            return DoctorCheck(
                name, .info,
                (f.sshAuthSock ?? "not set")
                    + "; tesserad serves no SSH agent (--ssh-agent-socket PATH or sshAgent.socket turn it on)")
        }
        guard let current = f.sshAuthSock else {
            return DoctorCheck(
                name, .warn, "not set; tesserad's agent is \(agent)", fix: "export SSH_AUTH_SOCK=\(agent)")
        }
        if f.sshAuthSockIsTessera {
            return DoctorCheck(name, .ok, "\(current) is tesserad's agent")
        }
        return DoctorCheck(
            name, .warn, "\(current) is another agent (ssh-agent, gpg-agent?); tesserad's is \(agent)",
            fix: "export SSH_AUTH_SOCK=\(agent)")
    }

    /// A message without the advice its producer appended after " — " (the fix line carries advice here).
    static func reason(_ message: String) -> String {
        message.split(separator: " — ", maxSplits: 1).first.map(String.init) ?? message
    }

    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The report as a table: status, check and what was found, with the fix under each line that is not ok.
    public static func render(_ checks: [DoctorCheck]) -> String {
        let width = max(checks.map(\.name.count).max() ?? 0, 5)
        var lines: [String] = []
        for c in checks {
            let status = c.status == .ok ? "ok" : c.status.rawValue.uppercased()
            lines.append(pad(status, 5) + " " + pad(c.name, width) + "  " + c.detail)
            if let fix = c.fix, c.status == .fail || c.status == .warn {
                lines.append(pad("", 5) + " " + pad("", width) + "  fix: " + fix)
            }
        }
        let failed = checks.filter { $0.status == .fail }.count
        lines.append(
            failed == 0
                ? "\nnothing blocks use"
                : "\n\(failed) problem\(failed == 1 ? "" : "s") block\(failed == 1 ? "s" : "") use (the fix lines say what to do)"
        )
        return lines.joined(separator: "\n")
    }

    /// `{ok, checks: [{name, status, detail, fix?}]}` for `--json`.
    public static func json(_ checks: [DoctorCheck]) -> JSONValue {
        .object([
            "ok": .bool(exitStatus(checks) == 0),
            "checks": .array(
                checks.map { c in
                    var o: [String: JSONValue] = [
                        "name": .string(c.name), "status": .string(c.status.rawValue), "detail": .string(c.detail),
                    ]
                    if let fix = c.fix { o["fix"] = .string(fix) }
                    return .object(o)
                }),
        ])
    }

    static func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
    }

    /// The modules and tokens in `p11-kit list-modules` output: `NAME: PATH` lines, then indented `key: value`
    /// lines, a module's tokens as `token: LABEL`.
    public static func parseP11KitModules(_ text: String) -> [DoctorFacts.P11Module] {
        var modules: [DoctorFacts.P11Module] = []
        for raw in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let indent = raw.prefix { $0 == " " || $0 == "\t" }.count
            let line = raw.drop { $0 == " " || $0 == "\t" }
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon]
            let value = line[line.index(after: colon)...].trimmingSpaces
            if indent == 0 {
                modules.append(
                    DoctorFacts.P11Module(name: String(key), path: value.isEmpty ? nil : value, tokens: []))
            } else if !modules.isEmpty, key == "token", !value.isEmpty {  // SoftHSM2's free slot has no label
                modules[modules.count - 1].tokens.append(value)
            }
        }
        return modules
    }
}

extension Substring {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
