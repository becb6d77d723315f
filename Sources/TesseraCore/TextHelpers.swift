import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Trimming without Foundation's `CharacterSet`: the one trim of the project.
extension StringProtocol {
    /// The text without the leading and trailing characters `predicate` accepts.
    public func trimming(where predicate: (Character) -> Bool) -> SubSequence {
        guard let first = firstIndex(where: { !predicate($0) }) else { return self[endIndex...] }
        let last = lastIndex(where: { !predicate($0) })!
        return self[first...last]
    }

    /// The text without leading and trailing white space and line breaks (`Character.isWhitespace`: spaces, tabs,
    /// CR, LF and the other Unicode White_Space characters), as a `String`.
    public func trimmingWhitespace() -> String { String(trimming(where: \.isWhitespace)) }
}

/// File path text without Foundation's `NSString`: join a directory and a name, a path's directory and last
/// component, with `NSString`'s rules for slashes.
public enum FilePaths {
    /// `directory/name`, one slash between them (`directory`'s trailing slashes dropped); `name` alone when
    /// `directory` is empty.
    public static func join(_ directory: String, _ name: String) -> String {
        if directory.isEmpty { return name }
        var base = Substring(directory)
        while base.count > 1, base.hasSuffix("/") { base = base.dropLast() }
        if base == "/" { return "/" + name.drop(while: { $0 == "/" }) }
        return base + "/" + name.drop(while: { $0 == "/" })
    }

    /// The directory of `path`: "/a/b" → "/a", "/a" → "/", "a" → "", "/a/b/" → "/a".
    public static func directory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var parent = trimmed[..<slash]
        while parent.count > 1, parent.hasSuffix("/") { parent = parent.dropLast() }
        return String(parent)
    }

    /// The last component of `path`: "/a/b" → "b", "/a/b/" → "b", "/" → "/", "" → "".
    public static func name(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/"), trimmed.count > 1 else { return String(trimmed) }
        return String(trimmed[trimmed.index(after: slash)...])
    }
}

extension String {
    /// `format` filled in as C's `printf` does in the C locale (`"%.3f"`, `"%9.3f"`, `"%02x"`), in place of
    /// Foundation's `String(format:)`. Numbers only (`Int32`, `Int`, `UInt`, `Double`, …): no `%s` or `%@`.
    public init(printf format: String, _ arguments: any CVarArg...) {
        var capacity = 64
        while true {
            var buffer = [CChar](repeating: 0, count: capacity)
            let needed = Int(withVaList(arguments) { vsnprintf(&buffer, capacity, format, $0) })
            guard needed >= 0 else {
                self = ""
                return
            }
            if needed < capacity {
                self = String(decoding: buffer[..<needed].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                return
            }
            capacity = needed + 1
        }
    }
}

extension TesseraError {
    /// A short reason for any error, in place of Foundation's `localizedDescription`: a `TesseraError`'s message,
    /// the errno text of a POSIX error or of a file error (FileManager's, `Data.write`'s) with one underneath, else
    /// the error as Swift prints it.
    public static func reason(of error: any Error) -> String {
        if let error = error as? TesseraError { return error.message }
        if let error = error as? POSIXError { return String(cString: strerror(error.code.rawValue)) }
        if let error = error as? CocoaError, let posix = error.underlying as? POSIXError {
            return String(cString: strerror(posix.code.rawValue))
        }
        return "\(error)"
    }
}
