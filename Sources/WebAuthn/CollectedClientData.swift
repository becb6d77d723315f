import Crypto
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

    /// CCDToString (WebAuthn §5.8.1.2).
    static func appendCCDString(_ string: String, to out: inout [UInt8]) {
        func hexDigit(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 + v : 0x57 + v }  // 0-9, a-f
        out.append(0x22)
        // Byte by byte: the bytes of a multi-byte UTF-8 sequence are all 0x80 or more (code points from 0x80 are
        // copied as they are), and an ASCII byte is its own code point.
        for byte in string.utf8 {
            switch byte {
            case 0x22, 0x5C:
                out.append(0x5C)
                out.append(byte)
            case 0x00..<0x20:
                out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hexDigit(byte >> 4), hexDigit(byte & 0xF)])
            default:
                out.append(byte)
            }
        }
        out.append(0x22)
    }
}
