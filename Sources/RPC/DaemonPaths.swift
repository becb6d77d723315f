import TesseraCore

/// Where tesserad keeps its sockets and state unless told otherwise: one default per mode, shared by the daemon
/// and the CLI so that they always agree (docs/INSTALL.md).
///
/// - system mode (`tesserad`, the system units): sockets in `/run/tesserad`, state in `/var/lib/tesserad`;
/// - per-user mode (`tesserad --user`, the user units): sockets in `$XDG_RUNTIME_DIR/tessera`, state in
///   `$XDG_STATE_HOME/tessera` (`~/.local/state/tessera` when `XDG_STATE_HOME` is unset).
public struct DaemonPaths: Sendable, Equatable {
    /// The two ways to run tesserad.
    public enum Mode: String, Sendable {
        case system, user
    }

    public let mode: Mode
    /// The directory of the sockets; the daemon may create it (and only it) when it is missing.
    public let runtimeDirectory: String
    /// The database, the daemon secret and the embedded token.
    public let stateDirectory: String
    /// The mode of `runtimeDirectory` when the daemon creates it.
    public var runtimeDirectoryMode: UInt16 { mode == .system ? 0o755 : 0o700 }

    /// The JSON-RPC socket.
    public var socket: String { runtimeDirectory + "/tesserad.sock" }
    /// The SSH agent socket (`SSH_AUTH_SOCK`).
    public var sshAgentSocket: String { runtimeDirectory + "/ssh-agent.sock" }
    /// The CTAP authenticator socket.
    public var ctapSocket: String { runtimeDirectory + "/ctap.sock" }

    /// The system daemon's paths (the system units use the same).
    public static let system = DaemonPaths(
        mode: .system, runtimeDirectory: "/run/tesserad", stateDirectory: "/var/lib/tesserad")

    /// The per-user daemon's paths from the session's environment, or nil without `XDG_RUNTIME_DIR` (no login
    /// session) or without a home for the state.
    public static func user(environment: [String: String]) -> DaemonPaths? {
        guard let runtime = absolute(environment["XDG_RUNTIME_DIR"]) else { return nil }
        let state: String
        if let xdgState = absolute(environment["XDG_STATE_HOME"]) {
            state = xdgState + "/tessera"
        } else if let home = absolute(environment["HOME"]) {
            state = home + "/.local/state/tessera"
        } else {
            return nil
        }
        return DaemonPaths(mode: .user, runtimeDirectory: runtime + "/tessera", stateDirectory: state)
    }

    /// The paths of `mode`; per-user mode without a session's environment is an error that says what to set.
    public static func of(_ mode: Mode, environment: [String: String]) throws(TesseraError) -> DaemonPaths {
        switch mode {
        case .system:
            return .system
        case .user:
            guard let paths = user(environment: environment) else {
                throw TesseraError(
                    .invalidInput,
                    "per-user mode needs XDG_RUNTIME_DIR (set by a login session; systemd --user has it) and HOME or XDG_STATE_HOME; set them, or give --socket and --state-dir"
                )
            }
            return paths
        }
    }

    /// The socket a client uses when none is given: `$TESSERA_SOCKET`, else the user's daemon's socket when it
    /// exists, else the system daemon's.
    public static func clientSocket(environment: [String: String], exists: (String) -> Bool) -> String {
        if let explicit = environment["TESSERA_SOCKET"], !explicit.isEmpty { return explicit }
        if let user = user(environment: environment), exists(user.socket) { return user.socket }
        return system.socket
    }

    private static func absolute(_ path: String?) -> String? {
        guard var path, path.hasPrefix("/") else { return nil }
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }
}
