internal import CSystemShims
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// systemd integration without libsystemd: socket activation (LISTEN_FDS) and sd_notify.
enum Systemd {
    /// The name `tesserad-ssh-agent.socket` gives its descriptor (`FileDescriptorName=`).
    static let sshAgentName = "ssh-agent"

    /// The sockets passed by systemd, when LISTEN_PID names this process: the one named `ssh-agent` in
    /// LISTEN_FDNAMES is the SSH agent's, the first other one the JSON-RPC socket.
    static func listenDescriptors(_ env: [String: String] = ProcessInfo.processInfo.environment) -> (
        rpc: Int32?, sshAgent: Int32?
    ) {
        guard let pid = env["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
            let count = env["LISTEN_FDS"].flatMap(Int.init), count >= 1
        else { return (nil, nil) }
        let names =
            env["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) }
            ?? []
        var rpc: Int32?, agent: Int32?
        for i in 0..<count {
            let fd = Int32(3 + i)  // SD_LISTEN_FDS_START
            if i < names.count, names[i] == sshAgentName { agent = agent ?? fd } else { rpc = rpc ?? fd }
        }
        return (rpc, agent)
    }

    /// Sends a state string (e.g. "READY=1", "STOPPING=1") to the service manager, if any.
    static func notify(_ state: String) {
        _ = tessera_sd_notify(state)
    }
}
