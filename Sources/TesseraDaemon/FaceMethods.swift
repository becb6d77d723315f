import Enrollment
import FaceMatching
import FoundationEssentials
import Logging
import TesseraCore

extension FaceMatcherConfiguration {
    /// The reference matcher the daemon uses when `faceMatching.command` is not set: `tessera-face-match` next to
    /// the executable, in `../share/tessera/` from it, or `matcher/` of the checkout of a build tree
    /// (`.build/<triple>/<config>/tesserad`). nil when none exists.
    static func referenceMatcherCommand(executable: String = CommandLine.arguments[0]) -> [String]? {
        ReferencePrograms.command("tessera-face-match", executable: executable)
    }
}

/// The matchers `face.compare` runs at once: one per uid, `total` in all; BUSY beyond.
final class FaceCompareSlots: Sendable {
    private let running = Locked<[UInt32: Int]>([:])
    let total: Int

    init(total: Int = 2) { self.total = total }

    /// Takes a slot for `uid`, or BUSY (retryable).
    func acquire(_ uid: UInt32) throws(TesseraError) {
        let refusal: String? = running.withLock { r in
            if r[uid] != nil { return "a face comparison of this uid is running: retry when it ends" }
            if r.values.reduce(0, +) >= total { return "\(total) face comparisons are running: retry in a moment" }
            r[uid] = 1
            return nil
        }
        if let refusal { throw TesseraError(.busy, refusal) }
    }

    func release(_ uid: UInt32) {
        running.withLock { $0[uid] = nil }
    }
}

extension MethodTable {
    /// `face.compare` (docs/API.md): runs the daemon's face matcher directly, for labs tuning the threshold. The
    /// scores go to administrators only; a probe that is the reference is FACE_REPLAY.
    func registerFace(_ matcher: FaceMatcher?, slots: FaceCompareSlots = FaceCompareSlots()) {
        register("face.compare", .enroll) { [policy] p, connection in
            guard let matcher else {
                throw TesseraError(
                    .faceMatcherUnavailable,
                    "no face matcher: set faceMatching.command or install the reference matcher", retryable: false)
            }
            let reference = try FaceImage(json: p.value["reference"] ?? .null, field: "reference")
            guard let list = try p.optionalArray("probes"), (1...30).contains(list.count) else {
                throw TesseraError(.invalidInput, "probes must list 1…30 images", details: ["field": "probes"])
            }
            var probes: [FaceImage] = []
            for (i, item) in list.enumerated() { probes.append(try FaceImage(json: item, field: "probes[\(i)]")) }
            var challenge: [String]?
            if let actions = try p.optionalArray("challenge") {
                let names = actions.compactMap(\.stringValue)
                guard !names.isEmpty, names.count == actions.count, names.allSatisfy(StepKind.livenessActions.contains)
                else {
                    throw TesseraError(
                        .invalidInput, "challenge must list turnLeft, turnRight or blink",
                        details: ["field": "challenge"])
                }
                challenge = names
            }
            if probes.contains(where: { $0.isCopy(of: reference) }) {
                throw TesseraError(.faceReplay, "a probe is the reference image itself")
            }
            let uid = connection.peer.uid
            try slots.acquire(uid)
            defer { slots.release(uid) }
            let start = ContinuousClock.now
            let answer = try await matcher.compare(
                FaceMatchRequest(reference: reference, probes: probes, challenge: challenge))
            let elapsed = ContinuousClock.now - start
            if matcher.isReplay(answer) {
                throw TesseraError(.faceReplay, "a probe is a copy of the reference image")
            }
            var result = answer.json.objectValue ?? [:]
            if !policy.grants(.admin, to: connection.peer) {
                result["score"] = nil
                result["replayScore"] = nil
                if let liveness = result["liveness"]?.objectValue {
                    result["liveness"] = .object(liveness.filter { !$0.key.lowercased().contains("score") })
                }
            }
            result["match"] = .bool(matcher.isMatch(answer))
            result["matcher"] = .string(matcher.name)
            result["threshold"] = matcher.configuration.threshold.map { .number($0) } ?? .null
            result["elapsedMs"] = .number(
                Double(elapsed.components.seconds * 1000)
                    + Double(elapsed.components.attoseconds / 1_000_000_000_000_000))
            return .object(result)
        }
    }
}
