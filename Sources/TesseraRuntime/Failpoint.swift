#if canImport(Glibc)
    import Glibc
#endif

/// Crash and pause points for durability and race tests. `TESSERA_FAILPOINTS` lists comma-separated entries:
/// `NAME` kills the process with SIGKILL at that point — exactly what `kill -9` at that instant would do;
/// `NAME=pause:DIR` (tests only, honoured by `reach`) creates `DIR/NAME.reached` there and waits, without blocking
/// a thread, until `DIR/NAME.continue` exists. Unset in production; the variable is read once.
public enum Failpoint {
    /// What an armed point does.
    public enum Action: Sendable, Equatable {
        case kill
        case pause(directory: String)
    }

    private static let armed: [String: Action] = {
        guard let raw = getenv("TESSERA_FAILPOINTS") else { return [:] }
        return parse(String(cString: raw))
    }()

    /// The armed points of a `TESSERA_FAILPOINTS` value; entries that are neither form are ignored.
    public static func parse(_ value: String) -> [String: Action] {
        var out: [String: Action] = [:]
        for entry in value.split(separator: ",") {
            let parts = entry.split(separator: "=", maxSplits: 1)
            let name = String(parts[0])
            guard parts.count == 2 else {
                out[name] = .kill
                continue
            }
            let action = parts[1]
            if action.hasPrefix("pause:"), action.count > 6 {
                out[name] = .pause(directory: String(action.dropFirst(6)))
            }
        }
        return out
    }

    /// Dies here when `name` is armed to kill.
    public static func hit(_ name: String) {
        guard armed[name] == .kill else { return }
        kill(getpid(), SIGKILL)
    }

    /// Dies here when `name` is armed to kill; waits here when it is armed to pause (until the task is cancelled
    /// or the test creates `DIR/NAME.continue`).
    public static func reach(_ name: String) async {
        switch armed[name] {
        case nil:
            return
        case .kill?:
            kill(getpid(), SIGKILL)
        case .pause(let directory)?:
            let fd = open(directory + "/" + name + ".reached", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd) }
            while access(directory + "/" + name + ".continue", F_OK) != 0 {
                do { try await Task.sleep(for: .milliseconds(10)) } catch { return }
            }
        }
    }
}
