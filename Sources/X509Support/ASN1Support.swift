import APDU
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Small DER helpers shared by certificates, the LDS, SOD and issuance code.
package enum ASN1 {
    // Universal tags.
    package static let boolean: UInt32 = 0x01, integer: UInt32 = 0x02, bitString: UInt32 = 0x03,
        octetString: UInt32 = 0x04
    package static let null: UInt32 = 0x05, oid: UInt32 = 0x06, utf8String: UInt32 = 0x0C,
        printableString: UInt32 = 0x13
    package static let utcTime: UInt32 = 0x17, generalizedTime: UInt32 = 0x18, sequence: UInt32 = 0x30,
        set: UInt32 = 0x31

    /// Decodes an OBJECT IDENTIFIER value into dotted form.
    package static func decodeOID(_ value: [UInt8]) throws(TesseraError) -> String {
        guard !value.isEmpty, value.count <= 64, value.last! & 0x80 == 0 else {
            throw TesseraError(.malformedData, "bad OBJECT IDENTIFIER")
        }
        var arcs = [UInt64]()
        var acc: UInt64 = 0
        for b in value {
            guard acc < (1 << 56) else { throw TesseraError(.malformedData, "OID arc too large") }
            acc = acc << 7 | UInt64(b & 0x7F)
            if b & 0x80 == 0 { arcs.append(acc); acc = 0 }
        }
        let first = arcs[0]
        let head: [UInt64] = first < 40 ? [0, first] : (first < 80 ? [1, first - 40] : [2, first - 80])
        return (head + arcs.dropFirst()).map(String.init).joined(separator: ".")
    }

    /// DER content bytes of a dotted OID.
    package static func encodeOIDContent(_ dotted: String) -> [UInt8] {
        let arcs = dotted.split(separator: ".").compactMap { UInt64($0) }
        guard arcs.count >= 2 else { return [] }
        var out: [UInt8] = []
        func base128(_ v: UInt64) {
            var chunks: [UInt8] = [UInt8(v & 0x7F)]
            var x = v >> 7
            while x > 0 { chunks.insert(UInt8(x & 0x7F) | 0x80, at: 0); x >>= 7 }
            out += chunks
        }
        base128(arcs[0] * 40 + arcs[1])
        for a in arcs.dropFirst(2) { base128(a) }
        return out
    }

    package static func encodeOIDValue(_ dotted: String) -> [UInt8] {
        let value = encodeOIDContent(dotted)
        precondition(!value.isEmpty, "bad OID literal \(dotted)")
        return value
    }

    package static func expect(_ tlv: TLV, _ tag: UInt32, _ what: String) throws(TesseraError) {
        guard tlv.tag == tag else {
            throw TesseraError(.malformedData, "\(what): expected tag \(TLV.tagHex(tag)), found \(TLV.tagHex(tlv.tag))")
        }
    }

    package static func oidValue(_ tlv: TLV) throws(TesseraError) -> String {
        try expect(tlv, oid, "OBJECT IDENTIFIER")
        return try decodeOID(tlv.value)
    }

    /// A small non-negative INTEGER.
    package static func smallInt(_ tlv: TLV) throws(TesseraError) -> Int {
        try expect(tlv, integer, "INTEGER")
        guard !tlv.value.isEmpty, tlv.value.count <= 4, tlv.value[0] & 0x80 == 0 else {
            throw TesseraError(.malformedData, "INTEGER out of range")
        }
        return tlv.value.reduce(0) { $0 << 8 | Int($1) }
    }

    /// UTCTime or GeneralizedTime (Z form) to a Date.
    package static func time(_ tlv: TLV) throws(TesseraError) -> Date {
        let text = String(decoding: tlv.value, as: UTF8.self)
        var digits = text
        guard digits.hasSuffix("Z") else { throw TesseraError(.malformedData, "time without Z") }
        digits.removeLast()
        let full: String
        switch tlv.tag {
        case utcTime:
            guard digits.count == 12 || digits.count == 10, let yy = Int(digits.prefix(2)) else {
                throw TesseraError(.malformedData, "bad UTCTime")
            }
            full = String(yy >= 50 ? 1900 + yy : 2000 + yy) + digits.dropFirst(2) + (digits.count == 10 ? "00" : "")
        case generalizedTime:
            guard digits.count == 14 else { throw TesseraError(.malformedData, "bad GeneralizedTime") }
            full = digits
        default:
            throw TesseraError(.malformedData, "not a time")
        }
        guard full.count == 14, full.allSatisfy(\.isASCII), full.allSatisfy(\.isNumber) else {
            throw TesseraError(.malformedData, "bad time")
        }
        let n = Array(full.utf8).map { Int($0) - 48 }
        func num(_ r: Range<Int>) -> Int { n[r].reduce(0) { $0 * 10 + $1 } }
        guard
            let c = CivilTime(
                year: num(0..<4), month: num(4..<6), day: num(6..<8), hour: num(8..<10), minute: num(10..<12),
                second: num(12..<14))
        else { throw TesseraError(.malformedData, "bad time: no such date or time of day") }
        return c.date
    }

    /// UTF-8 text, or Latin-1 when the bytes are not valid UTF-8.
    package static func text(_ bytes: [UInt8]) -> String {
        if let s = String(validating: bytes, as: UTF8.self) { return s }
        return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }

    // MARK: Building

    package static func node(_ tag: UInt32, _ content: [UInt8]) -> [UInt8] { TLV.encode(tag: tag, value: content) }
    package static func seq(_ parts: [[UInt8]]) -> [UInt8] { node(sequence, parts.flatMap { $0 }) }
    /// A DER SET OF: elements sorted by their encodings.
    package static func setOf(_ parts: [[UInt8]]) -> [UInt8] {
        node(set, parts.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 })
    }
    package static func oid(_ dotted: String) -> [UInt8] { node(oid, encodeOIDValue(dotted)) }
    package static func octets(_ bytes: [UInt8]) -> [UInt8] { node(octetString, bytes) }
    package static func int(_ v: Int) -> [UInt8] {
        var bytes = [UInt8]()
        var x = v
        repeat { bytes.insert(UInt8(x & 0xFF), at: 0); x >>= 8 } while x > 0
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return node(integer, bytes)
    }
    /// An INTEGER from unsigned big-endian magnitude bytes.
    package static func unsignedInt(_ magnitude: [UInt8]) -> [UInt8] {
        var v = Array(magnitude.drop(while: { $0 == 0 }))
        if v.isEmpty || v[0] & 0x80 != 0 { v.insert(0, at: 0) }
        return node(integer, v)
    }
    package static func explicit(_ n: UInt32, _ content: [UInt8]) -> [UInt8] { node(0xA0 | n, content) }
    package static func x509Time(_ date: Date) -> [UInt8] {
        let c = CivilTime(date)
        var body = [UInt8]()
        for v in [c.month, c.day, c.hour, c.minute, c.second] { CivilTime.appendDigits(v, width: 2, to: &body) }
        body.append(UInt8(ascii: "Z"))
        var year = [UInt8]()
        // RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050 (and before 1950).
        if (1950..<2050).contains(c.year) {
            CivilTime.appendDigits(c.year % 100, width: 2, to: &year)
            return node(utcTime, year + body)
        }
        CivilTime.appendDigits(c.year, width: 4, to: &year)
        return node(generalizedTime, year + body)
    }
}
