internal import CSystemShims
import TesseraCore

/// Turns PINs into HMAC-SHA-256 tags under a random key made for this process, so that the value kept to recognise
/// the last good PIN is useless without the key. The key, and the inner and outer SHA-256 states derived from it
/// once (RFC 2104's pre-computed pads: two of a tag's four SHA-256 blocks), live in their own mapping: excluded from
/// core dumps, not inherited by children, locked in RAM when the memlock limit allows. They never leave it but for
/// the working copies of a state on the stack while a tag is made, zeroed before it returns.
final class PINVerifier: @unchecked Sendable {
    // @unchecked: the mapping is written once in init (random fill or the given test key, then the states) and only
    // read afterwards.

    /// The process's verifier.
    static let shared = PINVerifier()

    static let keyLength = 32
    /// The key block (64 bytes, the key zero-padded), then the states.
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
        precondition(64 + tessera_hmac_sha256_states_size() <= size)
        if let testKey {
            precondition(testKey.count <= 64)
            tessera_secure_zero(p, size)
            p.copyMemory(from: testKey, byteCount: testKey.count)
        } else {
            // The first `keyLength` bytes are the key; the rest of the 64-byte block stays zero (HMAC key padding).
            tessera_secure_zero(p + Self.keyLength, 64 - Self.keyLength)
        }
        tessera_hmac_sha256_prepare(p.assumingMemoryBound(to: UInt8.self), p + 64)
        key = p
        isLocked = locked != 0
    }

    deinit { tessera_secret_free(key, size) }

    /// Address of the key's mapping (tests look it up in /proc/self/smaps).
    var mappingAddress: UInt { UInt(bitPattern: key) }

    /// HMAC-SHA-256(key, pin) (RFC 2104), from the key's pre-computed states.
    func tag(_ pin: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 32) { tag, count in
            pin.withUnsafeBufferPointer { tessera_hmac_sha256(key + 64, $0.baseAddress, $0.count, tag.baseAddress!) }
            count = 32
        }
    }

    /// Whether `pin`'s tag equals `recorded` (constant time).
    func matches(_ pin: [UInt8], recorded: [UInt8]) -> Bool {
        ConstantTime.equal(tag(pin), recorded)
    }
}
