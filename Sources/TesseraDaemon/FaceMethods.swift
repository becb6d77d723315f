import Enrollment
import FaceMatching
import Foundation
import Logging
import TesseraCore

extension FaceMatcherConfiguration {
    /// The reference matcher the daemon uses when `faceMatching.command` is not set: `tessera-face-match` next to
    /// the executable, in `../share/tessera/` from it, or `matcher/` of the checkout of a build tree
    /// (`.build/<triple>/<config>/tesserad`). nil when none exists.
    static func referenceMatcherCommand(executable: String = CommandLine.arguments[0]) -> [String]? {
        let resolved = URL(fileURLWithPath: executable).resolvingSymlinksInPath()
        let bin = resolved.deletingLastPathComponent()
        let candidates = [
            bin.appendingPathComponent("tessera-face-match"),
            bin.appendingPathComponent("../share/tessera/tessera-face-match"),
            bin.appendingPathComponent("../../../matcher/tessera-face-match"),
        ]
        for url in candidates {
            let path = url.standardizedFileURL.path
            if FileManager.default.isExecutableFile(atPath: path) { return [path] }
        }
        return nil
    }
}

extension MethodTable {
    /// `face.compare` (docs/API.md): runs the daemon's face matcher directly, for labs tuning the threshold.
    func registerFace(_ matcher: FaceMatcher?) {
        register("face.compare", .enroll) { p, _ in
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
            let start = ContinuousClock.now
            let answer = try await matcher.compare(
                FaceMatchRequest(reference: reference, probes: probes, challenge: challenge))
            let elapsed = ContinuousClock.now - start
            var result = answer.json.objectValue ?? [:]
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
