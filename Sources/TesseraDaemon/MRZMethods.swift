import FoundationEssentials
import Logging
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The `mrzReader` section of the daemon's config file: `{command: [argv], timeoutSeconds}` (docs/CONFIG.md).
struct MRZReaderConfiguration: Sendable, Equatable {
    var command: [String]
    var timeout: Duration

    static let defaultTimeoutSeconds = 10

    init(command: [String], timeoutSeconds: Int = defaultTimeoutSeconds) {
        self.command = command
        self.timeout = .seconds(timeoutSeconds)
    }

    /// Parses the section; `defaultCommand` (the reference reader, when installed) stands in for a missing
    /// `command`. nil when there is neither. INVALID_INPUT names the bad key.
    init?(json: JSONValue?, defaultCommand: [String]?) throws(TesseraError) {
        let o = json.flatMap { $0.isNull ? nil : $0 }
        if let o, o.objectValue == nil { throw Self.error("mrzReader must be an object") }
        let fields = o?.objectValue ?? [:]
        if let bad = fields.keys.sorted().first(where: { !["command", "timeoutSeconds"].contains($0) }) {
            throw Self.error("unknown key '\(bad)' in mrzReader (known: command, timeoutSeconds)")
        }
        var command = defaultCommand
        if let c = fields["command"] {
            guard let items = c.arrayValue, !items.isEmpty, items.allSatisfy({ !($0.stringValue ?? "").isEmpty }) else {
                throw Self.error("mrzReader.command must be a non-empty array of strings")
            }
            command = items.compactMap(\.stringValue)
        }
        var timeout = Self.defaultTimeoutSeconds
        if let t = fields["timeoutSeconds"] {
            guard let n = t.intValue, (1...600).contains(n) else {
                throw Self.error("mrzReader.timeoutSeconds must be a whole number in 1…600")
            }
            timeout = n
        }
        guard let command else {
            if fields["timeoutSeconds"] != nil {
                throw Self.error("mrzReader needs a command (the reference reader is not installed)")
            }
            return nil
        }
        self.init(command: command, timeoutSeconds: timeout)
    }

    /// The reference reader when `mrzReader.command` is not set: `tessera-mrz-read` where the reference face
    /// matcher is looked for (next to the executable, `../share/tessera/`, `matcher/` of a build tree's checkout).
    static func referenceReaderCommand(executable: String = CommandLine.arguments[0]) -> [String]? {
        ReferencePrograms.command("tessera-mrz-read", executable: executable)
    }

    static func error(_ message: String) -> TesseraError {
        TesseraError(.invalidInput, "config: \(message)", details: ["field": "mrzReader"])
    }
}

/// Runs the configured MRZ reader, resident between frames (`ResidentProgram`): one request line
/// `{"image": {mediaType, data}}`, one answer line `{"lines": [...]}`, `{"found": false}` or `{"error": "..."}`.
/// The reader only reads; whether the lines are an MRZ (every check digit) is the MRZ module's to say, in the
/// kiosk. Frames and lines are never logged.
final class MRZReader: Sendable {
    let configuration: MRZReaderConfiguration
    private let program: ResidentProgram

    init(configuration: MRZReaderConfiguration, logger: Logger) {
        self.configuration = configuration
        self.program = ResidentProgram(command: configuration.command) { logger.info("\($0)") }
    }

    /// The text lines the reader found in `image`; `MRZ_NOT_FOUND` when it found none, `MRZ_READER_UNAVAILABLE`
    /// when it failed.
    func read(_ image: JSONValue) async throws(TesseraError) -> [String] {
        guard let mediaType = image["mediaType"]?.stringValue, ["image/jpeg", "image/png"].contains(mediaType),
            let data = image["data"]?.stringValue, !data.isEmpty
        else {
            throw TesseraError(
                .invalidInput, "image must be {mediaType: image/jpeg or image/png, data: base64}",
                details: ["field": "image"])
        }
        let request: JSONValue = ["image": ["mediaType": .string(mediaType), "data": .string(data)]]
        let line: [UInt8]
        do {
            line = try await program.request(request.serialized(), timeout: configuration.timeout)
        } catch {
            throw TesseraError(.mrzReaderUnavailable, "the MRZ reader failed: \(error.message)")
        }
        guard let answer = try? JSONValue.parse(line), answer.objectValue != nil else {
            throw TesseraError(.mrzReaderUnavailable, "the MRZ reader printed no JSON object")
        }
        if let message = answer["error"]?.stringValue {
            throw TesseraError(.mrzReaderUnavailable, "the MRZ reader failed: \(message)")
        }
        if answer["found"] == false { throw TesseraError(.mrzNotFound, "no MRZ in the image") }
        guard let items = answer["lines"]?.arrayValue else {
            throw TesseraError(.mrzReaderUnavailable, "the MRZ reader's answer has no lines")
        }
        let lines = items.compactMap(\.stringValue)
        guard lines.count == items.count, (2...3).contains(lines.count) else {
            throw TesseraError(.mrzNotFound, "no MRZ in the image")
        }
        return lines
    }
}

extension MethodTable {
    /// `mrz.read` (docs/API.md): the MRZ reader's lines for one camera frame (the kiosk's MRZ screen).
    func registerMRZ(_ reader: MRZReader?) {
        register("mrz.read", .enroll) { p, _ in
            guard let reader else {
                throw TesseraError(
                    .mrzReaderUnavailable, "no MRZ reader: set mrzReader.command or install the reference reader",
                    retryable: false)
            }
            let lines = try await reader.read(p.value["image"] ?? .null)
            return ["lines": .array(lines.map { .string($0) })]
        }
    }
}
