import CryptoPrimitives
import TesseraCore

/// The client data a WebAuthn signature covers (W3C WebAuthn §5.8.1).
public struct CollectedClientData: Sendable, Equatable {
    public enum CeremonyType: String, Sendable {
        case create = "webauthn.create"
        case get = "webauthn.get"
    }

    public var type: CeremonyType
    public var challenge: [UInt8]
    public var origin: String
    public var crossOrigin: Bool
    /// The top-level origin (WebAuthn Level 3), meant only for cross-origin calls.
    public var topOrigin: String?

    public init(
        type: CeremonyType, challenge: [UInt8], origin: String, crossOrigin: Bool = false,
        topOrigin: String? = nil
    ) {
        self.type = type
        self.challenge = challenge
        self.origin = origin
        self.crossOrigin = crossOrigin
        self.topOrigin = topOrigin
    }

    /// clientDataJSON per WebAuthn §5.8.1.1 "Serialization": members type, challenge (base64url, unpadded),
    /// origin, crossOrigin, then topOrigin when present, strings escaped with CCDToString.
    public var json: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(96 + 2 * challenge.count + origin.utf8.count + (topOrigin?.utf8.count ?? 0))
        out.append(contentsOf: #"{"type":"#.utf8)
        Self.appendCCDString(type.rawValue, to: &out)
        out.append(contentsOf: #","challenge":"#.utf8)
        Self.appendCCDString(Base64URL.encode(challenge), to: &out)
        out.append(contentsOf: #","origin":"#.utf8)
        Self.appendCCDString(origin, to: &out)
        out.append(contentsOf: #","crossOrigin":"#.utf8)
        out.append(contentsOf: (crossOrigin ? "true" : "false").utf8)
        if let topOrigin {
            out.append(contentsOf: #","topOrigin":"#.utf8)
            Self.appendCCDString(topOrigin, to: &out)
        }
        out.append(0x7D)
        return out
    }

    /// SHA-256 of `json`: the clientDataHash given to authenticators.
    public var hash: [UInt8] { MessageDigest.sha256(json) }

    /// CCDToString (WebAuthn §5.8.1.2): control characters as `\u00xx` (the bytes of a multi-byte UTF-8 sequence are
    /// all 0x80 or more and copied as they are).
    static func appendCCDString(_ string: String, to out: inout [UInt8]) {
        JSONString.appendQuoted(string, to: &out, shortEscapes: false)
    }
}
