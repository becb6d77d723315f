import FoundationEssentials

extension JSONValue {
    /// Parses one JSON text. Throws `PARSE_ERROR` on malformed input.
    public static func parse<B: Sequence>(_ bytes: B) throws(TesseraError) -> JSONValue where B.Element == UInt8 {
        guard let v = JSONReader.parse(Array(bytes)) else { throw TesseraError(.parseError, "malformed JSON") }
        return v
    }

    public static func parse(_ bytes: [UInt8]) throws(TesseraError) -> JSONValue {
        guard let v = JSONReader.parse(bytes) else { throw TesseraError(.parseError, "malformed JSON") }
        return v
    }

    /// Serialises compactly with sorted keys (stable output for logs and tests).
    public func serialized() -> [UInt8] {
        var w = JSONWriter()
        w.write(self)
        return w.out
    }

    /// Pretty, sorted-key text for humans.
    public func prettyText() -> String {
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return (try? String(decoding: enc.encode(self), as: UTF8.self)) ?? "null"
    }
}

/// Typed access to request parameters, raising `INVALID_INPUT` with the parameter's name.
public struct Params: Sendable {
    public let value: [String: JSONValue]
    public init(_ json: JSONValue?) throws(TesseraError) {
        switch json {
        case .none, .some(.null): value = [:]
        case .some(.object(let o)): value = o
        default: throw .invalidInput("params must be an object")
        }
    }

    public func has(_ key: String) -> Bool { if let v = value[key], !v.isNull { return true }; return false }

    public func string(_ key: String) throws(TesseraError) -> String {
        guard let v = value[key] else { throw .invalidInput("missing parameter '\(key)'") }
        guard let s = v.stringValue else { throw .invalidInput("parameter '\(key)' must be a string") }
        return s
    }

    public func optionalString(_ key: String) throws(TesseraError) -> String? {
        guard let v = value[key], !v.isNull else { return nil }
        guard let s = v.stringValue else { throw .invalidInput("parameter '\(key)' must be a string") }
        return s
    }

    public func optionalBool(_ key: String) throws(TesseraError) -> Bool? {
        guard let v = value[key], !v.isNull else { return nil }
        guard let b = v.boolValue else { throw .invalidInput("parameter '\(key)' must be a boolean") }
        return b
    }

    public func optionalInt(_ key: String) throws(TesseraError) -> Int? {
        guard let v = value[key], !v.isNull else { return nil }
        guard let i = v.intValue else { throw .invalidInput("parameter '\(key)' must be an integer") }
        return i
    }

    /// A required base64url binary parameter.
    public func bytes(_ key: String) throws(TesseraError) -> [UInt8] {
        let s = try string(key)
        guard let b = Base64URL.decode(s) else { throw .invalidInput("parameter '\(key)' is not base64url") }
        return b
    }

    public func optionalBytes(_ key: String) throws(TesseraError) -> [UInt8]? {
        guard has(key) else { return nil }
        return try bytes(key)
    }

    public func object(_ key: String) throws(TesseraError) -> Params {
        guard let v = value[key] else { throw .invalidInput("missing parameter '\(key)'") }
        guard case .object = v else { throw .invalidInput("parameter '\(key)' must be an object") }
        return try Params(v)
    }

    public func optionalArray(_ key: String) throws(TesseraError) -> [JSONValue]? {
        guard let v = value[key], !v.isNull else { return nil }
        guard let a = v.arrayValue else { throw .invalidInput("parameter '\(key)' must be an array") }
        return a
    }
}
