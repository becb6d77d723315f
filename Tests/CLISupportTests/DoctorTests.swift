import CLISupport
import TesseraCore
import Testing

/// `tessera doctor`'s judgement: which facts block use, which only warn, and the fix each failing line carries.
@Suite struct DoctorTests {
    static let caller = DoctorFacts.Caller(uid: 1000, name: "alice", groups: [1000: "alice", 27: "sudo"])
    static let socket = DoctorFacts.Attributes(
        isSocket: true, owner: "tesserad", group: "tessera", groupID: 990, mode: 0o660, accessible: true)
    static let status = DoctorFacts.DaemonStatus(
        version: "0.9.0", uptimeSeconds: 12, tokens: ["Tessera Embedded (p11-1a2b3c4d5e6f7a8b)"],
        readers: ["Tessera VPCD 00 00"],
        sshAgentSocket: "/run/tesserad/ssh-agent.sock")

    /// Every probe answered as on a working host.
    static func healthy() -> DoctorFacts {
        DoctorFacts(
            caller: DoctorFacts.Caller(uid: 1000, name: "alice", groups: [1000: "alice", 990: "tessera"]),
            daemonSocketPath: "/run/tesserad/tesserad.sock", daemonSocketSource: "the default",
            daemonSocket: .present(socket), daemon: .found(status), pcscdSocket: "/run/pcscd/pcscd.comm",
            pcscdFromEnvironment: false, pcscReaders: .found(["Tessera VPCD 00 00"]),
            pcscDrivers: ["ifd-ccid.bundle", "libifdvpcd.so"],
            p11Modules: .found([.init(name: "softhsm2", path: "/usr/lib/softhsm/libsofthsm2.so", tokens: ["t"])]),
            nfcDevices: .found([]), deviceNodes: [], sshAuthSock: "/run/tesserad/ssh-agent.sock",
            sshAuthSockIsTessera: true)
    }

    func check(_ checks: [DoctorCheck], _ name: String) -> DoctorCheck? { checks.first { $0.name == name } }

    @Test func healthyHostPassesWithExitZero() {
        let checks = Doctor.checks(Self.healthy())
        #expect(Doctor.exitStatus(checks) == 0)
        #expect(checks.allSatisfy { $0.status != .fail && $0.status != .warn })
        #expect(check(checks, "daemon")?.detail == "tesserad 0.9.0, up 12 s")
        #expect(Doctor.render(checks).hasSuffix("nothing blocks use"))
        #expect(Doctor.json(checks)["ok"] == true)
    }

    @Test func missingSocketFailsWithHowToStart() {
        var f = Self.healthy()
        f.daemonSocket = .missing
        f.daemon = .failed("DAEMON_UNAVAILABLE: cannot reach tesserad")
        let checks = Doctor.checks(f)
        #expect(Doctor.exitStatus(checks) == 1)
        let socket = check(checks, "daemon socket")
        #expect(socket?.status == .fail)
        #expect(socket?.fix?.contains("systemctl start tesserad.socket") == true)
        #expect(check(checks, "daemon")?.fix == "see the daemon socket line")
        // Nothing can be said about tokens or whose agent SSH_AUTH_SOCK is without the daemon.
        #expect(check(checks, "tokens")?.status == .info)
        #expect(check(checks, "SSH_AUTH_SOCK")?.status == .info)
    }

    @Test func socketOfAGroupTheCallerIsNotInNamesTheGroup() {
        var f = Self.healthy()
        f.caller = Self.caller
        var closed = Self.socket
        closed.accessible = false
        f.daemonSocket = .present(closed)
        f.daemon = .failed("DAEMON_UNAVAILABLE: permission denied")
        let socket = check(Doctor.checks(f), "daemon socket")
        #expect(socket?.status == .fail)
        #expect(socket?.detail.contains("srw-rw---- tesserad:tessera") == true)
        #expect(socket?.detail.contains("not in group tessera") == true)
        #expect(socket?.fix?.hasPrefix("sudo usermod -aG tessera alice") == true)
    }

    @Test func ownerOnlySocketSaysSo() {
        var f = Self.healthy()
        var closed = Self.socket
        closed.accessible = false
        closed.mode = 0o600
        f.daemonSocket = .present(closed)
        let socket = check(Doctor.checks(f), "daemon socket")
        #expect(socket?.detail.hasSuffix("only tesserad may open it") == true)
    }

    @Test func rootGroupSocketAsksForASocketGroup() {
        var f = Self.healthy()
        f.caller = Self.caller
        f.daemonSocket = .present(
            .init(isSocket: true, owner: "root", group: "root", groupID: 0, mode: 0o660, accessible: false))
        let socket = check(Doctor.checks(f), "daemon socket")
        #expect(socket?.status == .fail)
        #expect(socket?.fix?.contains("socketGroup") == true)
    }

    @Test func hiddenSocketFails() {
        var f = Self.healthy()
        f.daemonSocket = .hidden
        #expect(check(Doctor.checks(f), "daemon socket")?.status == .fail)
    }

    @Test func pcscdDownFailsAndSaysToStartIt() {
        var f = Self.healthy()
        f.pcscReaders = .failed("no service")
        var checks = Doctor.checks(f)
        #expect(Doctor.exitStatus(checks) == 1)
        #expect(check(checks, "pcscd")?.fix?.contains("systemctl start pcscd.socket") == true)
        #expect(check(checks, "readers")?.status == .info)
        f.pcscdFromEnvironment = true
        f.pcscdSocket = "/tmp/lab/pcscd/pcscd.comm"
        checks = Doctor.checks(f)
        #expect(check(checks, "pcscd")?.detail.contains("(PCSCLITE_CSOCK_NAME)") == true)
        #expect(check(checks, "pcscd")?.fix?.contains("unset PCSCLITE_CSOCK_NAME") == true)
    }

    @Test func noTokenFails() {
        var f = Self.healthy()
        var s = Self.status
        s.tokens = []
        f.daemon = .found(s)
        let checks = Doctor.checks(f)
        #expect(Doctor.exitStatus(checks) == 1)
        #expect(check(checks, "tokens")?.fix?.contains("--pkcs11-module") == true)
    }

    @Test func warningsDoNotBlockUse() {
        var f = Self.healthy()
        f.pcscReaders = .found([])
        f.p11Modules = .failed("p11-kit is not installed")
        f.sshAuthSock = "/tmp/ssh-XXXX/agent.1"
        f.sshAuthSockIsTessera = false
        f.deviceNodes = [
            .init(
                path: "/dev/hidraw0",
                attributes: .init(
                    isSocket: false, owner: "root", group: "root", groupID: 0, mode: 0o600, accessible: false))
        ]
        let checks = Doctor.checks(f)
        #expect(Doctor.exitStatus(checks) == 0)
        #expect(check(checks, "readers")?.status == .warn)
        #expect(check(checks, "p11-kit")?.status == .warn)
        #expect(check(checks, "SSH_AUTH_SOCK")?.fix == "export SSH_AUTH_SOCK=/run/tesserad/ssh-agent.sock")
        #expect(check(checks, "device nodes")?.detail.contains("/dev/hidraw0 crw------- root:root") == true)
        let text = Doctor.render(checks)
        #expect(text.contains("WARN  SSH_AUTH_SOCK"))
        #expect(text.contains("fix: export SSH_AUTH_SOCK=/run/tesserad/ssh-agent.sock"))
    }

    @Test func agentlessDaemonIsOnlyInformation() {
        var f = Self.healthy()
        var s = Self.status
        s.sshAgentSocket = nil
        f.daemon = .found(s)
        f.sshAuthSock = nil
        #expect(check(Doctor.checks(f), "SSH_AUTH_SOCK")?.status == .info)
    }

    @Test func jsonCarriesEveryCheckAndItsFix() throws {
        var f = Self.healthy()
        f.pcscReaders = .failed("no service")
        let json = Doctor.json(Doctor.checks(f))
        #expect(json["ok"] == false)
        let pcscd = try #require(json["checks"]?.arrayValue?.first { $0["name"] == "pcscd" })
        #expect(pcscd["status"] == "fail")
        #expect(pcscd["fix"]?.stringValue?.isEmpty == false)
        #expect(json["checks"]?.arrayValue?.count == Doctor.checks(f).count)
    }

    @Test func modeStringIsLsForm() {
        #expect(Doctor.modeString(0o660, kind: "s") == "srw-rw----")
        #expect(Doctor.modeString(0o755, kind: "c") == "crwxr-xr-x")
    }

    /// `p11-kit list-modules` as p11-kit 0.24 prints it on Debian 12 (trimmed; a token added to softhsm2).
    @Test func parsesP11KitListModules() {
        let text = """
            p11-kit-trust: p11-kit-trust.so
                library-description: PKCS#11 Kit Trust Module
                library-version: 0.24
                token: System Trust
                    manufacturer: PKCS#11 Kit
                    model: p11-kit-trust
                    flags:
                           write-protected
                           token-initialized
            opensc-pkcs11: opensc-pkcs11.so
                library-description: OpenSC smartcard framework
            softhsm2: /usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so
                library-description: Implementation of PKCS11
                token: Tessera Embedded
                    manufacturer: SoftHSM project
                token: tessera-test
            """
        let modules = Doctor.parseP11KitModules(text)
        #expect(modules.map(\.name) == ["p11-kit-trust", "opensc-pkcs11", "softhsm2"])
        #expect(modules[0].tokens == ["System Trust"])
        #expect(modules[1].tokens.isEmpty)
        #expect(modules[2].path == "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so")
        #expect(modules[2].tokens == ["Tessera Embedded", "tessera-test"])
    }
}
