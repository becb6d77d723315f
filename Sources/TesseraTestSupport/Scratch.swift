import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Per-process scratch space for tests and benchmarks: `$TMPDIR/tessera-scratch-<pid>/`, removed when the process
/// exits normally. Roots left by processes that died (their pid no longer exists) are removed on first use, so a
/// crashed run's files disappear with the next one.
///
/// Fixtures put what they create here (`SoftHSMFixture`, `Subprocess`'s output files); tests that need a
/// directory of their own ask for one with `directory(_:)` instead of writing to `$TMPDIR` directly.
public enum Scratch {
    /// The root directory of this process (created on first use).
    public static let root: String = {
        let tmp = temporaryDirectory
        reapStaleRoots(in: tmp)
        let root = tmp + "/" + namePrefix + String(getpid())
        try? FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        _ = ExitCleanup.register { try? FileManager.default.removeItem(atPath: root) }
        return root
    }()

    /// `$TMPDIR` (else `/tmp`), without a trailing slash.
    public static let temporaryDirectory: String = {
        var tmp = Substring(ProcessInfo.processInfo.environment["TMPDIR"] ?? "")
        while tmp.count > 1, tmp.hasSuffix("/") { tmp = tmp.dropLast() }
        return tmp.isEmpty ? "/tmp" : String(tmp)
    }()

    /// A fresh directory `<root>/<prefix>-<uuid>`, created.
    public static func directory(_ prefix: String) -> String {
        let path = root + "/" + prefix + "-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A fresh, not yet existing path `<root>/<prefix>-<uuid><suffix>` for a single file.
    public static func file(_ prefix: String, suffix: String = "") -> String {
        root + "/" + prefix + "-" + UUID().uuidString + suffix
    }

    private static let namePrefix = "tessera-scratch-"

    private static func reapStaleRoots(in tmp: String) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: tmp) else { return }
        for entry in entries where entry.hasPrefix(namePrefix) {
            guard let owner = Int32(entry.dropFirst(namePrefix.count)), owner != getpid(),
                kill(owner, 0) != 0 && errno == ESRCH
            else { continue }
            try? FileManager.default.removeItem(atPath: tmp + "/" + entry)
        }
    }
}

/// Cleanups that run when the process exits normally (`atexit`): fixtures register what must not outlive the
/// process (a private pcscd, the scratch root) and cancel the registration once they cleaned up themselves.
/// Cleanups run in reverse order of registration.
enum ExitCleanup {
    struct Token: Sendable { fileprivate let id: Int }

    static func register(_ body: @escaping @Sendable () -> Void) -> Token {
        _ = installed
        return registry.withLock { r in
            r.next += 1
            r.entries.append((r.next, body))
            return Token(id: r.next)
        }
    }

    static func cancel(_ token: Token) {
        registry.withLock { r in r.entries.removeAll { $0.id == token.id } }
    }

    private struct Registry {
        var next = 0
        var entries: [(id: Int, body: @Sendable () -> Void)] = []
    }

    private static let registry = Locked(Registry())

    /// `atexit` is installed once, on the first registration.
    private static let installed: Bool = {
        atexit { ExitCleanup.runAll() }
        return true
    }()

    private static func runAll() {
        while let body = registry.withLock({ r in r.entries.popLast()?.body }) { body() }
    }
}
