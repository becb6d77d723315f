import Crypto
import TesseraCore

/// RFC 7515 compact serialization, ES256 only (RFC 7518 §3.4: the raw 64-byte r‖s signature over the
/// ASCII bytes of `header.payload`).
public enum JWS {
    /// Compact tokens longer than this are refused before decoding.
    public static let maxLength = 65_536

    /// The decoded parts of a compact JWS.
    public struct Parsed: Sendable {
        public var header: JSONValue
        public var payload: [UInt8]
        /// The ASCII bytes of the first two parts and the '.' between them: what the signature covers.
        public var signingInput: [UInt8]
        public var signature: [UInt8]

        public init(header: JSONValue, payload: [UInt8], signingInput: [UInt8], signature: [UInt8]) {
            self.header = header
            self.payload = payload
            self.signingInput = signingInput
            self.signature = signature
        }
    }

    /// Splits and decodes: exactly three base64url parts without padding, the first a JSON object.
    /// `ACTIVATION_TOKEN_MALFORMED` on any failure.
    public static func parse(_ compact: String) throws(TesseraError) -> Parsed {
        let bytes = Array(compact.utf8)
        guard bytes.count <= maxLength else { throw malformed("the token is longer than \(maxLength) bytes") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw malformed("a compact JWS has three parts separated by '.'") }
        let names = ["header", "payload", "signature"]
        var decoded: [[UInt8]] = []
        for (part, name) in zip(parts, names) {
            guard !part.contains(UInt8(ascii: "=")), let d = Base64URL.decode(String(decoding: part, as: UTF8.self))
            else { throw malformed("the \(name) is not base64url without padding") }
            decoded.append(d)
        }
        guard let header = try? JSONValue.parse(decoded[0]), header.objectValue != nil else {
            throw malformed("the header is not a JSON object")
        }
        return Parsed(
            header: header, payload: decoded[1], signingInput: Array(bytes[..<parts[1].endIndex]),
            signature: decoded[2])
    }

    /// Whether `parsed.signature` is a valid ES256 signature of `parsed.signingInput` by `key`.
    public static func verifyES256(_ parsed: Parsed, key: P256.Signing.PublicKey) -> Bool {
        guard parsed.signature.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: parsed.signature)
        else { return false }
        return key.isValidSignature(signature, for: parsed.signingInput)
    }

    /// The compact serialization of `payload` signed with ES256 under `header` (whose `alg` is set to
    /// "ES256"); for tests and tools that issue tokens.
    public static func signES256(
        header: [String: JSONValue], payload: [UInt8],
        key: P256.Signing.PrivateKey
    ) throws(TesseraError) -> String {
        var header = header
        header["alg"] = "ES256"
        let signingInput = Base64URL.encode(JSONValue.object(header).serialized()) + "." + Base64URL.encode(payload)
        do {
            let signature = try key.signature(for: Array(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        } catch {
            throw TesseraError(.cryptoError, "ES256 signing failed: \(error)")
        }
    }

    static func malformed(_ message: String) -> TesseraError { TesseraError(.activationTokenMalformed, message) }
}
