internal import CSystemShims
import Crypto
import TesseraCore

/// Turns PINs into HMAC-SHA-256 tags under a random key made for this process, so that the value kept to recognise
/// the last good PIN is useless without the key. The key lives in its own mapping: excluded from core dumps,
/// not inherited by children, locked in RAM when the memlock limit allows. It never leaves that mapping.
final class PINVerifier: @unchecked Sendable {
    // @unchecked: `key` is written once in init (random fill or the given test key) and only read afterwards.

    /// The process's verifier.
    static let shared = PINVerifier()

    static let keyLength = 32
    private let key: UnsafeMutableRawPointer
    private let size = 4096
    /// Whether mlock(2) succeeded for the key's page.
    let isLocked: Bool

    /// A verifier with a fresh random key (the process's own is `shared`).
    convenience init() { self.init(testKey: nil) }

    /// `testKey` (at most 64 bytes) replaces the random key: for published HMAC test vectors only.
    init(testKey: [UInt8]?) {
        var locked: Int32 = 0
        guard let p = tessera_secret_alloc(size, &locked) else {
            fatalError("cannot map memory for the PIN verifier key")
        }
        if let testKey {
            precondition(testKey.count <= 64)
            tessera_secure_zero(p, size)
            p.copyMemory(from: testKey, byteCount: testKey.count)
        } else {
            // The first `keyLength` bytes are the key; the rest of the 64-byte block stays zero (HMAC key padding).
            tessera_secure_zero(p + Self.keyLength, 64 - Self.keyLength)
        }
        key = p
        isLocked = locked != 0
    }

    deinit { tessera_secret_free(key, size) }

    /// Address of the key's mapping (tests look it up in /proc/self/smaps).
    var mappingAddress: UInt { UInt(bitPattern: key) }

    /// HMAC-SHA-256(key, pin) (RFC 2104), computed without copying the key out of its mapping except for the
    /// padded key blocks on the stack, which are zeroed before returning.
    func tag(_ pin: [UInt8]) -> [UInt8] {
        withUnsafeTemporaryAllocation(byteCount: 64, alignment: 16) { block -> [UInt8] in
            defer { tessera_secure_zero(block.baseAddress!, 64) }
            let k = UnsafeRawBufferPointer(start: key, count: 64)
            for i in 0..<64 { block[i] = k[i] ^ 0x36 }
            var inner = SHA256()
            inner.update(bufferPointer: UnsafeRawBufferPointer(block))
            inner.update(data: pin)
            let innerDigest = inner.finalize()
            for i in 0..<64 { block[i] = k[i] ^ 0x5c }
            var outer = SHA256()
            outer.update(bufferPointer: UnsafeRawBufferPointer(block))
            // The digests' bytes as a whole (`Array(digest)` would copy them one by one through its iterator).
            innerDigest.withUnsafeBytes { outer.update(bufferPointer: $0) }
            return outer.finalize().withUnsafeBytes { Array($0) }
        }
    }

    /// Whether `pin`'s tag equals `recorded` (constant time).
    func matches(_ pin: [UInt8], recorded: [UInt8]) -> Bool {
        ConstantTime.equal(tag(pin), recorded)
    }
}
