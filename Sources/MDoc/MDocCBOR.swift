import CBOR
import TesseraCore

/// CBOR as ISO/IEC 18013-5 exchanges it: any well-formed item on input, map pairs kept in the order given on
/// output (signed structures are hashed as they were encoded, and their maps are not in canonical order).
public enum MDocCBOR {
    /// Limits for bytes from a holder or a reader: any well-formed item, no duplicate keys.
    public static let options = CBORDecodingOptions(
        maxDepth: 64, maxItems: 200_000, allowIndefiniteLength: true, requireCanonical: false)

    /// Decodes one item; `MALFORMED_DATA` naming `what` otherwise.
    public static func decode(_ bytes: [UInt8], _ what: String) throws(TesseraError) -> CBORValue {
        do {
            return try CBORValue(decoding: bytes, options: options)
        } catch {
            throw malformed("\(what) is not CBOR (\(error.message))")
        }
    }

    /// Shortest heads, definite lengths, map pairs in the order given.
    public static func encode(_ value: CBORValue) -> [UInt8] { value.encodedPreservingMapOrder() }

    /// `#6.24(bstr .cbor X)` around the encoding of X.
    public static func tag24(_ encoded: [UInt8]) -> CBORValue { .tagged(24, .byteString(encoded)) }

    /// The encoding of `#6.24(bstr)` around `encoded`, as hashed by digests and signatures.
    public static func tag24Bytes(_ encoded: [UInt8]) -> [UInt8] { encode(tag24(encoded)) }

    /// The bytes inside a tag-24 item.
    public static func untag24(_ value: CBORValue?, _ what: String) throws(TesseraError) -> [UInt8] {
        guard case .tagged(24, .byteString(let bytes))? = value else {
            throw malformed("\(what) is not a tag-24 byte string")
        }
        return bytes
    }

    static func malformed(_ message: String) -> TesseraError { TesseraError(.malformedData, "mdoc: \(message)") }

    static func map(_ value: CBORValue?, _ what: String) throws(TesseraError) -> CBORValue {
        guard let value, value.mapValue != nil else { throw malformed("\(what) is not a map") }
        return value
    }

    static func text(_ value: CBORValue?, _ what: String) throws(TesseraError) -> String {
        guard let text = value?.textValue else { throw malformed("\(what) is not a text string") }
        return text
    }

    static func bytes(_ value: CBORValue?, _ what: String) throws(TesseraError) -> [UInt8] {
        guard let bytes = value?.bytesValue else { throw malformed("\(what) is not a byte string") }
        return bytes
    }

    static func array(_ value: CBORValue?, _ what: String) throws(TesseraError) -> [CBORValue] {
        guard let array = value?.arrayValue else { throw malformed("\(what) is not an array") }
        return array
    }

    static func uint(_ value: CBORValue?, _ what: String) throws(TesseraError) -> UInt64 {
        guard case .unsigned(let n)? = value else { throw malformed("\(what) is not an unsigned integer") }
        return n
    }

    /// The pairs of a map whose keys are text strings.
    static func textKeyed(_ value: CBORValue?, _ what: String) throws(TesseraError) -> [(String, CBORValue)] {
        guard let pairs = value?.mapValue else { throw malformed("\(what) is not a map") }
        var out: [(String, CBORValue)] = []
        for pair in pairs {
            guard let key = pair.key.textValue else { throw malformed("\(what) has a key that is not text") }
            out.append((key, pair.value))
        }
        return out
    }
}
