import CLISupport
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

/// Draws `documents.progress` (or `mdoc.progress`) events: one line redrawn in place when `output` is a terminal, else a line per phase
/// or file (`linesWhenNotTerminal`) or nothing. The one progress display of the CLI: `tessera passport read` and
/// `tessera mdoc read` (stderr) and `tessera enroll-station` (stdout).
final class ProgressRenderer: Sendable {
    private struct State {
        var shown = false
        var lastKey = ""
    }

    private let output: OpenFile
    private let isTerminal: Bool
    private let prefix: String
    private let linesWhenNotTerminal: Bool
    private let state = Locked(State())

    init(output: OpenFile, prefix: String = "", linesWhenNotTerminal: Bool) {
        self.output = output
        self.isTerminal = output.isTerminal
        self.prefix = prefix
        self.linesWhenNotTerminal = linesWhenNotTerminal
    }

    /// Whether anything is drawn at all on this output.
    var active: Bool { isTerminal || linesWhenNotTerminal }

    func draw(_ event: JSONValue) {
        let (key, text) = ProgressText.describe(event, bar: isTerminal)
        let write: String? = state.withLock { s in
            defer { s.lastKey = key }
            if isTerminal {
                s.shown = true
                return "\r\u{1B}[K" + prefix + text
            }
            return linesWhenNotTerminal && key != s.lastKey ? prefix + text + "\n" : nil
        }
        if let write { output.write(write) }
    }

    /// Erases the in-place line (before other output, and at the end).
    func clear() {
        let shown = state.withLock { s in
            defer { s = State() }
            return s.shown
        }
        if shown { output.write("\r\u{1B}[K") }
    }

    /// `client.call(method, params)` with its `progress` notifications drawn meanwhile; the line is erased after.
    func call(
        _ client: RPCClient, _ method: String, _ params: JSONValue, progress: String = "documents.progress"
    ) async throws(TesseraError) -> JSONValue {
        let bar = active ? Task { await follow(client.notifications, method: progress) } : nil
        defer {
            bar?.cancel()
            clear()
        }
        return try await client.call(method, params)
    }

    /// Draws each `method` notification until the task is cancelled or the stream ends.
    func follow(_ notifications: AsyncStream<RPCNotification>, method: String = "documents.progress") async {
        for await n in notifications where n.method == method {
            if Task.isCancelled { return }
            draw(n.params)
        }
    }
}
