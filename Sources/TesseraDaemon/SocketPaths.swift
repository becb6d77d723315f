import FoundationEssentials
import RPC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The paths tesserad binds itself (a socket systemd passes is not among them): options first, then the config
/// file, then the mode's defaults (`DaemonPaths`).
struct SocketPaths {
    var rpc: String?
    var sshAgent: String?
    var ctap: String?

    init(_ options: DaemonOptions, _ config: ConfigFile, inherited: (rpc: Int32?, sshAgent: Int32?)) {
        let perUser = options.paths.mode == .user
        rpc = inherited.rpc == nil ? options.socketPath ?? options.paths.socket : nil
        sshAgent =
            inherited.sshAgent == nil
            ? options.sshAgentSocket ?? config.sshAgent?.socket ?? (perUser ? options.paths.sshAgentSocket : nil) : nil
        ctap = options.ctapSocket ?? config.ctap?.socket ?? (perUser ? options.paths.ctapSocket : nil)
    }

    /// Creates the mode's runtime directory when a socket goes there and it is missing; any other missing
    /// directory is an error that names it, before anything else starts.
    func prepareDirectories(_ paths: DaemonPaths) throws(TesseraError) {
        for path in [rpc, sshAgent, ctap].compactMap({ $0 }) {
            let directory = FilePaths.directory(of: path)
            var isDirectory = false
            if FileManager.default.fileExists(atPath: directory.isEmpty ? "." : directory, isDirectory: &isDirectory) {
                guard isDirectory else {
                    throw TesseraError(.invalidInput, "cannot listen on \(path): \(directory) is not a directory")
                }
                continue
            }
            guard directory == paths.runtimeDirectory else {
                throw TesseraError(
                    .invalidInput,
                    "cannot listen on \(path): the directory \(directory) does not exist. Create it (mkdir -p \(directory)) or choose a socket path in an existing directory"
                )
            }
            if mkdir(directory, mode_t(paths.runtimeDirectoryMode)) == 0 {
                _ = chmod(directory, mode_t(paths.runtimeDirectoryMode))  // past the umask
            } else if errno != EEXIST {
                let reason = String(cString: strerror(errno))
                throw TesseraError(
                    .invalidInput,
                    "cannot create the socket directory \(directory): \(reason). In system mode tesserad.socket or systemd-tmpfiles (tmpfiles.d/tessera.conf) makes it; `tesserad --user` runs a daemon of your own in $XDG_RUNTIME_DIR/tessera"
                )
            }
        }
    }
}
