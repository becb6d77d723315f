import Foundation
import Logging
import TesseraCore

/// An image (or a matcher's template) as the face matcher protocol carries it: `{mediaType, data}`, `data` in
/// base64 (docs/ENROLLMENT.md, "Face matching").
public struct FaceImage: Sendable, Equatable {
    /// `image/jpeg`, `image/jp2`, `image/png`, or a template type the matcher names (`application/…`).
    public var mediaType: String
    public var data: [UInt8]

    public init(mediaType: String, data: [UInt8]) {
        self.mediaType = mediaType; self.data = data
    }

    /// `{mediaType, data}` with `data` in standard base64 (padded), as the matcher protocol writes it.
    public var json: JSONValue {
        ["mediaType": .string(mediaType), "data": .string(Data(data).base64EncodedString())]
    }

    /// Parses `{mediaType, data}`; `data` in base64 or base64url, padded or not. INVALID_INPUT names `field`.
    public init(json: JSONValue, field: String) throws(TesseraError) {
        guard let media = json["mediaType"]?.stringValue, !media.isEmpty, media.utf8.count <= 128 else {
            throw TesseraError(
                .invalidInput, "\(field).mediaType must be a media type", details: ["field": .string(field)])
        }
        guard let text = json["data"]?.stringValue, let bytes = Self.decodeBase64(text), !bytes.isEmpty else {
            throw TesseraError(
                .invalidInput, "\(field).data must be non-empty base64", details: ["field": .string(field)])
        }
        self.init(mediaType: media, data: bytes)
    }

    /// Standard or URL-safe base64, with or without padding; nil on anything else.
    public static func decodeBase64(_ text: String) -> [UInt8]? {
        var s = String(text.map { $0 == "-" ? "+" : ($0 == "_" ? "/" : $0) })
        s = s.trimmingCharacters(in: CharacterSet(charactersIn: "="))
        let rem = s.utf8.count % 4
        if rem == 1 { return nil }
        if rem > 0 { s += String(repeating: "=", count: 4 - rem) }
        return Data(base64Encoded: s).map { [UInt8]($0) }
    }

    /// The media type of an image from its first bytes (JPEG, JPEG 2000 file or codestream, PNG); nil otherwise.
    public static func sniff(_ bytes: [UInt8]) -> String? {
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if bytes.starts(with: [0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20]) { return "image/jp2" }
        if bytes.starts(with: [0xFF, 0x4F, 0xFF, 0x51]) { return "image/jp2" }
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) { return "image/png" }
        return nil
    }
}

/// What the daemon asks the matcher: the reference, the live captures and, for liveness, the challenge.
public struct FaceMatchRequest: Sendable, Equatable {
    public var reference: FaceImage
    public var probes: [FaceImage]
    /// The liveness actions in the order the person was asked to perform them (e.g. turnLeft, blink).
    public var challenge: [String]?

    public init(reference: FaceImage, probes: [FaceImage], challenge: [String]? = nil) {
        self.reference = reference; self.probes = probes; self.challenge = challenge
    }

    /// `{reference, probes, challenge?}`: the matcher's stdin.
    public var json: JSONValue {
        var o: [String: JSONValue] = ["reference": reference.json, "probes": .array(probes.map(\.json))]
        if let challenge { o["challenge"] = ["actions": .array(challenge.map { .string($0) })] }
        return .object(o)
    }
}

/// The matcher's answer (its stdout).
public struct FaceMatchAnswer: Sendable, Equatable {
    public enum Decision: String, Sendable {
        case match, noMatch, noFace, error
    }
    public var decision: Decision
    /// The matcher's similarity score (higher: more alike; the reference matcher's is 1 − the descriptor distance).
    public var score: Double?
    public var faceFound: Bool
    /// The liveness verdict when a challenge was sent: `{passed, …}` as the matcher gives it.
    public var liveness: JSONValue?
    /// The matcher's template of the probe face (MID_SELFIE_MATCHING keeps it when the workflow asks).
    public var template: FaceImage?

    public init(
        decision: Decision, score: Double?, faceFound: Bool, liveness: JSONValue? = nil, template: FaceImage? = nil
    ) {
        self.decision = decision; self.score = score; self.faceFound = faceFound
        self.liveness = liveness; self.template = template
    }

    /// Parses the matcher's stdout; nil when it is not an answer (the daemon then treats the matcher as unavailable).
    public init?(output: [UInt8]) {
        guard let json = try? JSONValue.parse(output), json.objectValue != nil,
            let decision = json["decision"]?.stringValue.flatMap(Decision.init(rawValue:)),
            let faceFound = json["faceFound"]?.boolValue
        else { return nil }
        var score: Double?
        if let s = json["score"], !s.isNull {
            guard case .number(let n) = s, n.isFinite else { return nil }
            score = n
        }
        var template: FaceImage?
        if let t = json["template"], !t.isNull {
            guard let parsed = try? FaceImage(json: t, field: "template") else { return nil }
            template = parsed
        }
        let liveness = json["liveness"].flatMap { $0.isNull ? nil : $0 }
        if let liveness, liveness["passed"]?.boolValue == nil { return nil }
        self.init(decision: decision, score: score, faceFound: faceFound, liveness: liveness, template: template)
    }

    /// `{decision, score, faceFound, liveness?}` (never a template or an image): what `face.compare` and the
    /// audit show.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "decision": .string(decision.rawValue), "faceFound": .bool(faceFound),
            "score": score.map { .number($0) } ?? .null,
        ]
        if let liveness { o["liveness"] = liveness }
        return .object(o)
    }
}

/// The `faceMatching` section of the daemon's config file: `{command: [argv], threshold, timeoutSeconds}`.
public struct FaceMatcherConfiguration: Sendable, Equatable {
    /// The matcher program and its arguments (no shell).
    public var command: [String]
    /// The least score the daemon takes as a match, besides the matcher's own `decision: "match"` (nil: the
    /// matcher's decision alone).
    public var threshold: Double?
    public var timeout: Duration

    public static let defaultTimeoutSeconds = 30

    public init(command: [String], threshold: Double? = nil, timeoutSeconds: Int = defaultTimeoutSeconds) {
        self.command = command; self.threshold = threshold; self.timeout = .seconds(timeoutSeconds)
    }

    /// Parses the section; `defaultCommand` (the reference matcher, when installed) stands in for a missing
    /// `command`. nil when there is neither. INVALID_INPUT names the bad key.
    public init?(json: JSONValue?, defaultCommand: [String]?) throws(TesseraError) {
        let o = json.flatMap { $0.isNull ? nil : $0 }
        if let o, o.objectValue == nil { throw Self.error("faceMatching must be an object") }
        let fields = o?.objectValue ?? [:]
        if let bad = fields.keys.sorted().first(where: { !["command", "threshold", "timeoutSeconds"].contains($0) }) {
            throw Self.error("unknown key '\(bad)' in faceMatching (known: command, threshold, timeoutSeconds)")
        }
        var command = defaultCommand
        if let c = fields["command"] {
            guard let items = c.arrayValue, !items.isEmpty, items.allSatisfy({ !($0.stringValue ?? "").isEmpty }) else {
                throw Self.error("faceMatching.command must be a non-empty array of strings")
            }
            command = items.compactMap(\.stringValue)
        }
        var threshold: Double?
        if let t = fields["threshold"] {
            guard case .number(let n) = t, n.isFinite else {
                throw Self.error("faceMatching.threshold must be a number")
            }
            threshold = n
        }
        var timeout = Self.defaultTimeoutSeconds
        if let t = fields["timeoutSeconds"] {
            guard let n = t.intValue, (1...600).contains(n) else {
                throw Self.error("faceMatching.timeoutSeconds must be a whole number in 1…600")
            }
            timeout = n
        }
        guard let command else {
            if fields["threshold"] != nil || fields["timeoutSeconds"] != nil {
                throw Self.error("faceMatching needs a command (the reference matcher is not installed)")
            }
            return nil
        }
        self.init(command: command, threshold: threshold, timeoutSeconds: timeout)
    }

    static func error(_ message: String) -> TesseraError {
        TesseraError(.invalidInput, "config: \(message)", details: ["field": "faceMatching"])
    }
}

/// Runs the configured face matcher: the request as JSON on stdin, the answer as JSON on stdout, its stderr to
/// the log (never an image: the images go only through the program's stdin file, removed when it ends).
/// A matcher that cannot start, crashes, exits non-zero, times out or prints no answer is
/// `FACE_MATCHER_UNAVAILABLE` (retryable), never a match.
public struct FaceMatcher: Sendable {
    public let configuration: FaceMatcherConfiguration
    let logger: Logger

    public init(configuration: FaceMatcherConfiguration, logger: Logger) {
        self.configuration = configuration; self.logger = logger
    }

    /// The matcher's name for the audit: its program's file name.
    public var name: String {
        let program = configuration.command.last(where: { !$0.hasPrefix("-") }) ?? configuration.command[0]
        return String(program.split(separator: "/").last ?? Substring(program))
    }

    /// Asks the matcher. The answer's decision stays the matcher's; `isMatch` applies the threshold.
    public func compare(_ request: FaceMatchRequest) async throws(TesseraError) -> FaceMatchAnswer {
        let argv = configuration.command
        let completion: ProgramRunner.Completion
        do {
            completion = try await ProgramRunner.capture(
                argv, input: request.json.serialized(), timeout: configuration.timeout)
        } catch {
            throw unavailable("cannot run the face matcher \(name): \(error.message)")
        }
        let stderr = String(decoding: completion.stderr.prefix(4096), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        if !stderr.isEmpty {
            logger.notice("face matcher stderr", metadata: ["matcher": "\(name)", "stderr": "\(stderr)"])
        }
        if completion.cancelled { throw TesseraError(.cancelled, "the face comparison was cancelled") }
        if completion.timedOut {
            throw unavailable(
                "the face matcher \(name) did not answer within \(configuration.timeout.components.seconds) s")
        }
        guard completion.status == 0 else {
            throw unavailable(
                "the face matcher \(name) exited with status \(completion.status.map(String.init) ?? "?")")
        }
        guard let answer = FaceMatchAnswer(output: completion.stdout) else {
            throw unavailable("the face matcher \(name) gave no valid answer")
        }
        if answer.decision == .error {
            throw unavailable("the face matcher \(name) reported an error")
        }
        return answer
    }

    /// Whether an answer is a match: the matcher says `match` and the score reaches the threshold (when set).
    public func isMatch(_ answer: FaceMatchAnswer) -> Bool {
        guard answer.decision == .match, answer.faceFound else { return false }
        guard let threshold = configuration.threshold else { return true }
        guard let score = answer.score else { return false }
        return score >= threshold
    }

    func unavailable(_ message: String) -> TesseraError {
        logger.warning("face matcher unavailable", metadata: ["matcher": "\(name)", "reason": "\(message)"])
        return TesseraError(.faceMatcherUnavailable, message, retryable: true)
    }
}
