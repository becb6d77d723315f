import Crypto
import FoundationEssentials
import TesseraCore
import TesseraRuntime
import TesseraTestSupport
import Testing

@testable import PKCS11

#if canImport(Glibc)
    import Glibc
#endif

@Suite("PIN verifier")
struct PINVerifierTests {
    /// RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
    @Test func computesHMACSHA256() {
        let v = PINVerifier(testKey: Array("Jefe".utf8))
        #expect(
            Hex.encode(v.tag(Array("what do ya want for nothing?".utf8)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    /// RFC 4231 test case 1: key 0x0b × 20, data "Hi There".
    @Test func computesHMACSHA256WithABinaryKey() {
        let v = PINVerifier(testKey: [UInt8](repeating: 0x0b, count: 20))
        #expect(
            Hex.encode(v.tag(Array("Hi There".utf8)))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
    }

    /// The tags from the pre-computed inner and outer states equal swift-crypto's HMAC-SHA-256 for keys of 0 to 64
    /// bytes and messages of 0 to 130 bytes (one to three blocks: the padding's edges at 55, 56 and 64 bytes).
    @Test func tagsFromThePreparedStatesEqualHMACSHA256() {
        var random = SeededRandom(stream: "PINVerifierTests.prepared")
        for round in 0..<200 {
            let key = (0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random)
            }
            let length = round < 131 ? round : Int.random(in: 0...130, using: &random)
            let message = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            let expected = Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
            #expect(
                PINVerifier(testKey: key).tag(message) == expected,
                "key \(Hex.encode(key)), \(length)-byte message (\(SeededRandom.reproduce))")
        }
    }

    @Test func tagsDependOnTheProcessKeyAndMatchOnlyTheSamePIN() {
        let a = PINVerifier(), b = PINVerifier()
        let pin = Array("123456".utf8)
        #expect(a.tag(pin) != b.tag(pin))
        #expect(a.matches(pin, recorded: a.tag(pin)))
        #expect(!a.matches(Array("123457".utf8), recorded: a.tag(pin)))
        // Not the old salted-SHA-256 shape either: a plain hash of the PIN never equals the tag.
        #expect(a.tag(pin).count == 32)
    }

    /// The key's mapping is excluded from core dumps ("dd" in VmFlags) and locked when the memlock limit allows ("lo").
    @Test func keyMemoryIsExcludedFromCoreDumps() throws {
        let v = PINVerifier()
        // /proc files report size 0: read to the end rather than by size.
        let smaps = String(decoding: try OpenFile.contents(of: "/proc/self/smaps"), as: UTF8.self)
        let address = v.mappingAddress
        var lines = smaps.split(separator: "\n")[...]
        var flags: [Substring]?
        // The key's page may share a VMA with a neighbouring mapping of the same kind: find the one containing it.
        while let line = lines.popFirst() {
            let range = line.split(separator: " ", maxSplits: 1).first?.split(separator: "-") ?? []
            guard range.count == 2, let low = UInt(range[0], radix: 16), let high = UInt(range[1], radix: 16),
                low <= address, address < high
            else { continue }
            while let next = lines.popFirst() {
                if next.hasPrefix("VmFlags:") { flags = next.dropFirst(8).split(separator: " "); break }
            }
            break
        }
        let found = try #require(flags, "no mapping holds \(String(address, radix: 16)) in /proc/self/smaps")
        #expect(found.contains("dd"))
        #expect(found.contains("dc"), "not inherited by children (MADV_DONTFORK)")
        if v.isLocked && !Self.underSanitizer { #expect(found.contains("lo")) }
    }

    /// ASan and TSan intercept mlock and report success without locking (they keep shadow memory unlocked).
    static var underSanitizer: Bool {
        let program = dlopen(nil, RTLD_NOW)
        defer { if let program { dlclose(program) } }
        return dlsym(program, "__tsan_init") != nil || dlsym(program, "__asan_init") != nil
    }
}
