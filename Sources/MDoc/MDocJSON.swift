import CBOR
import FoundationEssentials
import TesseraCore

/// JSON views of mdoc data for the socket and the CLI.
public enum MDocJSON {
    /// CBOR → JSON: byte strings as base64url, tdate/full-date as their text, map keys as text.
    public static func value(_ cbor: CBORValue) -> JSONValue {
        switch cbor {
        case .unsigned, .negative: return .number(Double(cbor.int64Value ?? 0))
        case .byteString(let b): return .string(Base64URL.encode(b))
        case .textString(let s): return .string(s)
        case .array(let a): return .array(a.map(value))
        case .map(let pairs):
            var out: [String: JSONValue] = [:]
            for pair in pairs {
                out[pair.key.textValue ?? pair.key.int64Value.map(String.init) ?? "?"] = value(pair.value)
            }
            return .object(out)
        case .tagged(_, let inner): return value(inner)
        case .bool(let b): return .bool(b)
        case .null, .undefined, .simple: return .null
        case .float16, .float32, .float64: return .number(cbor.doubleValue ?? 0)
        }
    }
}

extension MDocVerification {
    /// `{docType, verdict, reasons, checks, deviceAuthentication, documentSigner, validity, elements, digestFailures}`.
    public var json: JSONValue {
        var elementsJSON: [String: JSONValue] = [:]
        for e in elements {
            var ns = elementsJSON[e.namespace]?.objectValue ?? [:]
            ns[e.identifier] = MDocJSON.value(e.value)
            elementsJSON[e.namespace] = .object(ns)
        }
        var out: [String: JSONValue] = [
            "docType": .string(docType), "verdict": .string(verdict.rawValue),
            "reasons": .array(reasons.map { .string($0.rawValue) }),
            "checks": [
                "issuerSignature": .string(issuerSignature.rawValue),
                "certificateChain": .string(certificateChain.rawValue),
                "digests": .string(digests.rawValue), "validity": .string(validity.rawValue),
                "deviceAuthentication": .string(deviceAuthentication.rawValue),
            ],
            "elements": .object(elementsJSON),
            "digestFailures": .array(
                elements.filter { !$0.digestValid }.map { .string("\($0.namespace)/\($0.identifier)") }),
        ]
        if let deviceAuthenticationKind { out["deviceAuthentication"] = .string(deviceAuthenticationKind) }
        if let documentSigner { out["documentSigner"] = .string(documentSigner.subjectDescription) }
        if let mso {
            out["validity"] = [
                "signed": .string(MDocDate.format(mso.signed)), "validFrom": .string(MDocDate.format(mso.validFrom)),
                "validUntil": .string(MDocDate.format(mso.validUntil)),
            ]
        }
        return .object(out)
    }
}
