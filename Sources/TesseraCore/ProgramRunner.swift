import Foundation

/// Runs a configured helper program (argv, input on stdin, output discarded) on a thread of its own, never on
/// the cooperative pool, and kills it after `timeout`.
public enum ProgramRunner {
    public enum Outcome: Sendable, Equatable {
        case exited(Int32)
        case timedOut
    }

    /// Starts `argv[0]` with the rest as arguments; throws `INVALID_INPUT` when it cannot be started.
    public static func run(_ argv: [String], input: [UInt8], timeout: Duration) async throws(TesseraError) -> Outcome {
        guard let program = argv.first else { throw TesseraError.invalidInput("empty command") }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let result: Result<Outcome, TesseraError> = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: runBlocking(program, Array(argv.dropFirst()), input, seconds)) }.start()
        }
        return try result.get()
    }

    private static func runBlocking(_ program: String, _ arguments: [String], _ input: [UInt8],
                                    _ timeout: Double) -> Result<Outcome, TesseraError> {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let stdin = Pipe()
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch {
            return .failure(TesseraError(.invalidInput, "cannot run \(program): \(error.localizedDescription)"))
        }
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input))
        try? stdin.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            // Foundation sees the exit only once every descendant has closed an inherited descriptor, so a
            // grandchild (a shell's `sleep`) would keep `isRunning` true: signal the program, never wait for it.
            process.terminate()
            let grace = Date().addingTimeInterval(1)
            while process.isRunning && Date() < grace { usleep(10_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            return .success(.timedOut)
        }
        return .success(.exited(process.terminationStatus))
    }
}
