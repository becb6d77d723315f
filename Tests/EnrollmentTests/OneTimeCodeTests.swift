import Crypto
import Enrollment
import FoundationEssentials
import TesseraCore
import Testing

@Suite struct OneTimeCodeTests {
    let now = Date(timeIntervalSince1970: 1_760_000_000)
    let secret = [UInt8](repeating: 0x5A, count: 32)

    func issue(ttl: TimeInterval = 600, attempts: Int = 3) -> (code: String, stored: OneTimeCode) {
        OneTimeCode.issue(ttl: ttl, attempts: attempts, now: now, secret: secret)
    }

    @Test func issuedCodeIsSixDigitsStoredOnlyAsHMACUnderADerivedKey() throws {
        let (code, stored) = issue(attempts: 5)
        #expect(code.utf8.count == 6 && code.utf8.allSatisfy { (0x30...0x39).contains($0) })
        #expect(stored.salt.count == 32)
        #expect(stored.issuedAt == now)
        #expect(stored.expiresAt == now.addingTimeInterval(600))
        #expect(stored.attemptsLeft == 5)
        let key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), salt: stored.salt,
            info: Array("tessera enrollment one-time code v1".utf8), outputByteCount: 32)
        let expected = HMAC<SHA256>.authenticationCode(for: Array(code.utf8), using: key)
        #expect(stored.mac == Array(expected))
        // The stored form holds no key: nothing in it alone recomputes the MAC.
        #expect(
            stored.json.objectValue.map { Set($0.keys) } == ["salt", "mac", "issuedAt", "expiresAt", "attemptsLeft"])
        #expect(
            Array(HMAC<SHA256>.authenticationCode(for: Array(code.utf8), using: SymmetricKey(data: stored.salt)))
                != stored.mac)
    }

    /// RFC 5869 Test Case 1 (HKDF-SHA-256), pinning the derivation of the MAC key.
    @Test func hkdfSHA256Vector() {
        let okm = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: [UInt8](repeating: 0x0b, count: 22)),
            salt: Hex.decode("000102030405060708090a0b0c")!,
            info: Hex.decode("f0f1f2f3f4f5f6f7f8f9")!, outputByteCount: 42)
        #expect(
            okm.withUnsafeBytes { Hex.encode(Array($0)) }
                == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    @Test func anotherSecretDoesNotVerifyTheCode() {
        var (code, stored) = issue()
        let e = expectError(.otpInvalid) { () throws(TesseraError) in
            try stored.verify(code, now: now, secret: [UInt8](repeating: 0x5B, count: 32))
        }
        #expect(e?.details["attemptsLeft"] == 2)
    }

    /// RFC 4231 Test Case 2 (HMAC-SHA-256, key "Jefe"), pinning the MAC the stored form relies on.
    @Test func hmacSHA256Vector() {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("what do ya want for nothing?".utf8),
            using: SymmetricKey(data: Array("Jefe".utf8)))
        #expect(Hex.encode(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func codesAndKeysDiffer() {
        let issued = (0..<50).map { _ in issue(attempts: 5) }
        #expect(Set(issued.map(\.code)).count > 40)
        #expect(Set(issued.map(\.stored.salt)).count == 50)
        // Leading zeros are kept: every code has six characters.
        #expect(issued.allSatisfy { $0.code.count == 6 })
    }

    @Test func correctCodeVerifies() throws {
        var (code, stored) = issue()
        try stored.verify(code, now: now.addingTimeInterval(599), secret: secret)
        #expect(stored.attemptsLeft == 3)
    }

    @Test func wrongCodesCountDownThenExceed() throws {
        var (code, stored) = issue()
        let wrong = code == "000000" ? "000001" : "000000"
        let first = expectError(.otpInvalid) { () throws(TesseraError) in
            try stored.verify(wrong, now: now, secret: secret)
        }
        #expect(first?.details["attemptsLeft"] == 2)
        #expect(first?.retryable == false)
        let second = expectError(.otpInvalid) { () throws(TesseraError) in
            try stored.verify(wrong, now: now, secret: secret)
        }
        #expect(second?.details["attemptsLeft"] == 1)
        expectError(.otpAttemptsExceeded) { () throws(TesseraError) in
            try stored.verify(wrong, now: now, secret: secret)
        }
        #expect(stored.attemptsLeft == 0)
        // Once exhausted even the right code is refused.
        expectError(.otpAttemptsExceeded) { () throws(TesseraError) in try stored.verify(code, now: now, secret: secret)
        }
        #expect(stored.attemptsLeft == 0)
    }

    @Test func expiredCodeConsumesNoAttempt() {
        var (code, stored) = issue()
        expectError(.otpExpired) { () throws(TesseraError) in
            try stored.verify(code, now: now.addingTimeInterval(600), secret: secret)
        }
        expectError(.otpExpired) { () throws(TesseraError) in
            try stored.verify("12345x", now: now.addingTimeInterval(601), secret: secret)
        }
        #expect(stored.attemptsLeft == 3)
    }

    @Test(arguments: ["", "12345", "1234567", "12345a", " 123456", "１２３４５６", "+12345"])
    func malformedCodeConsumesNoAttempt(submitted: String) {
        var (_, stored) = issue()
        let e = expectError(.invalidInput) { () throws(TesseraError) in
            try stored.verify(submitted, now: now, secret: secret)
        }
        #expect(e?.details["field"] == "otp")
        #expect(stored.attemptsLeft == 3)
    }

    @Test func jsonRoundTrip() throws {
        var (code, stored) = issue(ttl: 600.5, attempts: 4)
        let wrong = code == "999999" ? "999998" : "999999"
        _ = thrownError { () throws(TesseraError) in try stored.verify(wrong, now: now, secret: secret) }
        let text = stored.json.serialized()
        var back = try OneTimeCode(json: JSONValue.parse(text))
        #expect(back == stored)
        #expect(back.attemptsLeft == 3)
        try back.verify(code, now: now, secret: secret)
    }

    @Test func unreadableStoredForm() {
        let good = issue().stored.json
        guard case .object(let o) = good else { Issue.record("not an object"); return }
        var cases: [JSONValue] = [.null, .array([]), "x"]
        for (key, bad) in [
            ("salt", JSONValue.string("AAAA")), ("mac", "%%%"), ("issuedAt", "1"),
            ("expiresAt", .null), ("attemptsLeft", -1), ("attemptsLeft", 1.5),
        ] {
            var copy = o
            copy[key] = bad
            cases.append(.object(copy))
        }
        var missing = o
        missing["mac"] = nil
        cases.append(.object(missing))
        for json in cases {
            expectError(.storageError) { () throws(TesseraError) in try OneTimeCode(json: json) }
        }
    }
}
