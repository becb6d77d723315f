import TesseraCore

/// The text of a `documents.progress` or `mdoc.progress` event (docs/API.md), shared by `tessera passport read`,
/// `tessera mdoc read` and `tessera enroll-station`: pure, no I/O.
public enum ProgressText {
    public static let barWidth = 30

    /// `key` changes with the phase or file (a new line when output is not redrawn in place); `text` is the step,
    /// or "reading FILE" with a `[###...] done/total bytes` bar when `bar` is set and the total is known.
    /// An `mdoc.progress` event (`phase`, `apdus`, `bytes`) is "mdoc PHASE" with the exchange so far.
    public static func describe(_ event: JSONValue, bar: Bool) -> (key: String, text: String) {
        if let phase = event["phase"]?.stringValue {
            let apdus = event["apdus"]?.intValue ?? 0, bytes = event["bytes"]?.intValue ?? 0
            return (phase, "mdoc \(phase) (\(apdus) APDUs, \(bytes) bytes)")
        }
        let step = event["step"]?.stringValue ?? ""
        guard let file = event["file"]?.stringValue else { return (step, step) }
        var text = "reading \(file)"
        if bar, let total = event["totalBytes"]?.intValue, total > 0 {
            let done = event["bytesRead"]?.intValue ?? 0
            let filled = max(0, min(barWidth, done * barWidth / total))
            text +=
                " [" + String(repeating: "#", count: filled) + String(repeating: ".", count: barWidth - filled)
                + "] \(done)/\(total) bytes"
        }
        return (step + " " + file, text)
    }
}
