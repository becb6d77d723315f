/// The one conversion between an ECDSA signature's raw form (`r ‖ s`, each half as long as the group order:
/// PKCS#11, COSE/JWS, ICAO active authentication) and its DER form (`ECDSA-Sig-Value ::= SEQUENCE { r INTEGER,
/// s INTEGER }`: X.509, CMS, WebAuthn, PIV cards, OpenSSL).
///
/// Decoding is strict X.690 DER unless the caller asks for `.lenient` because its bytes come from a token or a
/// card known to bend the encoding. Both modes require exactly one SEQUENCE of two INTEGERs and nothing after it,
/// and `0 < r, s < n`.
public enum ECDSASignature {
    /// The group a signature belongs to: the byte length of each raw half, and the group order `n` (big-endian,
    /// `componentLength` bytes) that r and s must stay below; nil when only the length is known (the caller's
    /// verifier checks the range).
    public struct Group: Sendable, Equatable {
        public let componentLength: Int
        public let order: [UInt8]?

        public init(componentLength: Int, order: [UInt8]? = nil) {
            precondition(componentLength > 0 && componentLength <= 66, "ECDSA component length")
            precondition(order.map { $0.count == componentLength } ?? true, "ECDSA group order length")
            self.componentLength = componentLength
            self.order = order
        }

        /// NIST P-256 (secp256r1), SEC 2 §2.4.2.
        public static let p256 = Group(
            componentLength: 32,
            order: Hex.decode(
                "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551")!)
        /// NIST P-384 (secp384r1), SEC 2 §2.5.1.
        public static let p384 = Group(
            componentLength: 48,
            order: Hex.decode(
                "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973")!)
        /// NIST P-521 (secp521r1), SEC 2 §2.6.1.
        public static let p521 = Group(
            componentLength: 66,
            order: Hex.decode(
                "01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
                    + "fa51868783bf2f966b7fcc0148f709a5d03bb5c9b8899c47aebb6fb71e91386409")!)
    }

    /// How much of the DER rules a decoder insists on.
    public enum Strictness: Sendable {
        /// X.690 DER: minimal length octets, minimal two's-complement INTEGERs, no negative INTEGER.
        case strict
        /// For tokens and cards that bend DER: also accepts non-minimal length octets (long form, at most two
        /// octets), INTEGERs padded with extra leading zero bytes, and INTEGERs whose top bit is set without the
        /// 0x00 pad (read as unsigned). Everything else stays strict.
        case lenient
    }

    /// DER `SEQUENCE { INTEGER r, INTEGER s }` from raw `r ‖ s` (two equal halves of at most 66 bytes).
    /// With `group`, the input must be exactly two of its components and r, s below its order.
    /// Throws `INVALID_INPUT` for an odd, empty or oversized input, or a component that is zero or out of range.
    public static func derFromRaw(_ rs: [UInt8], group: Group? = nil) throws(TesseraError) -> [UInt8] {
        guard !rs.isEmpty, rs.count % 2 == 0, rs.count <= 2 * 66 else {
            throw .invalidInput("raw ECDSA signature must be two equal halves of at most 66 bytes")
        }
        if let group, rs.count != 2 * group.componentLength {
            throw .invalidInput("raw ECDSA signature must be \(2 * group.componentLength) bytes")
        }
        let half = rs.count / 2
        // SEQUENCE { INTEGER r, INTEGER s }, written into one buffer: each INTEGER is the component without its
        // leading zero bytes, with one 0x00 in front when its top bit is set.
        let magnitudes = [rs[..<half].drop(while: { $0 == 0 }), rs[half...].drop(while: { $0 == 0 })]
        var contentLength = 0
        for magnitude in magnitudes {
            guard let first = magnitude.first else { throw .invalidInput("ECDSA signature component is zero") }
            if let order = group?.order, !isBelow(magnitude, order) {
                throw .invalidInput("ECDSA signature component is not below the group order")
            }
            contentLength += 2 + magnitude.count + (first & 0x80 != 0 ? 1 : 0)
        }
        var der: [UInt8] = [0x30]
        der.reserveCapacity(3 + contentLength)
        der.append(contentsOf: derLength(contentLength))
        for magnitude in magnitudes {
            let padded = magnitude[magnitude.startIndex] & 0x80 != 0  // non-empty: checked above
            der.append(0x02)
            der.append(UInt8(magnitude.count + (padded ? 1 : 0)))
            if padded { der.append(0x00) }
            der.append(contentsOf: magnitude)
        }
        return der
    }

    /// Raw `r ‖ s`, each left-padded to the group's component length, from a DER signature.
    /// Throws `MALFORMED_DATA` when the input breaks the rules of `strictness` or r, s are not in `1..<n`.
    public static func rawFromDER(
        _ der: [UInt8], group: Group = .p256,
        strictness: Strictness = .strict
    ) throws(TesseraError) -> [UInt8] {
        func malformed(_ what: String) -> TesseraError {
            TesseraError(.malformedData, "DER ECDSA signature: \(what)")
        }
        let lenient = strictness == .lenient
        var position = 0

        func readLength() throws(TesseraError) -> Int {
            guard position < der.count else { throw malformed("truncated length") }
            let first = der[position]
            position += 1
            if first < 0x80 { return Int(first) }
            let octets = Int(first & 0x7F)
            guard octets >= 1, octets <= 2 else { throw malformed("unsupported length form") }
            guard der.count - position >= octets else { throw malformed("truncated length") }
            var length = 0
            for _ in 0..<octets {
                length = length << 8 | Int(der[position])
                position += 1
            }
            if !lenient {
                let minimal = octets == 1 ? length >= 0x80 : length > 0xFF
                guard minimal else { throw malformed("non-minimal length") }
            }
            return length
        }

        guard der.count >= 2, der[0] == 0x30 else { throw malformed("not a SEQUENCE") }
        position = 1
        let total = try readLength()
        guard der.count - position == total else {
            throw malformed(der.count - position > total ? "trailing bytes" : "length does not match the input")
        }
        var raw: [UInt8] = []
        raw.reserveCapacity(2 * group.componentLength)
        for _ in 0..<2 {
            guard position < der.count, der[position] == 0x02 else { throw malformed("expected an INTEGER") }
            position += 1
            let length = try readLength()
            guard length >= 1, der.count - position >= length else { throw malformed("bad INTEGER length") }
            let integer = der[position..<position + length]
            position += length
            let first = integer[integer.startIndex]
            if !lenient {
                guard first & 0x80 == 0 else { throw malformed("negative INTEGER") }
                if integer.count > 1 && first == 0 && integer[integer.startIndex + 1] & 0x80 == 0 {
                    throw malformed("non-minimal INTEGER")
                }
            }
            let magnitude = Array(integer.drop(while: { $0 == 0 }))
            guard !magnitude.isEmpty else { throw malformed("zero INTEGER") }
            guard magnitude.count <= group.componentLength else {
                throw malformed("INTEGER longer than \(group.componentLength) bytes")
            }
            if let order = group.order, !isBelow(magnitude, order) {
                throw malformed("INTEGER not below the group order")
            }
            raw += [UInt8](repeating: 0, count: group.componentLength - magnitude.count) + magnitude
        }
        guard position == der.count else { throw malformed("trailing bytes") }
        return raw
    }

    /// Whether the unsigned big-endian `value` (no leading zeros) is below `order`.
    private static func isBelow(_ value: some Collection<UInt8>, _ order: [UInt8]) -> Bool {
        let order = order.drop(while: { $0 == 0 })
        if value.count != order.count { return value.count < order.count }
        for (a, b) in zip(value, order) where a != b { return a < b }
        return false
    }

    private static func derLength(_ length: Int) -> [UInt8] {
        length < 0x80 ? [UInt8(length)] : [0x81, UInt8(length)]
    }
}
