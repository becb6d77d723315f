import TesseraCore

/// The text of a `documents.progress` event (docs/API.md), shared by `tessera passport read` and
/// `tessera enroll-station`: pure, no I/O.
public enum ProgressText {
    public static let barWidth = 30

    /// `key` changes with the phase or file (a new line when output is not redrawn in place); `text` is the step,
    /// or "reading FILE" with a `[###...] done/total bytes` bar when `bar` is set and the total is known.
    public static func describe(_ event: JSONValue, bar: Bool) -> (key: String, text: String) {
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
