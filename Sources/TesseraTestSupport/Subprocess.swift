import Foundation
import TesseraCore

/// Runs helper programs (openssl, softhsm2-util, nfc-list, opensc-tool, …) for tests.
///
/// Output goes through temp files, never pipes: tests spawn long-lived daemons (pcscd) concurrently, and a pipe's
/// write end that leaks into such a daemon would make "read to end of file" wait until that daemon exits.
public enum Subprocess {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: [UInt8]
        public var stderr: [UInt8]
        public var output: String { String(decoding: stdout + stderr, as: UTF8.self) }
        public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
        public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    }

    /// Runs `executable` (a path, or a name looked up in PATH) to completion or until `timeout` (then SIGTERM).
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                           input: [UInt8]? = nil, directory: String? = nil,
                           timeout: TimeInterval = 60) throws(TesseraError) -> Result {
        let process = Process()
        if executable.contains("/") {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [executable] + arguments
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let base = NSTemporaryDirectory() + "tessera-subprocess-\(UUID().uuidString)"
        let paths = [base + ".out", base + ".err", base + ".in"]
        defer { for p in paths { try? FileManager.default.removeItem(atPath: p) } }
        _ = FileManager.default.createFile(atPath: paths[0], contents: nil)
        _ = FileManager.default.createFile(atPath: paths[1], contents: nil)
        _ = FileManager.default.createFile(atPath: paths[2], contents: Data(input ?? []))
        guard let out = FileHandle(forWritingAtPath: paths[0]), let err = FileHandle(forWritingAtPath: paths[1]),
              let inp = FileHandle(forReadingAtPath: paths[2]) else {
            throw .internalError("cannot create temp files for \(executable)")
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = inp
        do {
            try process.run()
        } catch {
            throw .internalError("cannot run \(executable): \(error)")
        }
        try? out.close(); try? err.close(); try? inp.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            process.terminate()
        }
        process.waitUntilExit()
        return Result(status: process.terminationStatus,
                      stdout: [UInt8](FileManager.default.contents(atPath: paths[0]) ?? Data()),
                      stderr: [UInt8](FileManager.default.contents(atPath: paths[1]) ?? Data()))
    }
}
