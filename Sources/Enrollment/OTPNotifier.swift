import FoundationEssentials
import TesseraCore
import TesseraRuntime

/// Delivers one-time codes to people: a configured program (SMS/email gateway) or a drop directory (tests, labs).
public enum OTPNotifier: Sendable, Equatable {
    /// Runs argv with the message as JSON on stdin; exit status 0 within `timeout` means delivered.
    case command([String])
    /// Writes each message as `DIR/<enrollmentId>-<stepKey>-<n>.json` (0600 from its creation, atomically).
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

    /// Writes `DIR/NAME.json` atomically (`AtomicFile`) with mode 0600 from its creation.
    static func drop(_ message: JSONValue, directory: String, name: String) throws(TesseraError) {
        func failed(_ why: String) -> TesseraError {
            TesseraError(.otpDeliveryFailed, "cannot write the code to \(directory): \(why)")
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw failed(TesseraError.reason(of: error))
        }
        if case .failure(let error) = AtomicFile.write(message.serialized(), directory: directory, name: name + ".json")
        {
            throw failed(error.reason)
        }
    }

    private static func run(_ argv: [String], input: [UInt8]) async throws(TesseraError) {
        let outcome: ProgramRunner.Outcome
        do {
            outcome = try await ProgramRunner.run(argv, input: input, timeout: .milliseconds(Int64(timeout * 1000)))
        } catch {
            throw TesseraError(.otpDeliveryFailed, "cannot run the notifier \(argv[0]): \(error.message)")
        }
        switch outcome {
        case .exited(0): return
        case .exited(let status):
            throw TesseraError(.otpDeliveryFailed, "the notifier \(argv[0]) exited with status \(status)")
        case .timedOut:
            throw TesseraError(.otpDeliveryFailed, "the notifier \(argv[0]) did not finish within \(Int(timeout)) s")
        }
    }
}
