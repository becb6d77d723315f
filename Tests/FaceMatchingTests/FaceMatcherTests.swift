import FaceMatching
import FoundationEssentials
import Logging
import TesseraCore
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The matcher protocol and runner against real programs (sh scripts): a good answer, and every way a matcher can
/// fail, which must be FACE_MATCHER_UNAVAILABLE (retryable) and never a match.
@Suite struct FaceMatcherTests {
    static let logger = Logger(label: "face-matching-tests")

    /// A matcher script that keeps its stdin in `dir/request.json` and then runs `body`.
    static func matcher(_ body: String, in dir: String) throws -> String {
        let path = dir + "/matcher.sh"
        try "#!/bin/sh\ncat > \(dir)/request.json\n\(body)\n".write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        return path
    }

    static let request = FaceMatchRequest(
        reference: FaceImage(mediaType: "image/jpeg", data: [0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]),
        probes: [FaceImage(mediaType: "image/png", data: [0x89, 0x50, 0x4E, 0x47, 9])], challenge: ["blink"])

    @Test func answerAndRequestShape() async throws {
        let dir = Scratch.directory("face")
        let script = try Self.matcher(
            #"echo '{"decision":"match","score":0.61,"faceFound":true,"template":{"mediaType":"application/x-t","data":"AAEC"}}'"#,
            in: dir)
        let matcher = FaceMatcher(
            configuration: FaceMatcherConfiguration(command: [script], threshold: 0.5, timeoutSeconds: 5),
            logger: Self.logger)
        let answer = try await matcher.compare(Self.request)
        #expect(answer.decision == .match)
        #expect(answer.score == 0.61)
        #expect(answer.template == FaceImage(mediaType: "application/x-t", data: [0, 1, 2]))
        #expect(matcher.isMatch(answer))
        #expect(matcher.name == "matcher.sh")
        // What the program read: standard base64, the challenge's actions.
        let sent = try JSONValue.parse([UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/request.json"))))
        #expect(sent["reference"]?["mediaType"]?.stringValue == "image/jpeg")
        #expect(
            sent["reference"]?["data"]?.stringValue == Data([0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]).base64EncodedString())
        #expect(sent["probes"]?.arrayValue?.count == 1)
        #expect(sent["challenge"]?["actions"]?.arrayValue?.compactMap(\.stringValue) == ["blink"])
    }

    @Test func thresholdAppliesOnTopOfTheDecision() {
        let strict = FaceMatcher(
            configuration: FaceMatcherConfiguration(command: ["/bin/true"], threshold: 0.7), logger: Self.logger)
        #expect(!strict.isMatch(FaceMatchAnswer(decision: .match, score: 0.6, faceFound: true)))
        #expect(strict.isMatch(FaceMatchAnswer(decision: .match, score: 0.7, faceFound: true)))
        #expect(!strict.isMatch(FaceMatchAnswer(decision: .match, score: nil, faceFound: true)))
        #expect(!strict.isMatch(FaceMatchAnswer(decision: .noMatch, score: 0.9, faceFound: true)))
        let lenient = FaceMatcher(configuration: FaceMatcherConfiguration(command: ["/bin/true"]), logger: Self.logger)
        #expect(lenient.isMatch(FaceMatchAnswer(decision: .match, score: nil, faceFound: true)))
        #expect(!lenient.isMatch(FaceMatchAnswer(decision: .match, score: 1, faceFound: false)))
    }

    @Test(arguments: [
        ("crash", "kill -SEGV $$"),
        ("exit status", "echo '{\"decision\":\"match\",\"score\":1,\"faceFound\":true}'; exit 2"),
        ("garbage", "echo 'I am not JSON'"),
        ("no decision", "echo '{\"score\":1,\"faceFound\":true}'"),
        ("unknown decision", "echo '{\"decision\":\"maybe\",\"score\":1,\"faceFound\":true}'"),
        ("error decision", "echo '{\"decision\":\"error\",\"score\":null,\"faceFound\":false}'"),
        ("bad liveness", "echo '{\"decision\":\"match\",\"score\":1,\"faceFound\":true,\"liveness\":{}}'"),
        ("timeout", "sleep 120"),
    ])
    func failingMatcherIsUnavailable(name: String, body: String) async throws {
        let dir = Scratch.directory("face")
        let script = try Self.matcher(body, in: dir)
        let matcher = FaceMatcher(
            configuration: FaceMatcherConfiguration(command: [script], timeoutSeconds: 1), logger: Self.logger)
        let start = ContinuousClock.now
        do {
            _ = try await matcher.compare(Self.request)
            Issue.record("\(name): a failing matcher gave an answer")
        } catch {
            #expect(error.code == .faceMatcherUnavailable, "\(name)")
            #expect(error.retryable, "\(name)")
        }
        // The timeout killed the program: far sooner than its 120 s sleep, even on a loaded machine.
        #expect(ContinuousClock.now - start < .seconds(60), "\(name)")
    }

    @Test func missingProgramIsUnavailable() async {
        let matcher = FaceMatcher(
            configuration: FaceMatcherConfiguration(command: ["/nonexistent/tessera-face-match"]), logger: Self.logger)
        await #expect(throws: TesseraError.self) { _ = try await matcher.compare(Self.request) }
        do { _ = try await matcher.compare(Self.request) } catch { #expect(error.code == .faceMatcherUnavailable) }
    }

    @Test func configuration() throws {
        let c = try #require(
            try FaceMatcherConfiguration(
                json: ["command": ["/usr/bin/m", "--x"], "threshold": 0.4, "timeoutSeconds": 5], defaultCommand: nil))
        #expect(c.command == ["/usr/bin/m", "--x"])
        #expect(c.threshold == 0.4)
        #expect(c.timeout == .seconds(5))
        #expect(c.replayThreshold == 0.95 && c.maxAttempts == 5)
        let strict = try #require(
            try FaceMatcherConfiguration(
                json: ["replayThreshold": 0.9, "maxAttempts": 2], defaultCommand: ["/ref"]))
        #expect(strict.replayThreshold == 0.9 && strict.maxAttempts == 2)
        #expect(try FaceMatcherConfiguration(json: nil, defaultCommand: nil) == nil)
        #expect(try FaceMatcherConfiguration(json: nil, defaultCommand: ["/ref"])?.command == ["/ref"])
        for bad: JSONValue in [
            ["command": []], ["command": "m"], ["threshold": "x", "command": ["m"]],
            ["timeoutSeconds": 0, "command": ["m"]],
            ["other": 1], ["threshold": 0.5], "x", ["maxAttempts": 0, "command": ["m"]],
            ["maxAttempts": 2.5, "command": ["m"]], ["replayThreshold": "high", "command": ["m"]], ["maxAttempts": 3],
        ] {
            #expect(throws: TesseraError.self) { _ = try FaceMatcherConfiguration(json: bad, defaultCommand: nil) }
        }
    }

    /// A resident matcher (`resident: true`): one program answers request after request (its pid stays), the
    /// request it dies on is FACE_MATCHER_UNAVAILABLE and the next one starts it again, and it is stopped when idle.
    @Test func residentMatcherOneProgramRestartedAfterACrashStoppedWhenIdle() async throws {
        let dir = Scratch.directory("face")
        let path = dir + "/resident.sh"
        // Each request's line appends the program's pid to `pids`; the third request of a program kills it.
        try """
        #!/bin/sh
        n=0
        while read -r line; do
            n=$((n + 1))
            echo $$ >> \(dir)/pids
            case "$line" in *'"reference"'*) ;; *) exit 9 ;; esac
            [ $n -eq 3 ] && kill -KILL $$
            echo '{"decision":"match","score":0.7,"faceFound":true}'
        done
        """.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        let configuration = try #require(
            try FaceMatcherConfiguration(
                json: ["command": [.string(path)], "resident": true, "idleSeconds": 1, "timeoutSeconds": 10],
                defaultCommand: nil))
        let matcher = FaceMatcher(configuration: configuration, logger: Self.logger)
        func pids() throws -> [String] {
            try String(contentsOfFile: dir + "/pids", encoding: .utf8).split(separator: "\n").map(String.init)
        }
        for _ in 0..<2 { #expect(try await matcher.compare(Self.request).decision == .match) }
        #expect(try pids().count == 2 && Set(try pids()).count == 1)
        do {
            _ = try await matcher.compare(Self.request)
            Issue.record("the request the matcher died on gave an answer")
        } catch {
            #expect(error.code == .faceMatcherUnavailable && error.retryable)
        }
        #expect(try await matcher.compare(Self.request).decision == .match)
        let afterCrash = try pids()
        #expect(afterCrash.count == 4 && afterCrash[3] != afterCrash[0])
        // Idle for 1 s: stopped (its pid gone), and the next request starts it again.
        let deadline = ContinuousClock.now + .seconds(15)
        while FileManager.default.fileExists(atPath: "/proc/\(afterCrash[3])"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(!FileManager.default.fileExists(atPath: "/proc/\(afterCrash[3])"))
        #expect(try await matcher.compare(Self.request).decision == .match)
        #expect(try pids().last != afterCrash[3])
        await matcher.stop()
    }

    @Test func residentConfiguration() throws {
        let oneShot = try #require(try FaceMatcherConfiguration(json: ["command": ["/m"]], defaultCommand: ["/ref"]))
        #expect(oneShot.residentCommand == nil)
        let resident = try #require(
            try FaceMatcherConfiguration(json: ["command": ["/m"], "resident": true], defaultCommand: nil))
        #expect(resident.residentCommand == ["/m"] && resident.idleTimeout == .seconds(300))
        // The reference matcher (no command) is resident by default, with --resident; `resident: false` opts out.
        let reference = try #require(try FaceMatcherConfiguration(json: nil, defaultCommand: ["/ref"]))
        #expect(reference.residentCommand == ["/ref", "--resident"] && reference.command == ["/ref"])
        let referenceOneShot = try #require(
            try FaceMatcherConfiguration(json: ["resident": false, "idleSeconds": 20], defaultCommand: ["/ref"]))
        #expect(referenceOneShot.residentCommand == nil && referenceOneShot.idleTimeout == .seconds(20))
        for bad: JSONValue in [
            ["command": ["m"], "resident": "yes"], ["command": ["m"], "idleSeconds": 0],
            ["command": ["m"], "idleSeconds": 1.5],
        ] {
            #expect(throws: TesseraError.self) { _ = try FaceMatcherConfiguration(json: bad, defaultCommand: nil) }
        }
    }

    @Test func imageCodec() throws {
        #expect(FaceImage.decodeBase64("AAEC") == [0, 1, 2])
        #expect(FaceImage.decodeBase64("-_8") == [0xFB, 0xFF])
        #expect(FaceImage.decodeBase64("+/8=") == [0xFB, 0xFF])
        #expect(FaceImage.decodeBase64("A") == nil)
        #expect(FaceImage.decodeBase64("!!!!") == nil)
        #expect(FaceImage.sniff([0xFF, 0xD8, 0xFF, 0xE0]) == "image/jpeg")
        #expect(FaceImage.sniff([0, 0, 0, 0x0C, 0x6A, 0x50, 0x20, 0x20, 0x0D]) == "image/jp2")
        #expect(FaceImage.sniff([1, 2, 3]) == nil)
        #expect(throws: TesseraError.self) {
            _ = try FaceImage(json: ["mediaType": "image/jpeg", "data": ""], field: "x")
        }
        #expect(throws: TesseraError.self) { _ = try FaceImage(json: ["data": "AAEC"], field: "x") }
        #expect(
            FaceMatchAnswer(output: Array(#"{"decision":"noFace","score":null,"faceFound":false}"#.utf8))?.decision
                == .noFace)
    }

    @Test func replayScoreOrScoreAboveTheReplayThreshold() throws {
        let matcher = FaceMatcher(configuration: FaceMatcherConfiguration(command: ["/bin/true"]), logger: Self.logger)
        let copy = try #require(
            FaceMatchAnswer(
                output: Array(#"{"decision":"match","score":0.86,"replayScore":0.99,"faceFound":true}"#.utf8)))
        #expect(copy.replayScore == 0.99)
        #expect(matcher.isReplay(copy))
        #expect(matcher.isMatch(copy))
        let live = FaceMatchAnswer(decision: .match, score: 0.6, faceFound: true, replayScore: 0.41)
        #expect(!matcher.isReplay(live))
        // A matcher without a replay score: its score decides.
        #expect(matcher.isReplay(FaceMatchAnswer(decision: .match, score: 0.97, faceFound: true)))
        #expect(!matcher.isReplay(FaceMatchAnswer(decision: .noFace, score: nil, faceFound: false)))
        #expect(FaceMatchAnswer(output: Array(#"{"decision":"match","replayScore":"x","faceFound":true}"#.utf8)) == nil)
    }

    @Test func aCopyIsTheSameBytesOrTheSamePixelsWithOtherMetadata() {
        // SOI, APP0 (JFIF), DQT, SOS with its entropy-coded data, EOI.
        let app0: [UInt8] = [0xFF, 0xE0, 0x00, 0x06, 0x4A, 0x46, 0x49, 0x46]
        let dqt: [UInt8] = [0xFF, 0xDB, 0x00, 0x04, 0x01, 0x02]
        let scan: [UInt8] = [0xFF, 0xDA, 0x00, 0x03, 0x00, 0x11, 0x22, 0x33, 0xFF, 0xD9]
        let jpeg = FaceImage(mediaType: "image/jpeg", data: [0xFF, 0xD8] + app0 + dqt + scan)
        let comment: [UInt8] = [0xFF, 0xFE, 0x00, 0x05, 0x61, 0x62, 0x63]
        let exif: [UInt8] = [0xFF, 0xE1, 0x00, 0x04, 0x45, 0x78]
        let recommented = FaceImage(mediaType: "image/jpeg", data: [0xFF, 0xD8] + exif + dqt + comment + scan)
        #expect(jpeg.isCopy(of: jpeg))
        #expect(recommented.isCopy(of: jpeg))
        var otherPixels = jpeg
        otherPixels.data[otherPixels.data.count - 4] ^= 1
        #expect(!otherPixels.isCopy(of: jpeg))
        var otherTables = jpeg
        otherTables.data[2 + app0.count + 5] ^= 1
        #expect(!otherTables.isCopy(of: jpeg))
        // PNG: IHDR and IDAT are the picture; tEXt is not.
        func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
            [0, 0, 0, UInt8(body.count)] + Array(type.utf8) + body + [0, 0, 0, 0]
        }
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        let png = FaceImage(
            mediaType: "image/png",
            data: signature + chunk("IHDR", [1, 2]) + chunk("IDAT", [3, 4]) + chunk("IEND", []))
        let tagged = FaceImage(
            mediaType: "image/png",
            data: signature + chunk("IHDR", [1, 2]) + chunk("tEXt", [5]) + chunk("IDAT", [3, 4]) + chunk("IEND", []))
        #expect(tagged.isCopy(of: png))
        #expect(!FaceImage(mediaType: "image/png", data: signature + chunk("IDAT", [3, 5])).isCopy(of: png))
        // Truncated or foreign data is compared byte for byte only.
        #expect(!FaceImage(mediaType: "image/jpeg", data: [0xFF, 0xD8, 0xFF]).isCopy(of: jpeg))
    }
}
