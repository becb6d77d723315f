import Foundation
import TesseraCore

/// Delivers one-time codes to people: a configured program (SMS/email gateway) or a drop directory (tests, labs).
public enum OTPNotifier: Sendable, Equatable {
    /// Runs argv with the message as JSON on stdin; exit status 0 within `timeout` means delivered.
    case command([String])
    /// Writes each message as `DIR/<enrollmentId>-<stepKey>-<n>.json` (0600, atomically).
    case directory(String)

    static let timeout: TimeInterval = 10

    init(json: JSONValue, baseDirectory: String) throws(TesseraError) {
        if let argv = json["command"]?.arrayValue {
            let args = argv.compactMap(\.stringValue)
            guard !args.isEmpty, args.count == argv.count else {
                throw EnrollmentConfiguration.error("notifier.command must be a non-empty array of strings")
            }
            self = .command(args)
        } else if let dir = json["directory"]?.stringValue, !dir.isEmpty {
            self = .directory(dir.hasPrefix("/") ? dir : baseDirectory + "/" + dir)
        } else {
            throw EnrollmentConfiguration.error("notifier must be {\"command\": [argv…]} or {\"directory\": DIR}")
        }
    }

    /// Delivers `message`; OTP_DELIVERY_FAILED (retryable) when it cannot.
    func deliver(_ message: JSONValue, name: String) async throws(TesseraError) {
        switch self {
        case .directory(let dir): try Self.drop(message, directory: dir, name: name)
        case .command(let argv): try await Self.run(argv, input: message.serialized())
        }
    }

    private static func drop(_ message: JSONValue, directory: String, name: String) throws(TesseraError) {
        let fm = FileManager.default
        let final = directory + "/" + name + ".json"
        let temp = directory + "/." + name + ".tmp"
        do {
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
            guard fm.createFile(atPath: temp, contents: Data(message.serialized()), attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteUnknown)
            }
            if fm.fileExists(atPath: final) { try fm.removeItem(atPath: final) }
            try fm.moveItem(atPath: temp, toPath: final)
        } catch {
            throw TesseraError(.otpDeliveryFailed, "cannot write the code to \(directory): \(error.localizedDescription)")
        }
    }

    private static func run(_ argv: [String], input: [UInt8]) async throws(TesseraError) {
        // Process waits block: the program runs on its own thread, never on the cooperative pool.
        let outcome: Result<Int32, TesseraError> = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: runBlocking(argv, input: input)) }.start()
        }
        let status = try outcome.get()
        guard status == 0 else {
            throw TesseraError(.otpDeliveryFailed, "the notifier \(argv[0]) exited with status \(status)")
        }
    }

    private static func runBlocking(_ argv: [String], input: [UInt8]) -> Result<Int32, TesseraError> {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: argv[0])
        process.arguments = Array(argv.dropFirst())
        let stdin = Pipe()
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch {
            return .failure(TesseraError(.otpDeliveryFailed, "cannot run the notifier \(argv[0]): \(error.localizedDescription)"))
        }
        stdin.fileHandleForWriting.write(Data(input))
        try? stdin.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            return .failure(TesseraError(.otpDeliveryFailed, "the notifier \(argv[0]) did not finish within \(Int(timeout)) s"))
        }
        return .success(process.terminationStatus)
    }
}
