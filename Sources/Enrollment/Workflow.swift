import FoundationEssentials
import TesseraCore

/// What a workflow step is, by key (docs/ENROLLMENT.md, "Steps").
public enum StepKind: String, Sendable {
    case emailInfo = "EMAIL_INFO"
    case phoneInfo = "PHONE_INFO"
    case phoneOTP = "PHONE_OTP"
    case emailOTP = "EMAIL_OTP"
    case nfcMRZ = "NFC_MRZ"
    case nfcPhase = "NFC_PHASE"
    /// Reads an ISO/IEC 18013-5 mDL over NFC; usable wherever NFC_PHASE is (docs/ENROLLMENT.md, "MDOC_PHASE").
    case mdocPhase = "MDOC_PHASE"
    case attributeMatching = "ATTRIBUTE_MATCHING"
    case passkeyCreation = "PASSKEY_CREATION"
    /// Live captures against the portrait the flow verified (DG2 or the mDL's portrait), by the face matcher.
    case faceMatching = "FACE_MATCHING"
    /// Issues a random liveness challenge (an order of actions such as turnLeft, blink, turnRight).
    case livenessSession = "LIVENESS_CHALLENGE_SESSION_CREATION"
    /// Frames of the person performing the challenge, checked by the matcher against the verified portrait.
    case livenessPhase = "LIVENESS_CHALLENGE_PHASE"
    /// A capture against the face template kept from an earlier enrollment of the same person.
    case midSelfie = "MID_SELFIE_MATCHING"
    /// A key declared `"client": true` (or added by `customSteps`): fulfilled by `submit`.
    case client
    /// A known key this station cannot perform (document capture and authentication).
    case unsupported

    /// Keys of the vendor model that need capabilities this station does not have.
    static let unsupportedKeys: Set<String> = ["DOC_AUTH", "WEBBIO_CODING", "DOCUMENT_LIVE_CAPTURE"]

    /// The steps that need the face matcher.
    static let faceKinds: Set<StepKind> = [.faceMatching, .livenessSession, .livenessPhase, .midSelfie]

    /// The liveness actions a challenge draws from.
    public static let livenessActions = ["turnLeft", "turnRight", "blink"]

    /// Whether a connected client provides the step's input (as opposed to the daemon doing the work).
    var performedBy: String {
        switch self {
        case .emailInfo, .phoneInfo, .nfcMRZ, .client, .faceMatching, .livenessPhase, .midSelfie: "client"
        default: "daemon"
        }
    }
}

/// One step of a workflow with its settings.
public struct WorkflowStep: Sendable, Equatable {
    public var key: String
    public var kind: StepKind
    public var settings: [String: JSONValue]

    /// `{key, kind, settings}`: how the step is stored with an enrollment (so a config change never alters a
    /// running enrollment).
    var json: JSONValue {
        ["key": .string(key), "kind": .string(kind.rawValue), "settings": .object(settings)]
    }

    init(key: String, kind: StepKind, settings: [String: JSONValue]) {
        self.key = key; self.kind = kind; self.settings = settings
    }

    init(stored: JSONValue) throws(TesseraError) {
        guard let key = stored["key"]?.stringValue,
            let kind = stored["kind"]?.stringValue.flatMap(StepKind.init(rawValue:))
        else { throw TesseraError(.internalError, "a stored enrollment step does not parse") }
        self.init(key: key, kind: kind, settings: stored["settings"]?.objectValue ?? [:])
    }

    func string(_ name: String) -> String? { settings[name]?.stringValue }

    /// A client step given in `enrollment.start`'s `customSteps`: `{key, prompt?, input?}`.
    public static func custom(_ item: JSONValue) throws(TesseraError) -> WorkflowStep {
        guard let o = item.objectValue, let key = o["key"]?.stringValue else {
            throw TesseraError(
                .invalidInput, "customSteps items must be {key, prompt?, input?}", details: ["field": "customSteps"])
        }
        guard StepKind(rawValue: key) == nil, !StepKind.unsupportedKeys.contains(key) else {
            throw TesseraError(
                .invalidInput, "customSteps: \(key) is a built-in step", details: ["field": "customSteps"])
        }
        let step = WorkflowStep(key: key, kind: .client, settings: o.filter { $0.key != "key" })
        do {
            try EnrollmentConfiguration.validateClientKey(key, context: "customSteps")
            try EnrollmentConfiguration.validateSettings(step, workflow: "customSteps")
        } catch {
            throw TesseraError(.invalidInput, error.message, details: ["field": "customSteps"])
        }
        return step
    }
}

/// A named workflow from the configuration.
public struct Workflow: Sendable {
    public var name: String
    /// Can be started without an activation token (default true).
    public var remote: Bool
    /// Expected attributes for remote enrollments.
    public var expected: ExpectedAttributes?
    public var steps: [WorkflowStep]
    /// The workflow's own wording for the kiosk screen: language → catalogue key → text (docs/KIOSK.md), given to
    /// the station in `enrollment.start`'s answer.
    public var messages: JSONValue? = nil
}

/// The `enrollment` section of the daemon's config file, validated (docs/ENROLLMENT.md).
public struct EnrollmentConfiguration: Sendable {
    public var idleTimeout: TimeInterval = 1800
    public var otpAttempts = 5
    public var otpTTL: TimeInterval = 600
    public var otpMaxResends = 3
    public var notifier: OTPNotifier?
    public var issuers: [IssuerKey] = []
    public var stationId: String?
    /// Workflows in configuration order.
    public var workflows: [Workflow] = []
    /// Recovery rate limits (`recovery`: docs/LIFECYCLE.md, "Recovery").
    public var recoveryMaxPerUser = 3
    public var recoveryMaxPerStation = 20
    public var recoveryWindow: TimeInterval = 86_400

    public init() {}

    /// Parses and validates the section; every problem is an INVALID_INPUT naming the workflow and step.
    /// Relative file paths are resolved against `baseDirectory` (the config file's directory).
    public init(json: JSONValue?, baseDirectory: String = ".") throws(TesseraError) {
        guard let json, !json.isNull else { return }
        guard let o = json.objectValue else { throw Self.error("enrollment must be an object") }
        try Self.onlyKeys(
            o, ["idleTimeoutSeconds", "otp", "notifier", "issuers", "stationId", "workflows", "recovery"],
            in: "enrollment")
        if let r = o["recovery"] {
            guard let p = r.objectValue else { throw Self.error("enrollment.recovery must be an object") }
            try Self.onlyKeys(
                p, ["maxAttemptsPerUser", "maxAttemptsPerStation", "windowSeconds"], in: "enrollment.recovery")
            if let v = p["maxAttemptsPerUser"] {
                recoveryMaxPerUser = try Self.positiveInt(v, "enrollment.recovery.maxAttemptsPerUser")
            }
            if let v = p["maxAttemptsPerStation"] {
                recoveryMaxPerStation = try Self.positiveInt(v, "enrollment.recovery.maxAttemptsPerStation")
            }
            if let v = p["windowSeconds"] {
                recoveryWindow = TimeInterval(try Self.positiveInt(v, "enrollment.recovery.windowSeconds"))
            }
        }
        if let v = o["idleTimeoutSeconds"] {
            idleTimeout = TimeInterval(try Self.positiveInt(v, "enrollment.idleTimeoutSeconds"))
        }
        if let otp = o["otp"] {
            guard let p = otp.objectValue else { throw Self.error("enrollment.otp must be an object") }
            try Self.onlyKeys(p, ["attempts", "ttlSeconds", "maxResends"], in: "enrollment.otp")
            if let v = p["attempts"] { otpAttempts = try Self.positiveInt(v, "enrollment.otp.attempts") }
            if let v = p["ttlSeconds"] { otpTTL = TimeInterval(try Self.positiveInt(v, "enrollment.otp.ttlSeconds")) }
            if let v = p["maxResends"] {
                guard let n = v.intValue, n >= 0 else {
                    throw Self.error("enrollment.otp.maxResends must be a number ≥ 0")
                }
                otpMaxResends = n
            }
        }
        if let n = o["notifier"] { notifier = try OTPNotifier(json: n, baseDirectory: baseDirectory) }
        if let s = o["stationId"] {
            guard let id = s.stringValue, !id.isEmpty else { throw Self.error("enrollment.stationId must be a string") }
            stationId = id
        }
        if let list = o["issuers"] {
            guard let items = list.arrayValue else { throw Self.error("enrollment.issuers must be an array") }
            for item in items { issuers.append(try Self.issuer(item, baseDirectory: baseDirectory)) }
        }
        if let w = o["workflows"] {
            guard let all = w.objectValue else { throw Self.error("enrollment.workflows must be an object") }
            for name in all.keys.sorted() { workflows.append(try Self.workflow(name, all[name]!)) }
        }
    }

    public func workflow(named name: String) -> Workflow? { workflows.first { $0.name == name } }

    // MARK: parsing

    /// A workflow is `{steps, remote?, expected?, messages?}`, or just its steps array.
    static func workflow(_ name: String, _ json: JSONValue) throws(TesseraError) -> Workflow {
        if case .array = json { return try workflow(name, ["steps": json]) }
        guard let o = json.objectValue else { throw error("workflow \(name) must be an object or a steps array") }
        try onlyKeys(o, ["remote", "expected", "steps", "messages"], in: "workflow \(name)")
        guard let items = o["steps"]?.arrayValue, !items.isEmpty else {
            throw error("workflow \(name) needs a non-empty steps array")
        }
        var steps: [WorkflowStep] = []
        for item in items {
            let step = try Self.step(item, workflow: name)
            if steps.contains(where: { $0.key == step.key }) {
                throw error("workflow \(name) lists step \(step.key) twice")
            }
            steps.append(step)
        }
        try checkOrder(steps, workflow: name)
        var remote = true
        if let r = o["remote"] {
            guard let b = r.boolValue else { throw error("workflow \(name): remote must be true or false") }
            remote = b
        }
        var expected: ExpectedAttributes?
        if let e = o["expected"] {
            do { expected = try ExpectedAttributes(json: e) } catch {
                throw Self.error("workflow \(name): expected: \(error.message)")
            }
        }
        var messages: JSONValue?
        if let m = o["messages"] {
            guard let languages = m.objectValue,
                languages.values.allSatisfy({
                    ($0.objectValue ?? ["": .null]).values.allSatisfy { $0.stringValue != nil }
                })
            else {
                throw error("workflow \(name): messages must map a language code to {key: text}")
            }
            messages = m
        }
        return Workflow(name: name, remote: remote, expected: expected, steps: steps, messages: messages)
    }

    static func step(_ item: JSONValue, workflow: String) throws(TesseraError) -> WorkflowStep {
        var settings: [String: JSONValue] = [:]
        let key: String
        var client = false
        switch item {
        case .string(let k): key = k
        case .object(let o):
            guard let k = o["key"]?.stringValue else { throw error("workflow \(workflow): a step object needs a key") }
            key = k
            if let c = o["client"] {
                guard let b = c.boolValue else {
                    throw error("workflow \(workflow), step \(k): client must be true or false")
                }
                client = b
            }
            settings = o.filter { $0.key != "key" && $0.key != "client" }
        default: throw error("workflow \(workflow): steps must be keys or objects")
        }
        let kind: StepKind
        if let known = StepKind(rawValue: key), known != .client, known != .unsupported {
            guard !client else {
                throw error("workflow \(workflow), step \(key): a built-in step cannot be a client step")
            }
            kind = known
        } else if StepKind.unsupportedKeys.contains(key) {
            kind = .unsupported
        } else if client {
            try validateClientKey(key, context: "workflow \(workflow)")
            kind = .client
        } else {
            throw error("workflow \(workflow): unknown step key \(key) (declare custom steps with \"client\": true)")
        }
        let step = WorkflowStep(key: key, kind: kind, settings: settings)
        try validateSettings(step, workflow: workflow)
        return step
    }

    static func validateClientKey(_ key: String, context: String) throws(TesseraError) {
        let ok =
            !key.isEmpty && key.count <= 64
            && key.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
        guard ok else { throw error("\(context): step key \(key) must be UPPER_SNAKE (A–Z, 0–9, _)") }
    }

    static func validateSettings(_ step: WorkflowStep, workflow: String) throws(TesseraError) {
        let context = "workflow \(workflow), step \(step.key)"
        let s = step.settings
        switch step.kind {
        case .nfcPhase:
            try onlyKeys(
                s,
                [
                    "reader", "dataGroups", "requirePassiveAuthentication", "allowUnverified", "allowClonable",
                    "cardWaitSeconds",
                ], in: context)
            if let r = s["reader"], r.stringValue == nil { throw error("\(context): reader must be a string") }
            if let g = s["dataGroups"] {
                guard let list = g.arrayValue, !list.isEmpty,
                    list.allSatisfy({ $0.stringValue.flatMap(dataGroupNumber) != nil })
                else {
                    throw error("\(context): dataGroups must list \"DG1\"…\"DG16\"")
                }
            }
            for k in ["requirePassiveAuthentication", "allowUnverified", "allowClonable"]
            where s[k] != nil && s[k]?.boolValue == nil {
                throw error("\(context): \(k) must be true or false")
            }
            if let w = s["cardWaitSeconds"] { _ = try positiveInt(w, "\(context): cardWaitSeconds") }
        case .mdocPhase:
            try onlyKeys(s, ["reader", "elements", "cardWaitSeconds"], in: context)
            if let r = s["reader"], r.stringValue == nil { throw error("\(context): reader must be a string") }
            if let e = s["elements"] {
                guard let list = e.arrayValue, list.allSatisfy({ $0.stringValue.map(validElement) ?? false }) else {
                    throw error("\(context): elements must list element identifiers (\"portrait\" or \"namespace/id\")")
                }
            }
            if let w = s["cardWaitSeconds"] { _ = try positiveInt(w, "\(context): cardWaitSeconds") }
        case .passkeyCreation:
            try onlyKeys(s, ["rpId", "tokenId", "attestation", "origin", "replace"], in: context)
            if let r = s["replace"], r.boolValue == nil { throw error("\(context): replace must be true or false") }
            guard let rp = s["rpId"]?.stringValue, !rp.isEmpty else { throw error("\(context): rpId is required") }
            if let a = s["attestation"], a.stringValue != "none" && a.stringValue != "packed" {
                throw error("\(context): attestation must be \"none\" or \"packed\"")
            }
            for k in ["tokenId", "origin"] where s[k] != nil && s[k]?.stringValue == nil {
                throw error("\(context): \(k) must be a string")
            }
        case .client:
            try onlyKeys(s, ["prompt", "input"], in: context)
            if let p = s["prompt"], p.stringValue == nil { throw error("\(context): prompt must be a string") }
            if let i = s["input"], i.objectValue == nil {
                throw error("\(context): input must be a JSON Schema object")
            }
        case .faceMatching, .midSelfie:
            try onlyKeys(s, ["keepTemplate"], in: context)
            if let k = s["keepTemplate"], k.boolValue == nil {
                throw error("\(context): keepTemplate must be true or false")
            }
            if step.kind == .midSelfie, s["keepTemplate"] != nil {
                throw error("\(context): keepTemplate belongs to FACE_MATCHING")
            }
        case .livenessSession:
            try onlyKeys(s, ["actions", "length"], in: context)
            if let a = s["actions"] {
                guard let list = a.arrayValue, !list.isEmpty,
                    list.allSatisfy({ $0.stringValue.map(StepKind.livenessActions.contains) ?? false })
                else {
                    throw error("\(context): actions must list turnLeft, turnRight or blink")
                }
            }
            if let n = s["length"] {
                guard let v = n.intValue, (1...6).contains(v) else {
                    throw error("\(context): length must be a whole number in 1…6")
                }
            }
        case .unsupported:
            break
        default:
            try onlyKeys(s, [], in: context)
        }
    }

    /// An mDL element as a step's `elements` lists it: an identifier, or "namespace/identifier".
    static func validElement(_ text: String) -> Bool {
        guard let last = text.split(separator: "/", omittingEmptySubsequences: false).last else { return false }
        return !text.isEmpty && !last.isEmpty && !text.hasPrefix("/") && text.utf8.count <= 256
    }

    /// Steps that use data collected by an earlier step: each needs one of the listed kinds before it.
    static func checkOrder(_ steps: [WorkflowStep], workflow: String) throws(TesseraError) {
        let needs: [StepKind: [StepKind]] = [
            .phoneOTP: [.phoneInfo], .emailOTP: [.emailInfo], .nfcPhase: [.nfcMRZ],
            .attributeMatching: [.nfcPhase, .mdocPhase], .faceMatching: [.nfcPhase, .mdocPhase],
            .livenessSession: [.nfcPhase, .mdocPhase], .livenessPhase: [.livenessSession],
            .midSelfie: [.nfcPhase, .mdocPhase],
        ]
        for (i, step) in steps.enumerated() {
            guard let required = needs[step.kind] else { continue }
            if !steps[..<i].contains(where: { required.contains($0.kind) }) {
                let names = required.map(\.rawValue).joined(separator: " or ")
                throw error("workflow \(workflow): step \(step.key) needs \(names) before it")
            }
            if StepKind.faceKinds.contains(step.kind), step.kind != .livenessPhase,
                let read = steps[..<i].last(where: { $0.kind == .nfcPhase }),
                let groups = read.settings["dataGroups"]?.arrayValue,
                !groups.contains(where: { $0.stringValue.flatMap(dataGroupNumber) == 2 }),
                !steps[..<i].contains(where: { $0.kind == .mdocPhase })
            {
                throw error(
                    "workflow \(workflow): step \(step.key) needs the portrait: add DG2 to \(read.key)'s dataGroups")
            }
        }
    }

    static func issuer(_ item: JSONValue, baseDirectory: String) throws(TesseraError) -> IssuerKey {
        guard let o = item.objectValue, let iss = o["issuer"]?.stringValue, !iss.isEmpty else {
            throw error("enrollment.issuers items need an issuer string")
        }
        try onlyKeys(o, ["issuer", "keyId", "publicKey", "publicKeyFile"], in: "issuer \(iss)")
        let pem: String
        if let inline = o["publicKey"]?.stringValue {
            pem = inline
        } else if let file = o["publicKeyFile"]?.stringValue {
            let path = file.hasPrefix("/") ? file : baseDirectory + "/" + file
            guard let data = FileManager.default.contents(atPath: path) else {
                throw error("issuer \(iss): cannot read publicKeyFile \(path)")
            }
            pem = String(decoding: data, as: UTF8.self)
        } else {
            throw error("issuer \(iss) needs publicKey or publicKeyFile")
        }
        return try IssuerKey(issuer: iss, keyId: o["keyId"]?.stringValue, pem: pem)
    }

    static func dataGroupNumber(_ name: String) -> Int? {
        let upper = name.uppercased()
        guard upper.hasPrefix("DG"), let n = Int(upper.dropFirst(2)), (1...16).contains(n) else { return nil }
        return n
    }

    static func positiveInt(_ v: JSONValue, _ name: String) throws(TesseraError) -> Int {
        guard let n = v.intValue, n > 0 else { throw error("\(name) must be a positive whole number") }
        return n
    }

    static func onlyKeys(_ o: [String: JSONValue], _ allowed: Set<String>, in context: String) throws(TesseraError) {
        if let bad = o.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw error("\(context): unknown setting \(bad)")
        }
    }

    static func error(_ message: String) -> TesseraError {
        TesseraError(.invalidInput, "config: \(message)", details: ["field": "enrollment"])
    }
}

extension Workflow {
    /// Why the station cannot run this workflow at all (empty: it can).
    func unavailableReasons(notifier: OTPNotifier?, faceMatcher: Bool) -> [String] {
        var reasons: [String] = []
        for step in steps {
            switch step.kind {
            case .unsupported:
                reasons.append("\(step.key): this station has no capability for this step")
            case .faceMatching, .livenessSession, .livenessPhase, .midSelfie:
                if !faceMatcher { reasons.append("\(step.key): this station has no face matcher") }
            case .phoneOTP, .emailOTP:
                if notifier == nil { reasons.append("\(step.key): no OTP notifier is configured") }
            default: break
            }
        }
        return reasons
    }

    /// Whether remote starts have everything they need without an activation token.
    var needsActivationToken: Bool {
        steps.contains { $0.kind == .attributeMatching } && expected == nil
    }

    /// Short names of what the workflow collects or uses.
    var needs: [String] {
        var out: [String] = []
        func add(_ s: String) { if !out.contains(s) { out.append(s) } }
        for step in steps {
            switch step.kind {
            case .emailInfo: add("email")
            case .phoneInfo: add("phone")
            case .phoneOTP, .emailOTP: add("otpNotifier")
            case .nfcMRZ, .nfcPhase, .mdocPhase: add("document")
            case .passkeyCreation: add("token")
            case .faceMatching, .livenessPhase, .midSelfie: add("camera")
            case .attributeMatching where expected == nil: add("activationToken")
            default: break
            }
        }
        return out
    }
}
