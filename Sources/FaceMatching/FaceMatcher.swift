import FoundationEssentials
import Logging
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

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
        s = String(s.trimming(where: { $0 == "=" }))
        let rem = s.utf8.count % 4
        if rem == 1 { return nil }
        if rem > 0 { s += String(repeating: "=", count: 4 - rem) }
        return Data(base64Encoded: s).map { [UInt8]($0) }
    }

    /// Whether this image is `other` itself: the same bytes, or the same coded pixels with other metadata (a JPEG
    /// without its APPn/COM segments, a PNG's critical chunks). A cheap check before any matcher runs.
    public func isCopy(of other: FaceImage) -> Bool {
        if data == other.data { return true }
        guard let mine = Self.codedPixels(data), let theirs = Self.codedPixels(other.data) else { return false }
        return mine == theirs
    }

    /// A JPEG's segments but APPn and COM, with its entropy-coded data; a PNG's critical chunks; nil otherwise.
    static func codedPixels(_ b: [UInt8]) -> [UInt8]? {
        if b.starts(with: [0xFF, 0xD8]) {
            var out: [UInt8] = []
            var i = 2
            while i + 4 <= b.count {
                guard b[i] == 0xFF else { return nil }
                let marker = b[i + 1]
                let length = Int(b[i + 2]) << 8 | Int(b[i + 3])
                guard length >= 2 else { return nil }
                if marker == 0xDA { return out + b[i...] }
                guard i + 2 + length <= b.count else { return nil }
                if !(0xE0...0xEF).contains(marker) && marker != 0xFE { out += b[i..<(i + 2 + length)] }
                i += 2 + length
            }
            return nil
        }
        if b.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            var out: [UInt8] = []
            var i = 8
            while i + 12 <= b.count {
                let length = b[i..<(i + 4)].reduce(0) { $0 << 8 | Int($1) }
                guard length <= b.count - i - 12 else { return nil }
                // Critical chunks have an upper-case first letter; ancillary ones (text, time, …) are metadata.
                if b[i + 4] & 0x20 == 0 { out += b[(i + 4)..<(i + 8 + length)] }
                i += 12 + length
            }
            return out
        }
        return nil
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
    /// How much a probe is a copy of the reference image (the highest over the probes; the reference matcher's is
    /// the correlation of the aligned face crops). The daemon falls back to `score` when a matcher gives none.
    public var replayScore: Double?
    /// The liveness verdict when a challenge was sent: `{passed, …}` as the matcher gives it.
    public var liveness: JSONValue?
    /// The matcher's template of the probe face (MID_SELFIE_MATCHING keeps it when the workflow asks).
    public var template: FaceImage?

    public init(
        decision: Decision, score: Double?, faceFound: Bool, liveness: JSONValue? = nil, template: FaceImage? = nil,
        replayScore: Double? = nil
    ) {
        self.decision = decision; self.score = score; self.faceFound = faceFound
        self.liveness = liveness; self.template = template; self.replayScore = replayScore
    }

    /// Parses the matcher's stdout; nil when it is not an answer (the daemon then treats the matcher as unavailable).
    public init?(output: [UInt8]) {
        guard let json = try? JSONValue.parse(output), json.objectValue != nil,
            let decision = json["decision"]?.stringValue.flatMap(Decision.init(rawValue:)),
            let faceFound = json["faceFound"]?.boolValue
        else { return nil }
        var scores: [Double?] = []
        for key in ["score", "replayScore"] {
            guard let s = json[key], !s.isNull else {
                scores.append(nil)
                continue
            }
            guard case .number(let n) = s, n.isFinite else { return nil }
            scores.append(n)
        }
        var template: FaceImage?
        if let t = json["template"], !t.isNull {
            guard let parsed = try? FaceImage(json: t, field: "template") else { return nil }
            template = parsed
        }
        let liveness = json["liveness"].flatMap { $0.isNull ? nil : $0 }
        if let liveness, liveness["passed"]?.boolValue == nil { return nil }
        self.init(
            decision: decision, score: scores[0], faceFound: faceFound, liveness: liveness, template: template,
            replayScore: scores[1])
    }

    /// `{decision, score, replayScore, faceFound, liveness?}` (never a template or an image): what the audit and an
    /// administrator's `face.compare` show.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "decision": .string(decision.rawValue), "faceFound": .bool(faceFound),
            "score": score.map { .number($0) } ?? .null, "replayScore": replayScore.map { .number($0) } ?? .null,
        ]
        if let liveness { o["liveness"] = liveness }
        return .object(o)
    }
}

/// The `faceMatching` section of the daemon's config file:
/// `{command: [argv], resident, idleSeconds, threshold, timeoutSeconds, replayThreshold, maxAttempts}`.
public struct FaceMatcherConfiguration: Sendable, Equatable {
    /// The matcher program and its arguments (no shell).
    public var command: [String]
    /// The least score the daemon takes as a match, besides the matcher's own `decision: "match"` (nil: the
    /// matcher's decision alone).
    public var threshold: Double?
    public var timeout: Duration
    /// A probe whose replay score (else score) is above this is the reference itself: `FACE_REPLAY`.
    public var replayThreshold: Double
    /// Comparisons one enrollment step may run; then the enrollment fails `FACE_ATTEMPTS_EXCEEDED`.
    public var maxAttempts: Int
    /// The program kept running between comparisons (one request line, one answer line), nil for one program
    /// run per comparison: `command` itself, or the reference matcher's with `--resident`.
    public var residentCommand: [String]?
    /// A resident matcher is stopped after this long without a comparison.
    public var idleTimeout: Duration

    public static let defaultTimeoutSeconds = 30
    /// The reference matcher's: a copy of the portrait (re-encoded, scaled, framed) correlates above 0.98, another
    /// photo of the same person below 0.5.
    public static let defaultReplayThreshold = 0.95
    public static let defaultMaxAttempts = 5
    public static let defaultIdleSeconds = 300
    static let keys = [
        "command", "idleSeconds", "maxAttempts", "replayThreshold", "resident", "threshold", "timeoutSeconds",
    ]

    public init(
        command: [String], threshold: Double? = nil, timeoutSeconds: Int = defaultTimeoutSeconds,
        replayThreshold: Double = defaultReplayThreshold, maxAttempts: Int = defaultMaxAttempts,
        resident: Bool = false, idleSeconds: Int = defaultIdleSeconds
    ) {
        self.command = command; self.threshold = threshold; self.timeout = .seconds(timeoutSeconds)
        self.replayThreshold = replayThreshold; self.maxAttempts = maxAttempts
        self.residentCommand = resident ? command : nil; self.idleTimeout = .seconds(idleSeconds)
    }

    /// Parses the section; `defaultCommand` (the reference matcher, when installed) stands in for a missing
    /// `command`, resident (with `--resident`) unless `resident` is false. nil when there is neither. INVALID_INPUT
    /// names the bad key.
    public init?(json: JSONValue?, defaultCommand: [String]?) throws(TesseraError) {
        let o = json.flatMap { $0.isNull ? nil : $0 }
        if let o, o.objectValue == nil { throw Self.error("faceMatching must be an object") }
        let fields = o?.objectValue ?? [:]
        if let bad = fields.keys.sorted().first(where: { !Self.keys.contains($0) }) {
            throw Self.error("unknown key '\(bad)' in faceMatching (known: \(Self.keys.joined(separator: ", ")))")
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
        /// `fields[key]`, a whole number in `range`, else `fallback` when absent.
        func wholeNumber(_ key: String, _ range: ClosedRange<Int>, _ fallback: Int) throws(TesseraError) -> Int {
            guard let value = fields[key] else { return fallback }
            guard let n = value.intValue, range.contains(n) else {
                throw Self.error(
                    "faceMatching.\(key) must be a whole number in \(range.lowerBound)…\(range.upperBound)")
            }
            return n
        }
        let timeout = try wholeNumber("timeoutSeconds", 1...600, Self.defaultTimeoutSeconds)
        var replayThreshold = Self.defaultReplayThreshold
        if let t = fields["replayThreshold"] {
            guard case .number(let n) = t, n.isFinite else {
                throw Self.error("faceMatching.replayThreshold must be a number")
            }
            replayThreshold = n
        }
        let maxAttempts = try wholeNumber("maxAttempts", 1...100, Self.defaultMaxAttempts)
        var resident: Bool?
        if let r = fields["resident"] {
            guard let b = r.boolValue else { throw Self.error("faceMatching.resident must be true or false") }
            resident = b
        }
        let idleSeconds = try wholeNumber("idleSeconds", 1...86_400, Self.defaultIdleSeconds)
        guard let command else {
            if fields.keys.contains(where: { $0 != "command" }) {
                throw Self.error("faceMatching needs a command (the reference matcher is not installed)")
            }
            return nil
        }
        self.init(
            command: command, threshold: threshold, timeoutSeconds: timeout, replayThreshold: replayThreshold,
            maxAttempts: maxAttempts, resident: resident ?? false, idleSeconds: idleSeconds)
        // The reference matcher loads its models once when resident (~2 s a comparison saved).
        if fields["command"] == nil && resident != false { residentCommand = command + ["--resident"] }
    }

    static func error(_ message: String) -> TesseraError {
        TesseraError(.invalidInput, "config: \(message)", details: ["field": "faceMatching"])
    }
}

/// Runs the configured face matcher: the request as JSON on stdin, the answer as JSON on stdout, its stderr to
/// the log (never an image: the images go only through the program's stdin file, removed when it ends).
/// A matcher that cannot start, crashes, exits non-zero, times out or prints no answer is
/// `FACE_MATCHER_UNAVAILABLE` (retryable), never a match. A resident matcher (`residentCommand`) runs as a
/// `ResidentProgram`: started by the first comparison, one request line and one answer line each, started again
/// by the comparison after it died (the one it died on is `FACE_MATCHER_UNAVAILABLE`), stopped when idle; its
/// stderr goes to the daemon's.
public struct FaceMatcher: Sendable {
    public let configuration: FaceMatcherConfiguration
    let logger: Logger
    let resident: ResidentProgram?

    public init(configuration: FaceMatcherConfiguration, logger: Logger) {
        self.configuration = configuration; self.logger = logger
        resident = configuration.residentCommand.map { command in
            ResidentProgram(command: command, idleTimeout: configuration.idleTimeout) {
                logger.info("face matcher: \($0)")
            }
        }
    }

    /// Stops a resident matcher (the next comparison starts it again).
    public func stop() async { await resident?.stop() }

    /// The matcher's name for the audit: its program's file name.
    public var name: String {
        let program = configuration.command.last(where: { !$0.hasPrefix("-") }) ?? configuration.command[0]
        return String(program.split(separator: "/").last ?? Substring(program))
    }

    /// Asks the matcher. The answer's decision stays the matcher's; `isMatch` applies the threshold.
    public func compare(_ request: FaceMatchRequest) async throws(TesseraError) -> FaceMatchAnswer {
        if let resident {
            let line: [UInt8]
            do {
                line = try await resident.request(request.json.serialized(), timeout: configuration.timeout)
            } catch {
                throw unavailable("the resident face matcher \(name) failed: \(error.message)")
            }
            return try answer(line)
        }
        let argv = configuration.command
        let completion: ProgramRunner.Completion
        do {
            completion = try await ProgramRunner.capture(
                argv, input: request.json.serialized(), timeout: configuration.timeout)
        } catch {
            throw unavailable("cannot run the face matcher \(name): \(error.message)")
        }
        let stderr = String(decoding: completion.stderr.prefix(4096), as: UTF8.self)
            .trimmingWhitespace()
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
        return try answer(completion.stdout)
    }

    private func answer(_ output: [UInt8]) throws(TesseraError) -> FaceMatchAnswer {
        guard let answer = FaceMatchAnswer(output: output) else {
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

    /// Whether an answer says a probe is a copy of the reference: its replay score (else its score) is above
    /// `replayThreshold`.
    public func isReplay(_ answer: FaceMatchAnswer) -> Bool {
        guard let score = answer.replayScore ?? answer.score else { return false }
        return score > configuration.replayThreshold
    }

    func unavailable(_ message: String) -> TesseraError {
        logger.warning("face matcher unavailable", metadata: ["matcher": "\(name)", "reason": "\(message)"])
        return TesseraError(.faceMatcherUnavailable, message, retryable: true)
    }
}
