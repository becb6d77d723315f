import FoundationEssentials

/// The helper programs Tessera ships beside the daemon (the reference face matcher, the reference MRZ reader).
enum ReferencePrograms {
    /// `name` next to the executable, in `../share/tessera/` from it, or in `matcher/` of the checkout of a build
    /// tree (`.build/<triple>/<config>/tesserad`), as an argv; nil when none is there.
    static func command(_ name: String, executable: String = CommandLine.arguments[0]) -> [String]? {
        let bin = URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent()
        for relative in [name, "../share/tessera/" + name, "../../../matcher/" + name] {
            let path = bin.appendingPathComponent(relative).standardizedFileURL.path
            if FileManager.default.isExecutableFile(atPath: path) { return [path] }
        }
        return nil
    }
}
