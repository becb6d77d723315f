internal import CSystemShims
import Foundation

/// systemd integration without libsystemd: socket activation (LISTEN_FDS) and sd_notify.
enum Systemd {
    /// The first socket passed by systemd, when LISTEN_PID names this process.
    static func listenDescriptor() -> Int32? {
        let env = ProcessInfo.processInfo.environment
        guard let pid = env["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
              let count = env["LISTEN_FDS"].flatMap(Int.init), count >= 1 else { return nil }
        return 3  // SD_LISTEN_FDS_START
    }

    /// Sends a state string (e.g. "READY=1", "STOPPING=1") to the service manager, if any.
    static func notify(_ state: String) {
        _ = tessera_sd_notify(state)
    }
}
