#if canImport(Glibc)
import Glibc
#endif

/// Crash points for durability tests: when `TESSERA_FAILPOINTS` (comma-separated names) names a point, the
/// process kills itself with SIGKILL there — exactly what `kill -9` at that instant would do. Unset in
/// production; the variable is read once.
public enum Failpoint {
    private static let armed: Set<String> = {
        guard let raw = getenv("TESSERA_FAILPOINTS") else { return [] }
        return Set(String(cString: raw).split(separator: ",").map { String($0) })
    }()

    /// Dies here when `name` is armed.
    public static func hit(_ name: String) {
        guard armed.contains(name) else { return }
        kill(getpid(), SIGKILL)
    }
}
