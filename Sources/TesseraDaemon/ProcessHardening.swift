internal import CSystemShims
import TesseraCore

/// What the daemon does to itself before it handles a secret.
enum ProcessHardening {
    /// PR_SET_DUMPABLE 0 (as ssh-agent does): no core dump, and processes of the same uid cannot ptrace the daemon
    /// or read its memory and /proc entries. A failure stops start-up.
    static func makeNonDumpable() throws(TesseraError) {
        let rv = tessera_set_nondumpable()
        guard rv == 0, tessera_get_dumpable() == 0 else {
            throw TesseraError(.internalError, "prctl(PR_SET_DUMPABLE, 0) failed (\(rv))")
        }
    }
}
