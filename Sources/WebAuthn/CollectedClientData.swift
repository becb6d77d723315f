import Crypto
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
        var out = Array(#"{"type":"#.utf8)
        Self.appendCCDString(type.rawValue, to: &out)
        out += Array(#","challenge":"#.utf8)
        Self.appendCCDString(Base64URL.encode(challenge), to: &out)
        out += Array(#","origin":"#.utf8)
        Self.appendCCDString(origin, to: &out)
        out += Array(#","crossOrigin":"#.utf8)
        out += Array((crossOrigin ? "true" : "false").utf8)
        if let topOrigin {
            out += Array(#","topOrigin":"#.utf8)
            Self.appendCCDString(topOrigin, to: &out)
        }
        out.append(0x7D)
        return out
    }

    /// SHA-256 of `json`: the clientDataHash given to authenticators.
    public var hash: [UInt8] { Array(SHA256.hash(data: json)) }

    /// CCDToString (WebAuthn §5.8.1.2).
    static func appendCCDString(_ string: String, to out: inout [UInt8]) {
        let hexDigits = Array("0123456789abcdef".utf8)
        out.append(0x22)
        for scalar in string.unicodeScalars {
            switch scalar.value {
            case 0x20, 0x21, 0x23...0x5B, 0x5D...0x10FFFF:
                out += Array(String(scalar).utf8)
            case 0x22:
                out += [0x5C, 0x22]
            case 0x5C:
                out += [0x5C, 0x5C]
            default:
                let v = scalar.value
                out += [0x5C, 0x75, 0x30, 0x30, hexDigits[Int(v >> 4 & 0xF)], hexDigits[Int(v & 0xF)]]
            }
        }
        out.append(0x22)
    }
}
