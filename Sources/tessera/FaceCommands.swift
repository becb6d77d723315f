import ArgumentParser
import FaceMatching
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera face`: the daemon's face matcher.
struct FaceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "face", abstract: "Face matching: run the daemon's face matcher on image files.",
        subcommands: [Compare.self])

    struct Compare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare probe photos with a reference photo using tesserad's face matcher (face.compare).",
            discussion: """
                Sends REFERENCE and each PROBE to tesserad's face matcher (faceMatching.command in its configuration, else the reference matcher shipped with Tessera) and prints its decision, its score (to administrators only: for anyone else it shows "-"), whether the daemon counts it as a match (the matcher's decision and faceMatching.threshold), the matcher's name and how long it took. Labs use it to tune the threshold on their own photos. A probe that is the reference itself (the same image, or a copy scoring above faceMatching.replayThreshold) is refused with FACE_REPLAY; one comparison per uid and two in all run at once (BUSY beyond). Images are JPEG, JPEG 2000 or PNG files; their media type is taken from their first bytes. Nothing is stored: the images exist only for the request. The request may be up to 16 MiB (about 12 MB of photos in all); a larger one is refused with FRAME_TOO_LARGE.

                With --challenge the probes are frames of a liveness challenge, in capture order, and the matcher also says whether they show the actions performed by the reference's face.

                Exit status: 0 when the daemon counts a match, 1 when not (no match, no face), 2 for daemon errors such as FACE_MATCHER_UNAVAILABLE, 3 when the daemon is unreachable.

                EXAMPLES
                  tessera face compare passport-portrait.jpg capture.jpg
                  tessera face compare --json dg2.jp2 frame1.jpg frame2.jpg
                  tessera face compare --challenge turnLeft,blink portrait.jpg f1.jpg f2.jpg f3.jpg f4.jpg
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(
            help: ArgumentHelp(
                "Liveness actions the probes should show, in order, comma-separated: turnLeft, turnRight, blink.",
                valueName: "ACTIONS"))
        var challenge: String?
        @Argument(help: ArgumentHelp("The reference photo (e.g. a document portrait).", valueName: "REFERENCE"))
        var reference: String
        @Argument(help: ArgumentHelp("One or more photos to compare with it.", valueName: "PROBE"))
        var probes: [String]

        func validate() throws {
            if probes.isEmpty { throw ValidationError("give at least one PROBE photo") }
        }

        func run() async throws {
            var params: [String: JSONValue] = [
                "reference": try Self.image(reference), "probes": .array(try probes.map(Self.image)),
            ]
            if let challenge {
                params["challenge"] = .array(challenge.split(separator: ",").map { .string(String($0)) })
            }
            let result = try await globals.call("face.compare", .object(params))
            let match = result["match"]?.boolValue == true
            if globals.json {
                print(String(decoding: result.serialized(), as: UTF8.self))
            } else {
                let score = result["score"].flatMap { v -> String? in
                    if case .number(let n) = v { return String(printf: "%.4f", n) }
                    return nil
                }
                var lines = [
                    "match     \(match ? "yes" : "no")",
                    "decision  \(result["decision"]?.stringValue ?? "?")",
                    "score     \(score ?? "-")",
                    "face      \(result["faceFound"]?.boolValue == true ? "found" : "not found")",
                    "matcher   \(result["matcher"]?.stringValue ?? "?")",
                    "time      \(result["elapsedMs"]?.intValue.map { "\($0) ms" } ?? "-")",
                ]
                if let liveness = result["liveness"] {
                    lines.append("liveness  \(liveness["passed"]?.boolValue == true ? "passed" : "failed")")
                }
                print(lines.joined(separator: "\n"))
            }
            if !match { throw ExitCode(1) }
        }

        static func image(_ path: String) throws -> JSONValue {
            do { return try faceImageFile(path) } catch { throw ValidationError(error.message) }
        }
    }
}

/// An image file as the face matcher takes it: `{mediaType, data}` (JPEG, JPEG 2000 or PNG, by its first bytes).
/// INVALID_INPUT when it cannot be read or is none of those.
func faceImageFile(_ path: String) throws(TesseraError) -> JSONValue {
    guard let data = FileManager.default.contents(atPath: path) else { throw .invalidInput("cannot read \(path)") }
    let bytes = [UInt8](data)
    guard let media = FaceImage.sniff(bytes) else {
        throw .invalidInput("\(path) is not a JPEG, JPEG 2000 or PNG image")
    }
    return FaceImage(mediaType: media, data: bytes).json
}
