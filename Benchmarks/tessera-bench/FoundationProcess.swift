import Foundation
import TesseraRuntime
import TesseraTestSupport

extension Subprocess {
    /// Stops a daemon the benchmarks started with Foundation's `Process`: SIGTERM, SIGKILL when it still runs after
    /// `grace`, then at most 1 s more. The benchmarks have not moved onto `ChildProcess` yet (issue #39: the request
    /// path work changes them at the same time); TesseraTestSupport itself is Foundation-free.
    static func terminate(_ process: Process, grace: TimeInterval = 5) async {
        let box = RunningProcess(process: process)
        await DedicatedThread.run(name: "tessera.bench.terminate") {
            let process = box.process
            guard process.isRunning else { return }
            process.terminate()
            if !waitForExit(process, grace) {
                kill(process.processIdentifier, SIGKILL)
                _ = waitForExit(process, 1)
            }
        }
    }

    private static func waitForExit(_ process: Process, _ seconds: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning {
            if Date() >= deadline { return false }
            usleep(2_000)
        }
        return true
    }
}

/// A `Process` handed to the thread that waits for it (its `isRunning` and `terminate` are safe from any thread).
private struct RunningProcess: @unchecked Sendable {
    let process: Process
}
