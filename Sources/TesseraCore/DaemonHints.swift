/// What to tell a user about the tesserad behind a socket path: a per-user daemon's (`tesserad --user`, its sockets
/// in `$XDG_RUNTIME_DIR/tessera`, a 0700 directory of its user) or the system daemon's (docs/INSTALL.md).
public enum DaemonHints {
    /// The socket is in a per-user daemon's directory (`…/tessera`; the system daemon's is `/run/tesserad`).
    public static func isPerUser(socket path: String) -> Bool {
        guard let slash = path.lastIndex(of: "/") else { return false }
        let directory = path[..<slash]
        return directory.hasSuffix("/tessera") && directory != "/run/tesserad"
    }

    /// How to start the daemon that serves `socket`.
    public static func start(socket path: String) -> String {
        isPerUser(socket: path)
            ? "systemctl --user start tesserad.socket, or tesserad --user"
            : "sudo systemctl start tesserad.socket, or tesserad --socket \(path) --state-dir DIR"
    }

    /// Where that daemon logs.
    public static func log(socket path: String) -> String {
        isPerUser(socket: path) ? "journalctl --user -u tesserad" : "journalctl -u tesserad"
    }

    /// Why `socket` refuses the caller (permission denied) and what helps.
    public static func permissionDenied(socket path: String) -> String {
        isPerUser(socket: path)
            ? "it is another user's per-user daemon (its directory is that user's alone): run your own (systemctl --user start tesserad.socket) or use the system daemon's socket (--socket /run/tesserad/tesserad.sock)"
            : "your user may not open it; ask to join the socket's group (ls -l \(path))"
    }
}
