import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// What `tessera enroll-station` prints: a line per enrollment notification (the chip read's progress through the
/// shared `ProgressRenderer`), or with --json one JSON object per line; errors and questions go to stderr.
final class StationRenderer {
    let json: Bool
    private let progress = ProgressRenderer(output: .standardOutput, prefix: "  chip: ", linesWhenNotTerminal: true)

    init(json: Bool) {
        self.json = json
    }

    /// Prints one enrollment notification; `stepCount` numbers completed steps.
    func render(_ n: RPCNotification, stepCount: Int) {
        if json {
            emit(["notification": .string(n.method), "params": n.params])
            return
        }
        let p = n.params
        if n.method != "enrollment.progress" { clearProgress() }
        switch n.method {
        case "enrollment.started":
            let steps = p["steps"]?.arrayValue ?? []
            let names = steps.compactMap { $0.stringValue ?? $0["key"]?.stringValue }
            line(
                "enrollment \(p["enrollmentId"]?.stringValue ?? "?") \(p["resumed"]?.boolValue == true ? "resumed" : "started"):"
                    + " workflow \(p["workflow"]?.stringValue ?? "?") (\(steps.count) steps: \(names.joined(separator: ", ")))"
            )
        case "enrollment.busy":
            let long = p["expectedInterval"]?.stringValue == "long"
            line("working on \(p["step"]?.stringValue ?? "?")\(long ? " (this can take a while)" : "")…")
        case "enrollment.idle":
            line("idle")
        case "enrollment.progress":
            progress.draw(p["progress"] ?? .null)
        case "enrollment.stepRequired":
            let prompt = p["prompt"]?.stringValue ?? ""
            var extras: [String] = []
            if let to = p["to"]?.stringValue, !prompt.contains(to) { extras.append("sent to \(to)") }
            if let exp = p["expiresAt"]?.stringValue {
                extras.append("valid until \(exp.split(separator: "T").last.map(String.init) ?? exp)")
            }
            if let left = p["attemptsLeft"]?.intValue { extras.append("\(left) attempt\(left == 1 ? "" : "s") left") }
            if let token = p["tokenId"]?.stringValue { extras.append("token \(token)") }
            if let left = p["retriesLeft"]?.intValue {
                extras.append("\(left) PIN retr\(left == 1 ? "y" : "ies") left")
            }
            line(
                "step \(p["key"]?.stringValue ?? "?")" + (prompt.isEmpty ? "" : ": \(prompt)")
                    + (extras.isEmpty ? "" : " (\(extras.joined(separator: ", ")))"))
        case "enrollment.stepCompleted":
            let index = p["index"]?.intValue.map { stepCount > 0 ? " (\($0 + 1)/\(stepCount))" : " (\($0 + 1))" } ?? ""
            line("done: \(p["key"]?.stringValue ?? "?")\(index)")
        case "enrollment.finished":
            renderFinished(p)
        default:
            line("\(n.method): \(String(decoding: p.serialized(), as: UTF8.self))")
        }
    }

    private func renderFinished(_ p: JSONValue) {
        let outcome = p["outcome"]?.stringValue ?? "?"
        switch outcome {
        case "success": line("enrollment succeeded")
        case "failedWithRetryPossibility": line("enrollment failed (retry possible)")
        default: line("enrollment \(outcome)")
        }
        if let e = p["error"], !e.isNull {
            line("  \(e["code"]?.stringValue ?? "?"): \(e["message"]?.stringValue ?? "")")
            for m in e["mismatches"]?.arrayValue ?? e["data"]?["mismatches"]?.arrayValue ?? [] {
                line(
                    "    \(m["attribute"]?.stringValue ?? "?"): expected \(Self.text(m["expected"])),"
                        + " document has \(Self.text(m["actual"]))")
            }
        }
        if let c = p["credential"], !c.isNull {
            line(
                "  passkey \(c["credentialId"]?.stringValue ?? "?") for \(c["rpId"]?.stringValue ?? "?")"
                    + " on token \(c["tokenId"]?.stringValue ?? "?")")
        }
        if let d = p["document"], !d.isNull {
            let name = [d["surname"]?.stringValue, d["givenNames"]?.stringValue].compactMap { $0 }.joined(
                separator: ", ")
            let pa = d["passiveAuthentication"]?["status"] ?? d["passiveAuthentication"]
            line(
                "  document \(d["documentType"]?.stringValue ?? "?") \(d["issuingState"]?.stringValue ?? "?")"
                    + " \(d["documentNumber"]?.stringValue ?? "?"): \(name)")
            line("  passive authentication: \(Self.text(pa))")
        }
    }

    private static func text(_ v: JSONValue?) -> String {
        guard let v, !v.isNull else { return "-" }
        return v.stringValue ?? String(decoding: v.serialized(), as: UTF8.self)
    }

    func clearProgress() {
        progress.clear()
    }

    /// A call's result with --json.
    func callResult(_ method: String, _ result: JSONValue) {
        if json { emit(["call": .string(method), "result": result]) }
    }

    /// A failed call: a JSON line with --json, else a line on stderr.
    func report(_ error: TesseraError, call method: String) {
        clearProgress()
        if json {
            var e: [String: JSONValue] = [
                "code": .string(error.code.rawValue), "message": .string(error.message),
                "retryable": .bool(error.retryable),
            ]
            for (k, v) in error.details { e[k] = v }
            emit(["call": .string(method), "error": .object(e)])
        } else {
            var text = "error: \(error.code.rawValue): \(error.message)"
            if let left = error.details["attemptsLeft"]?.intValue {
                text += " (\(left) attempt\(left == 1 ? "" : "s") left)"
            }
            if let field = error.details["field"]?.stringValue { text += " [field \(field)]" }
            if let id = error.details["enrollmentId"]?.stringValue { text += " (enrollment \(id))" }
            stderr(text + "\n")
        }
    }

    /// The last line with --json: the enrollment.finished params plus the exit status.
    func outcome(_ p: JSONValue, _ status: Int32) {
        guard json else { return }
        var o = p.objectValue ?? [:]
        o["exitStatus"] = .number(Double(status))
        emit(.object(o))
    }

    /// A status line (not with --json).
    func say(_ text: String) {
        if !json { line(text) }
    }

    func emit(_ value: JSONValue) {
        var bytes = value.serialized()
        bytes.append(UInt8(ascii: "\n"))
        try? OpenFile.standardOutput.write(bytes)
    }

    /// Unbuffered, so a reader on a pipe sees each line when it happens.
    func line(_ text: String) {
        OpenFile.standardOutput.write(text + "\n")
    }

    func stderr(_ text: String) {
        OpenFile.standardError.write(text)
    }
}
