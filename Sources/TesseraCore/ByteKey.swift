/// Bytes as a dictionary key, hashed in one call (an `[UInt8]` key is hashed byte by byte).
public struct ByteKey: Hashable, Sendable {
    public let bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
}
