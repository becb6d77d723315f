import FoundationEssentials
import RPC
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DaemonPathsTests {
    @Test func systemModeIsTheSystemUnitsPaths() throws {
        let paths = try DaemonPaths.of(.system, environment: ["XDG_RUNTIME_DIR": "/run/user/1000"])
        #expect(paths.socket == "/run/tesserad/tesserad.sock")
        #expect(paths.stateDirectory == "/var/lib/tesserad")
        #expect(paths.runtimeDirectoryMode == 0o755)
    }

    @Test func userModeFollowsXDG() throws {
        let paths = try DaemonPaths.of(
            .user, environment: ["XDG_RUNTIME_DIR": "/run/user/1000/", "XDG_STATE_HOME": "/s", "HOME": "/home/a"])
        #expect(paths.socket == "/run/user/1000/tessera/tesserad.sock")
        #expect(paths.sshAgentSocket == "/run/user/1000/tessera/ssh-agent.sock")
        #expect(paths.ctapSocket == "/run/user/1000/tessera/ctap.sock")
        #expect(paths.stateDirectory == "/s/tessera")
        #expect(paths.runtimeDirectoryMode == 0o700)
        // A relative XDG_STATE_HOME is ignored (XDG Base Directory specification): the default under HOME applies.
        let relative = try DaemonPaths.of(
            .user, environment: ["XDG_RUNTIME_DIR": "/r", "XDG_STATE_HOME": "state", "HOME": "/home/a"])
        #expect(relative.stateDirectory == "/home/a/.local/state/tessera")
    }

    @Test func userModeWithoutASessionSaysWhatToSet() {
        #expect(DaemonPaths.user(environment: ["HOME": "/home/a"]) == nil)
        do {
            _ = try DaemonPaths.of(.user, environment: ["HOME": "/home/a"])
            Issue.record("no error without XDG_RUNTIME_DIR")
        } catch {
            #expect(error.code == .invalidInput)
            #expect(error.message.contains("XDG_RUNTIME_DIR"))
        }
    }

    @Test func theClientPrefersTheUsersSocketThenTheSystems() {
        let env = ["XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/a"]
        #expect(DaemonPaths.clientSocket(environment: env) { _ in false } == "/run/tesserad/tesserad.sock")
        #expect(
            DaemonPaths.clientSocket(environment: env) { $0 == "/run/user/1000/tessera/tesserad.sock" }
                == "/run/user/1000/tessera/tesserad.sock")
        #expect(
            DaemonPaths.clientSocket(environment: env.merging(["TESSERA_SOCKET": "/x.sock"]) { $1 }) { _ in true }
                == "/x.sock")
        #expect(DaemonPaths.clientSocket(environment: [:]) { _ in true } == "/run/tesserad/tesserad.sock")
    }
}

/// What the CLI and `tessera doctor` say about a socket depends on whose daemon it is (issue #36).
@Suite struct DaemonHintsTests {
    @Test func aPerUserSocketGetsThePerUserCommands() {
        let user = "/run/user/1000/tessera/tesserad.sock"
        #expect(DaemonHints.isPerUser(socket: user))
        #expect(DaemonHints.start(socket: user).hasPrefix("systemctl --user start tesserad.socket"))
        #expect(DaemonHints.log(socket: user) == "journalctl --user -u tesserad")
        #expect(!DaemonHints.permissionDenied(socket: user).contains("group"))
        let system = "/run/tesserad/tesserad.sock"
        #expect(!DaemonHints.isPerUser(socket: system))
        #expect(DaemonHints.start(socket: system).hasPrefix("sudo systemctl start tesserad.socket"))
        #expect(DaemonHints.log(socket: system) == "journalctl -u tesserad")
        #expect(RPCClient.unreachableMessage(path: user, errno: ECONNREFUSED).contains("systemctl --user start"))
    }
}
