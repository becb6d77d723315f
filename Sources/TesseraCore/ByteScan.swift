#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Byte searches over contiguous memory by the C library (memchr, memcmp), for the request path's hot loops, where
/// a walk element by element through a slice costs several times as much. The pointer arithmetic they need stays
/// here.
public enum ByteScan {
    /// Whether `a` holds exactly the bytes of `b`.
    @inlinable
    public static func equal(_ a: ArraySlice<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let other = b.baseAddress else { return true }
        return a.withUnsafeBufferPointer { memcmp($0.baseAddress!, other, b.count) == 0 }
    }

    /// The offset in `bytes` of the first `byte` at or after `start`, nil when there is none.
    @inlinable
    public static func firstIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard bytes.count > start, let base = bytes.baseAddress,
            let found = memchr(base + start, Int32(byte), bytes.count - start)
        else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }
}
