import Ownership
import Passkeys
import TesseraCore

/// An `enrollment.*` notification and whose it is. Personal data (names, document numbers, contact details, the
/// credential) goes only to the uid that started the enrollment and to administrators; every other subscriber
/// receives `redacted` (docs/ENROLLMENT.md, "Whose data").
public struct EnrollmentEvent: Sendable {
    public var method: String
    /// The full params.
    public var params: JSONValue
    /// The uid that started the enrollment; nil when none is known (then only administrators get `params`).
    public var owner: UInt32?

    public init(method: String, params: JSONValue, owner: UInt32?) {
        self.method = method
        self.params = params
        self.owner = owner
    }

    /// The params for subscribers other than the owner and administrators.
    public var redacted: JSONValue { Self.redact(method, params) }

    /// `params` without personal data: `stepRequired` keeps only `{enrollmentId, key}`; `finished` only
    /// `{enrollmentId, outcome, step?, error?: {code, retryable}}`; the `stepup.*` notifications keep their ids
    /// (no user, no operation context). The other notifications carry none and pass as they are.
    public static func redact(_ method: String, _ params: JSONValue) -> JSONValue {
        let keep: Set<String>
        switch method {
        case "enrollment.stepRequired": keep = ["enrollmentId", "key"]
        case "enrollment.finished": keep = ["enrollmentId", "outcome", "step", "error"]
        case "stepup.context": keep = ["stepUpId", "rpId", "documentRequired"]
        case "stepup.inputRequired": keep = ["stepUpId", "key"]
        case "stepup.finished": keep = ["stepUpId", "outcome", "error"]
        default: return params
        }
        var out = (params.objectValue ?? [:]).filter { keep.contains($0.key) }
        if let error = out["error"] { out["error"] = redactError(error) }
        return .object(out)
    }

    /// An error object reduced to `{code, retryable}` (its message and details may quote personal data).
    public static func redactError(_ error: JSONValue) -> JSONValue {
        var o: [String: JSONValue] = [:]
        if let code = error["code"] { o["code"] = code }
        if let retryable = error["retryable"] { o["retryable"] = retryable }
        return .object(o)
    }
}

/// Who calls an `enrollment.*` method: the peer's uid (SO_PEERCRED) and whether the policy grants it `admin`; it may
/// drive, and read the personal data of, the enrollments it started, and the passkeys they made are its own.
public typealias EnrollmentCaller = Requester
