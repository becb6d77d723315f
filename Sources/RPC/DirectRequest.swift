import NIOCore
import TesseraCore

/// A request frame read without building a `JSONValue` tree, for the few hot methods a dispatcher answers directly
/// (`RPCDispatcher.answerDirectly`). Only the plainest frames are taken: one object with `jsonrpc` "2.0", an `id`
/// that is a short non-negative integer or a plain string, a plain-string `method` and `params`, an object whose
/// values are plain strings, booleans, null or arrays of plain strings ("plain": printable ASCII without escapes).
/// Anything else (a batch, a notification, another member, a number, a nested object, an escape, non-ASCII text, a
/// repeated key) is declined, and the frame takes the general path, which gives the same answer.
public struct DirectRequest: Sendable {
    /// A value of `params`.
    public enum Value: Sendable {
        case string(String)
        case bool(Bool)
        case null
        case strings([String])
    }

    /// The id as written (echoed unchanged in the answer).
    let id: ArraySlice<UInt8>
    let idIsString: Bool
    let methodBytes: ArraySlice<UInt8>
    let members: [Member]

    /// One member of `params` (a struct, not a tuple: an array of tuples is destroyed through generic metadata).
    struct Member: Sendable {
        let key: ArraySlice<UInt8>
        let value: Value
    }

    /// Whether the method is `name`.
    public func isMethod(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { ByteScan.equal(methodBytes, $0) }
    }

    /// The value of params member `key` (nil when absent).
    public subscript(key: StaticString) -> Value? {
        key.withUTF8Buffer { k in members.first { ByteScan.equal($0.key, k) }?.value }
    }

    /// The id as the general path would read it (for an error answer).
    var idValue: JSONValue {
        let text = String(decoding: id, as: UTF8.self)
        return idIsString ? .string(text) : .number(Double(Int(text) ?? 0))
    }

    /// Frames longer than this are never scanned (they are not the requests this path is for).
    static let maxBytes = 4096

    /// The request in `frame`, or nil when the frame is not one this path takes.
    init?(scanning frame: [UInt8]) {
        guard frame.count <= Self.maxBytes else { return nil }
        var s = Scanner(bytes: frame)
        guard s.take(UInt8(ascii: "{")) else { return nil }
        var id: ArraySlice<UInt8>?
        var idIsString = false
        var method: ArraySlice<UInt8>?
        var versionSeen = false
        var members: [Member]?
        repeat {
            guard let key = s.plainString(), s.take(UInt8(ascii: ":")) else { return nil }
            switch String(decoding: key, as: UTF8.self) {
            case "jsonrpc":
                guard !versionSeen, let v = s.plainString(), v.elementsEqual("2.0".utf8) else { return nil }
                versionSeen = true
            case "id":
                guard id == nil else { return nil }
                if let text = s.plainString() {
                    id = text
                    idIsString = true
                } else {
                    guard let digits = s.smallInteger() else { return nil }
                    id = digits
                }
            case "method":
                guard method == nil, let m = s.plainString() else { return nil }
                method = m
            case "params":
                guard members == nil, let p = s.flatObject() else { return nil }
                members = p
            default: return nil
            }
        } while s.take(UInt8(ascii: ","))
        guard s.take(UInt8(ascii: "}")), s.atEnd, versionSeen, let id, let method, let members else { return nil }
        self.id = id
        self.idIsString = idIsString
        self.methodBytes = method
        self.members = members
    }

    private struct Scanner {
        let bytes: [UInt8]
        var i = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func skipSpace() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0D { i += 1 }
        }

        var atEnd: Bool {
            mutating get {
                skipSpace()
                return i == bytes.count
            }
        }

        /// Takes `byte` (after white space) when it comes next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard i < bytes.count, bytes[i] == byte else { return false }
            i += 1
            return true
        }

        /// A string of printable ASCII without escapes: its bytes between the quotes.
        mutating func plainString() -> ArraySlice<UInt8>? {
            let start = i
            guard take(UInt8(ascii: "\"")) else { return nil }
            let first = i
            while i < bytes.count {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") {
                    i += 1
                    return bytes[first..<(i - 1)]
                }
                guard c >= 0x20, c < 0x7F, c != UInt8(ascii: "\\") else { break }
                i += 1
            }
            i = start
            return nil
        }

        /// A non-negative integer of at most 15 digits without a leading zero (it reads back as the same Double).
        mutating func smallInteger() -> ArraySlice<UInt8>? {
            skipSpace()
            let start = i
            while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) { i += 1 }
            let digits = bytes[start..<i]
            guard (1...15).contains(digits.count), digits.count == 1 || digits.first != UInt8(ascii: "0") else {
                return nil
            }
            // A fraction or an exponent makes it a number this path does not read.
            if i < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[i]) {
                return nil
            }
            return digits
        }

        /// A literal word (`true`, `false`, `null`).
        mutating func word(_ w: StaticString) -> Bool {
            skipSpace()
            let n = w.utf8CodeUnitCount
            guard i + n <= bytes.count else { return false }
            let matches = w.withUTF8Buffer { $0.elementsEqual(bytes[i..<(i + n)]) }
            if matches { i += n }
            return matches
        }

        /// An object of plain strings, booleans, nulls and arrays of plain strings, no key twice.
        mutating func flatObject() -> [Member]? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var members: [Member] = []
            members.reserveCapacity(8)
            if take(UInt8(ascii: "}")) { return members }
            repeat {
                guard let key = plainString(), take(UInt8(ascii: ":")) else { return nil }
                let repeated = key.withUnsafeBufferPointer { k in members.contains { ByteScan.equal($0.key, k) } }
                guard !repeated else { return nil }
                let value: Value
                if let text = plainString() {
                    value = .string(String(decoding: text, as: UTF8.self))
                } else if word("true") {
                    value = .bool(true)
                } else if word("false") {
                    value = .bool(false)
                } else if word("null") {
                    value = .null
                } else if take(UInt8(ascii: "[")) {
                    var items: [String] = []
                    if !take(UInt8(ascii: "]")) {
                        repeat {
                            guard let item = plainString() else { return nil }
                            items.append(String(decoding: item, as: UTF8.self))
                        } while take(UInt8(ascii: ","))
                        guard take(UInt8(ascii: "]")) else { return nil }
                    }
                    value = .strings(items)
                } else {
                    return nil
                }
                members.append(Member(key: key, value: value))
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? members : nil
        }
    }
}

/// The answer to a `DirectRequest`, written straight into the frame that is sent: `{"id":…,"jsonrpc":"2.0",
/// "result":{…}}` and its newline, the bytes the general path writes for the same result. Result members are
/// written in the order given, which must be the sorted order of their keys (as `JSONValue` objects are written).
public struct DirectAnswer: Sendable {
    /// The frame so far, in one array sized up front (one copy into the `ByteBuffer` at the end).
    private var bytes: [UInt8] = []
    private var first = true
    /// Set for an error answer.
    private(set) var error: TesseraError?
    let method: ArraySlice<UInt8>

    /// The error answer to `request`, as the general path writes it.
    public init(to request: DirectRequest, error: TesseraError) {
        var frame = RPCConnection.frame(RPCWire.response(id: request.idValue, error: error))
        bytes = frame.readBytes(length: frame.readableBytes - 1) ?? []  // `finish` writes the end again
        self.error = error
        method = request.methodBytes
    }

    /// Starts the answer to `request`, with room for `capacity` bytes of result.
    public init(to request: DirectRequest, capacity: Int) {
        method = request.methodBytes
        bytes.reserveCapacity(capacity + request.id.count + 40)
        append(#"{"id":"#)
        if request.idIsString { bytes.append(UInt8(ascii: "\"")) }
        bytes.append(contentsOf: request.id)
        if request.idIsString { bytes.append(UInt8(ascii: "\"")) }
        append(#","jsonrpc":"2.0","result":{"#)
    }

    private mutating func append(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    private mutating func key(_ key: StaticString) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        append(key)
        append(#"":"#)
    }

    /// A member whose value is `bytes` in base64url.
    public mutating func base64URL(_ name: StaticString, _ value: [UInt8]) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        Base64URL.append(value, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// A member whose value is a non-negative integer.
    public mutating func integer(_ name: StaticString, _ value: UInt32) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    public mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        append(value ? "true" : "false")
    }

    /// The finished frame.
    mutating func finish() -> ByteBuffer {
        append(error == nil ? "}}\n" : "\n")
        return ByteBuffer(bytes: bytes)
    }
}
