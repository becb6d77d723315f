import TesseraCore

/// SSH wire encoding (RFC 4251 §5): big-endian uint32, length-prefixed strings, two's-complement mpints.
public struct SSHWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// A writer with room for `capacity` bytes (no reallocation while the message fits).
    public init(capacity: Int) { bytes.reserveCapacity(capacity) }

    public mutating func byte(_ b: UInt8) { bytes.append(b) }

    public mutating func uint32(_ v: UInt32) {
        bytes.append(UInt8(v >> 24))
        bytes.append(UInt8(truncatingIfNeeded: v >> 16))
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
        bytes.append(UInt8(truncatingIfNeeded: v))
    }

    public mutating func string(_ s: [UInt8]) {
        uint32(UInt32(s.count))
        bytes.append(contentsOf: s)
    }

    public mutating func string(_ s: String) {
        uint32(UInt32(s.utf8.count))
        bytes.append(contentsOf: s.utf8)
    }

    /// A non-negative integer given as unsigned big-endian magnitude.
    public mutating func mpint(unsigned magnitude: [UInt8]) {
        let m = magnitude.drop { $0 == 0 }
        let pad = (m.first ?? 0) & 0x80 != 0
        uint32(UInt32(m.count + (pad ? 1 : 0)))
        if pad { bytes.append(0) }
        bytes.append(contentsOf: m)
    }
}

/// Reads SSH wire values; every read throws `MALFORMED_DATA` past the end.
public struct SSHReader: Sendable {
    private let bytes: [UInt8]
    private var offset: Int

    public init(_ bytes: [UInt8]) { self.bytes = bytes; self.offset = 0 }

    public var isAtEnd: Bool { offset == bytes.count }
    public var remaining: [UInt8] { Array(bytes[offset...]) }

    public mutating func byte() throws(TesseraError) -> UInt8 {
        guard offset < bytes.count else { throw Self.truncated }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func uint32() throws(TesseraError) -> UInt32 {
        guard bytes.count - offset >= 4 else { throw Self.truncated }
        defer { offset += 4 }
        return bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    public mutating func string() throws(TesseraError) -> [UInt8] {
        let n = Int(try uint32())
        guard bytes.count - offset >= n else { throw Self.truncated }
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }

    public mutating func text() throws(TesseraError) -> String {
        let raw = try string()
        guard let s = String(validating: raw, as: UTF8.self) else {
            throw TesseraError(.malformedData, "SSH string is not UTF-8")
        }
        return s
    }

    /// A non-negative mpint, returned as its unsigned magnitude without leading zeros.
    public mutating func unsignedMPInt() throws(TesseraError) -> [UInt8] {
        let raw = try string()
        if let first = raw.first, first & 0x80 != 0 { throw TesseraError(.malformedData, "negative mpint") }
        return Array(raw.drop { $0 == 0 })
    }

    static let truncated = TesseraError(.malformedData, "SSH message truncated")
}
