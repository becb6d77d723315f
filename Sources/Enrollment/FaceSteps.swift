import CBOR
import CredentialStore
import FaceMatching
import FoundationEssentials
import MDoc
import TesseraCore

/// FACE_MATCHING, the LIVENESS_CHALLENGE steps and MID_SELFIE_MATCHING (docs/ENROLLMENT.md, "Face matching").
/// Captured images live only for the submission that carries them: they go to the matcher's stdin and are never
/// stored or logged. The verified portrait is kept in memory only (`portraits`), never in the database; the
/// enrollment keeps the challenge, and for the audit each decision, score and the matcher's name.
extension EnrollmentEngine {
    /// Frames one submission may carry.
    static let maxFaceImages = 10
    static let maxLivenessFrames = 30

    /// The portrait of a document read in this flow, as the enrollment keeps it.
    static func portraitData(_ image: FaceImage) -> JSONValue { image.json }

    /// Requests `portrait` from an mDL when the workflow matches faces.
    func mdocElementsWithPortrait(_ step: WorkflowStep) -> [String: [String]] {
        var elements = Self.mdocElements(step)
        if steps.contains(where: { StepKind.faceKinds.contains($0.kind) }),
            !(elements[MDL.namespace]?.contains("portrait") ?? false)
        {
            elements[MDL.namespace, default: []].append("portrait")
        }
        return elements
    }

    /// The mDL's portrait as the face steps' reference (nil when the workflow has none or the mDL sent none).
    func mdocPortrait(_ verification: MDocVerification) -> [String: JSONValue] {
        guard steps.contains(where: { StepKind.faceKinds.contains($0.kind) }),
            case .byteString(let bytes)? = verification.element("portrait"), !bytes.isEmpty
        else { return [:] }
        let image = FaceImage(mediaType: FaceImage.sniff(bytes) ?? "image/jpeg", data: bytes)
        return ["facePortrait": Self.portraitData(image)]
    }

    /// DG2's first face image as the face steps' reference (nil when the workflow has none).
    func dg2Portrait(_ images: [(mimeType: String, data: [UInt8])]) -> [String: JSONValue] {
        guard steps.contains(where: { StepKind.faceKinds.contains($0.kind) }), let first = images.first else {
            return [:]
        }
        return ["facePortrait": Self.portraitData(FaceImage(mediaType: first.mimeType, data: first.data))]
    }

    func beginFaceStep(_ step: WorkflowStep) throws(TesseraError) -> StepResult {
        guard faceMatcher != nil else {
            throw TesseraError(.candidateUnavailable, "this station has no face matcher")
        }
        if [.faceMatching, .livenessPhase].contains(step.kind), let row, portraits[row.id] == nil {
            throw TesseraError(
                .faceNotFound,
                "the document's portrait is not kept across a daemon restart: retry reads the document again",
                retryable: true, details: ["reason": "portraitNotKept"])
        }
        switch step.kind {
        case .livenessSession:
            return .completed(["livenessChallenge": .array(Self.livenessChallenge(step).map { .string($0) })])
        case .livenessPhase:
            let challenge = row?.data["livenessChallenge"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let names = [
                "turnLeft": "turn your head to the left", "turnRight": "turn your head to the right",
                "blink": "blink",
            ]
            return .needsInput(
                StepRequest(
                    key: step.key,
                    prompt: "Look at the camera, then "
                        + challenge.map { names[$0] ?? $0 }.joined(separator: ", then "),
                    input: Self.imagesSchema(max: Self.maxLivenessFrames),
                    extra: ["challenge": .array(challenge.map { .string($0) })]))
        case .midSelfie:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: "Look at the camera", input: Self.imagesSchema(max: Self.maxFaceImages)))
        default:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: "Look at the camera: your face is compared with the document's portrait",
                    input: Self.imagesSchema(max: Self.maxFaceImages)))
        }
    }

    /// A challenge of `length` actions (default 3) drawn with the system CSPRNG from the step's `actions`
    /// (default turnLeft, turnRight, blink), no action twice in a row.
    static func livenessChallenge(_ step: WorkflowStep) -> [String] {
        let pool = step.settings["actions"]?.arrayValue?.compactMap(\.stringValue) ?? StepKind.livenessActions
        let length = step.settings["length"]?.intValue ?? 3
        var rng = SystemRandomNumberGenerator()
        var out: [String] = []
        while out.count < length {
            let candidates = pool.count > 1 ? pool.filter { $0 != out.last } : pool
            out.append(candidates.randomElement(using: &rng) ?? pool[0])
        }
        return out
    }

    static func imagesSchema(max: Int) -> JSONValue {
        schema([
            "images": [
                "type": "array", "minItems": 1, "maxItems": .number(Double(max)),
                "items": [
                    "type": "object", "required": ["mediaType", "data"],
                    "properties": [
                        "mediaType": ["type": "string", "enum": ["image/jpeg", "image/jp2", "image/png"]],
                        "data": ["type": "string", "contentEncoding": "base64"],
                    ],
                ],
            ]
        ])
    }

    /// `{images: [{mediaType, data}]}` of a submission.
    static func images(_ payload: JSONValue, max: Int) throws(TesseraError) -> [FaceImage] {
        guard let list = payload["images"]?.arrayValue, !list.isEmpty else {
            throw TesseraError(.invalidInput, "images must be a non-empty array", details: ["field": "images"])
        }
        guard list.count <= max else {
            throw TesseraError(.invalidInput, "at most \(max) images", details: ["field": "images"])
        }
        var out: [FaceImage] = []
        for (i, item) in list.enumerated() { out.append(try FaceImage(json: item, field: "images[\(i)]")) }
        return out
    }

    func handleFaceInput(_ step: WorkflowStep, payload: JSONValue) async throws(TesseraError) -> StepResult {
        guard let matcher = faceMatcher, let current = row else {
            throw TesseraError(.candidateUnavailable, "this station has no face matcher")
        }
        let isLiveness = step.kind == .livenessPhase
        let probes = try Self.images(payload, max: isLiveness ? Self.maxLivenessFrames : Self.maxFaceImages)
        var challenge: [String]?
        let reference: FaceImage
        var binding: (text: String, identity: DocumentIdentity)?
        if step.kind == .midSelfie {
            guard let summary = current.data["document"], summary["verdict"]?.stringValue == "authentic",
                let identity = DocumentIdentity(summary: summary)
            else {
                throw TesseraError(.faceTemplateNotFound, "MID_SELFIE_MATCHING needs an authentic document read first")
            }
            guard let kept = try await keptTemplate(for: identity) else {
                throw TesseraError(.faceTemplateNotFound, "no face template is kept for this person")
            }
            reference = FaceImage(mediaType: kept.mediaType, data: [UInt8](kept.template))
        } else {
            guard let portrait = portraits[current.id] else {
                throw TesseraError(.internalError, "\(step.key) runs before a portrait was read")
            }
            reference = portrait
            if isLiveness {
                challenge = current.data["livenessChallenge"]?.arrayValue?.compactMap(\.stringValue) ?? []
            }
            if step.settings["keepTemplate"]?.boolValue == true, let summary = current.data["document"],
                summary["verdict"]?.stringValue == "authentic", let identity = DocumentIdentity(summary: summary)
            {
                binding = (IdentityBinding(identity: identity, secret: secret, enrollmentId: current.id).text, identity)
            }
        }
        // Comparisons this step ran in this enrollment (retries included): the audit's face checks.
        let used = (current.faceChecks?.arrayValue ?? []).filter { $0["step"]?.stringValue == step.key }.count
        let maxAttempts = matcher.configuration.maxAttempts
        guard used < maxAttempts else { throw Self.attemptsExceeded(step, maxAttempts) }
        let last = used + 1 == maxAttempts
        var check: [String: JSONValue] = [
            "step": .string(step.key), "matcher": .string(matcher.name), "at": .string(clock().iso8601Seconds),
        ]
        if let challenge { check["challenge"] = .array(challenge.map { .string($0) }) }
        // A capture that is the portrait itself (the bytes the chip gave, or its pixels with other metadata) never
        // reaches the matcher.
        let portrait = portraits[current.id]
        if probes.contains(where: { $0.isCopy(of: reference) || (portrait.map($0.isCopy(of:)) ?? false) }) {
            check["decision"] = "replay"
            check["identicalImage"] = true
            try await recordFaceCheck(.object(check))
            logger.warning(
                "face capture is the reference image",
                metadata: ["enrollment": "\(current.id)", "step": "\(step.key)"])
            throw Self.replay(step)
        }
        await emit("enrollment.busy", event(["expectedInterval": "short", "step": .string(step.key)]))
        let answer = try await matcher.compare(
            FaceMatchRequest(reference: reference, probes: probes, challenge: challenge))
        let replayed = matcher.isReplay(answer)
        let matched = matcher.isMatch(answer)
        let livenessPassed = !isLiveness || answer.liveness?["passed"]?.boolValue == true
        check["decision"] = .string(replayed ? "replay" : answer.decision.rawValue)
        check["matcherDecision"] = .string(answer.decision.rawValue)
        check["score"] = answer.score.map { .number($0) } ?? .null
        check["replayScore"] = answer.replayScore.map { .number($0) } ?? .null
        if isLiveness { check["livenessPassed"] = .bool(livenessPassed) }
        try await recordFaceCheck(.object(check))
        // The score stays in the audit: neither the log nor any answer says how close a face came.
        logger.info(
            "face matcher decision",
            metadata: [
                "enrollment": "\(current.id)", "step": "\(step.key)", "matcher": "\(matcher.name)",
                "decision": "\(replayed ? "replay" : answer.decision.rawValue)",
            ])
        if replayed { throw Self.replay(step) }
        let left: [String: JSONValue] = ["attemptsLeft": .number(Double(maxAttempts - used - 1))]
        guard answer.faceFound, answer.decision != .noFace else {
            if last { throw Self.attemptsExceeded(step, maxAttempts) }
            throw TesseraError(
                .faceNotFound, "no face was found in the capture; look at the camera and try again", details: left)
        }
        guard matched else {
            if last { throw Self.attemptsExceeded(step, maxAttempts) }
            var details = left
            details["matcher"] = .string(matcher.name)
            throw TesseraError(
                .faceMismatch,
                "the face does not match the \(step.kind == .midSelfie ? "kept template" : "document's portrait")",
                details: details)
        }
        guard livenessPassed else {
            if last { throw Self.attemptsExceeded(step, maxAttempts) }
            var details = left
            details["liveness"] = Self.livenessVerdict(answer.liveness)
            throw TesseraError(.livenessFailed, "the frames do not show the challenge performed", details: details)
        }
        if let binding {
            guard let template = answer.template else {
                throw TesseraError(
                    .faceMatcherUnavailable, "the face matcher \(matcher.name) returned no template to keep",
                    retryable: true)
            }
            try await faceTemplates?.add(
                FaceTemplateRecord(
                    id: UUID().uuidString.lowercased(), identityBinding: binding.text, mediaType: template.mediaType,
                    template: template.data, matcher: matcher.name, enrollmentId: current.id, createdAt: clock()))
        }
        var result: [String: JSONValue] = ["matched": true, "matcher": .string(matcher.name)]
        if let challenge { result["challenge"] = .array(challenge.map { .string($0) }) }
        if binding != nil { result["templateKept"] = true }
        var all = current.data["faceMatching"]?.objectValue ?? [:]
        all[step.key] = .object(result)
        return .completed(["faceMatching": .object(all)])
    }

    static func replay(_ step: WorkflowStep) -> TesseraError {
        TesseraError(
            .faceReplay,
            "the capture is a copy of the \(step.kind == .midSelfie ? "kept face" : "document's portrait"), not a live face"
        )
    }

    static func attemptsExceeded(_ step: WorkflowStep, _ max: Int) -> TesseraError {
        TesseraError(
            .faceAttemptsExceeded, "\(step.key) compared \(max) captures without a match: the enrollment ends",
            details: ["maxAttempts": .number(Double(max))])
    }

    /// The matcher's liveness verdict without its scores (the actions and the frames that showed them).
    static func livenessVerdict(_ liveness: JSONValue?) -> JSONValue {
        guard var o = liveness?.objectValue else { return .null }
        o = o.filter { !$0.key.lowercased().contains("score") }
        return .object(o)
    }

    /// The newest template kept for the person of `identity` (same names, birth date and issuing state).
    func keptTemplate(for identity: DocumentIdentity) async throws(TesseraError) -> FaceTemplateRecord? {
        guard let faceTemplates else { return nil }
        return try await faceTemplates.all().first { record in
            IdentityBinding(text: record.identityBinding)?.isSamePerson(identity, secret: secret) ?? false
        }
    }

    /// Adds a matcher decision to the enrollment's audit (`faceChecks`), committed before the caller hears it.
    func recordFaceCheck(_ check: JSONValue) async throws(TesseraError) {
        guard var current = row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        current.faceChecks = .array((current.faceChecks?.arrayValue ?? []) + [check])
        current.updatedAt = clock()
        try await commit(current)
    }
}
