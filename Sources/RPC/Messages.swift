import TesseraCore

/// A JSON-RPC 2.0 request or notification received by the server.
public struct RPCRequest: Sendable {
    public var id: JSONValue?
    public var method: String
    public var params: JSONValue?
    /// Notifications (no `id`) get no response.
    public var isNotification: Bool { id == nil }
}

/// A server-to-client notification (JSON-RPC request without `id`).
public struct RPCNotification: Sendable, Equatable {
    public var method: String
    public var params: JSONValue
    public init(method: String, params: JSONValue) { self.method = method; self.params = params }
}

/// JSON-RPC 2.0 wire encoding shared by server and client.
public enum RPCWire {
    /// The JSON-RPC numeric code that accompanies each stable Tessera code.
    public static func numericCode(for code: TesseraError.Code) -> Int {
        switch code {
        case .parseError: return -32700
        case .invalidRequest: return -32600
        case .methodNotFound: return -32601
        case .invalidInput: return -32602
        case .internalError: return -32603
        default: return -32000
        }
    }

    public static func errorObject(_ error: TesseraError) -> JSONValue {
        var data: [String: JSONValue] = ["code": .string(error.code.rawValue), "retryable": .bool(error.retryable)]
        for (k, v) in error.details where data[k] == nil { data[k] = v }
        return [
            "code": .number(Double(numericCode(for: error.code))), "message": .string(error.message),
            "data": .object(data),
        ]
    }

    public static func response(id: JSONValue?, result: JSONValue) -> JSONValue {
        ["jsonrpc": "2.0", "id": id ?? .null, "result": result]
    }

    public static func response(id: JSONValue?, error: TesseraError) -> JSONValue {
        ["jsonrpc": "2.0", "id": id ?? .null, "error": errorObject(error)]
    }

    public static func request(id: JSONValue, method: String, params: JSONValue) -> JSONValue {
        ["jsonrpc": "2.0", "id": id, "method": .string(method), "params": params]
    }

    public static func notification(_ n: RPCNotification) -> JSONValue {
        ["jsonrpc": "2.0", "method": .string(n.method), "params": n.params]
    }

    /// Validates the envelope of one request object.
    static func parseRequest(_ value: JSONValue) throws(TesseraError) -> RPCRequest {
        guard case .object(let o) = value else { throw TesseraError(.invalidRequest, "request must be an object") }
        guard o["jsonrpc"]?.stringValue == "2.0" else { throw TesseraError(.invalidRequest, "jsonrpc must be \"2.0\"") }
        guard let method = o["method"]?.stringValue else {
            throw TesseraError(.invalidRequest, "method must be a string")
        }
        let id = o["id"]
        if let id {
            switch id {
            case .string, .number, .null: break
            default: throw TesseraError(.invalidRequest, "id must be a string, number or null")
            }
        }
        if let p = o["params"] {
            switch p {
            case .object, .array, .null: break
            default: throw TesseraError(.invalidRequest, "params must be an object or array")
            }
        }
        return RPCRequest(id: id, method: method, params: o["params"])
    }

    /// Rebuilds a `TesseraError` from a JSON-RPC error object (client side), keeping the stable code.
    public static func decodeError(_ value: JSONValue) -> TesseraError {
        let message = value["message"]?.stringValue ?? "unknown error"
        let data = value["data"]?.objectValue ?? [:]
        let code = data["code"]?.stringValue ?? "INTERNAL"
        var details = data
        details["code"] = nil
        details["retryable"] = nil
        return TesseraError(
            TesseraError.Code(rawValue: code), message, retryable: data["retryable"]?.boolValue,
            details: details)
    }
}
