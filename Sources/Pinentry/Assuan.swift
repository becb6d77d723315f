/// The Assuan line protocol as pinentry speaks it to gpg-agent (pure: no I/O).
///
/// Requests are one line each (`COMMAND args`); the server answers a request with any number of data (`D`), status
/// (`S`) and comment (`#`) lines and then `OK [text]` or `ERR code [text]`. Data and arguments escape `%`, CR and LF
/// (and here every other control character) as `%XX`. A line is at most 1000 bytes.
public enum Assuan {
    /// The longest line, the newline included (libassuan's `ASSUAN_LINELENGTH`).
    public static let maxLineBytes = 1000

    /// GPG_ERR_CANCELED: the user pressed Cancel (pinentry answers `ERR 83886179 Operation cancelled`).
    public static let errorCancelled: UInt32 = 99
    /// GPG_ERR_NOT_CONFIRMED: Cancel pressed at a CONFIRM.
    public static let errorNotConfirmed: UInt32 = 114
    /// GPG_ERR_TIMEOUT: the pinentry's own SETTIMEOUT ran out.
    public static let errorTimeout: UInt32 = 62

    /// One line from the server.
    public enum Response: Sendable, Equatable {
        case ok(String)
        /// `code` as sent (gpg error source in the high bits, the error in the low 16).
        case error(code: UInt32, text: String)
        /// A `D` line, unescaped.
        case data([UInt8])
        case status(keyword: String, text: String)
        case comment
        /// `INQUIRE keyword`: the server wants data from the client (pinentry never asks for any here).
        case inquire(String)

        /// Ends a request's answer.
        public var isTerminal: Bool {
            switch self {
            case .ok, .error: true
            default: false
            }
        }
    }

    /// `%XX` for `%`, every control character and DEL; the rest as is.
    public static func escape(_ text: String) -> String {
        String(decoding: escapeBytes(text), as: UTF8.self)
    }

    /// Undoes `%XX`; nil for a malformed escape.
    public static func unescape<S: Sequence>(_ bytes: S) -> [UInt8]? where S.Element == UInt8 {
        var out: [UInt8] = []
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                out.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            out.append(high << 4 | low)
        }
        return out
    }

    /// A request line (without its newline): `command` and its escaped argument, cut so the line fits
    /// `maxLineBytes` without splitting an escape or a UTF-8 sequence.
    public static func request(_ command: String, _ argument: String? = nil) -> String {
        guard let argument, !argument.isEmpty else { return command }
        let budget = maxLineBytes - 1 - command.utf8.count - 1
        var escaped: [UInt8] = []
        for scalar in argument.unicodeScalars {
            let piece = escapeBytes(String(scalar))
            if escaped.count + piece.count > budget { break }
            escaped += piece
        }
        return command + " " + String(decoding: escaped, as: UTF8.self)
    }

    /// Parses one response line (without its newline); nil for a line that is none of the forms.
    public static func parse(_ line: some StringProtocol) -> Response? {
        let bytes = Array(line.utf8)
        let (word, rest) = split(bytes)
        switch word {
        case "OK": return .ok(String(decoding: rest, as: UTF8.self))
        case "ERR":
            let (code, text) = split(rest)
            guard let value = UInt32(code) else { return nil }
            return .error(code: value, text: String(decoding: text, as: UTF8.self))
        case "D":
            return unescape(rest).map { Response.data($0) }
        case "S":
            let (keyword, text) = split(rest)
            return .status(keyword: keyword, text: String(decoding: text, as: UTF8.self))
        case "#": return .comment
        case "INQUIRE":
            let (keyword, _) = split(rest)
            return .inquire(keyword)
        default:
            return bytes.first == UInt8(ascii: "#") ? .comment : nil
        }
    }

    /// The low 16 bits of an `ERR` code: the gpg error without its source.
    public static func errorCode(_ code: UInt32) -> UInt32 { code & 0xFFFF }

    private static func escapeBytes(_ text: String) -> [UInt8] {
        var out: [UInt8] = []
        for byte in text.utf8 {
            if byte == UInt8(ascii: "%") || byte < 0x20 || byte == 0x7F {
                out += Array(("%" + hex(byte)).utf8)
            } else {
                out.append(byte)
            }
        }
        return out
    }

    private static func split(_ bytes: [UInt8]) -> (String, [UInt8]) {
        guard let space = bytes.firstIndex(of: UInt8(ascii: " ")) else {
            return (String(decoding: bytes, as: UTF8.self), [])
        }
        return (String(decoding: bytes[..<space], as: UTF8.self), Array(bytes[(space + 1)...]))
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
