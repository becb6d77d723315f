import APDU
import FoundationEssentials
import TesseraCore

/// A card that answers from a script of command → response rules (for testing readers and apps).
///
/// Script format (UTF-8 text, one rule per line, `#` starts a comment):
///
///     00A4040C07A0000002471001 => 9000      exact command
///     00B0 *                   => 0102 9000 every command starting with 00 B0
///     *                        => 6D00      every command (a catch-all)
///
/// Hex digits may be separated by spaces. The first matching rule wins; a command no rule matches is answered
/// with 6D00 (instruction not supported). A response must hold at least the status word.
public struct ScriptedCard: VirtualCard {
    public struct Rule: Sendable, Equatable {
        /// The command bytes, or the prefix when `isPrefix`.
        public var command: [UInt8]
        public var isPrefix: Bool
        public var response: [UInt8]

        public func matches(_ apdu: [UInt8]) -> Bool {
            isPrefix ? apdu.starts(with: command) : apdu == command
        }
    }

    public let rules: [Rule]

    public init(rules: [Rule]) { self.rules = rules }

    /// Parses a script; INVALID_INPUT names the first bad line.
    public init(script: String) throws(TesseraError) {
        var rules: [Rule] = []
        for (index, raw) in script.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            if line.allSatisfy(\.isWhitespace) { continue }
            let parts = line.components(separatedBy: "=>")
            guard parts.count == 2 else {
                throw TesseraError(.invalidInput, "script line \(index + 1): expected COMMAND => RESPONSE")
            }
            var pattern = parts[0].filter { !$0.isWhitespace }
            let isPrefix = pattern.hasSuffix("*")
            if isPrefix { pattern.removeLast() }
            guard let command = Self.hex(pattern), let response = Self.hex(parts[1].filter { !$0.isWhitespace }),
                response.count >= 2
            else {
                throw TesseraError(
                    .invalidInput,
                    "script line \(index + 1): hex command and a response of at least "
                        + "a status word expected")
            }
            rules.append(Rule(command: command, isPrefix: isPrefix, response: response))
        }
        self.rules = rules
    }

    /// Reads and parses the script at `path`.
    public static func load(path: String) throws(TesseraError) -> ScriptedCard {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError(.invalidInput, "cannot read script \(path)")
        }
        return try ScriptedCard(script: String(decoding: data, as: UTF8.self))
    }

    public var atr: [UInt8] { get async { [0x3B, 0x80, 0x80, 0x01, 0x01] } }
    public func powerOn() async {}
    public func powerOff() async {}
    public func reset() async {}

    public func process(_ command: [UInt8]) async -> [UInt8] {
        rules.first { $0.matches(command) }?.response ?? [0x6D, 0x00]
    }

    private static func hex(_ text: String) -> [UInt8]? {
        guard text.count.isMultiple(of: 2) else { return nil }
        var out: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { return nil }
            out.append(byte)
            index = next
        }
        return out
    }
}
