import Crypto
import Enrollment
import Foundation
import Testing
import TesseraCore

@Suite struct OneTimeCodeTests {
    let now = Date(timeIntervalSince1970: 1_760_000_000)

    @Test func issuedCodeIsSixDigitsStoredOnlyAsHMAC() throws {
        let (code, stored) = OneTimeCode.issue(ttl: 600, attempts: 5, now: now)
        #expect(code.utf8.count == 6 && code.utf8.allSatisfy { (0x30...0x39).contains($0) })
        #expect(stored.key.count == 32)
        #expect(stored.issuedAt == now)
        #expect(stored.expiresAt == now.addingTimeInterval(600))
        #expect(stored.attemptsLeft == 5)
        let expected = HMAC<SHA256>.authenticationCode(for: Array(code.utf8), using: SymmetricKey(data: stored.key))
        #expect(stored.mac == Array(expected))
        #expect(stored.json.objectValue.map { Set($0.keys) } == ["key", "mac", "issuedAt", "expiresAt", "attemptsLeft"])
    }

    /// RFC 4231 Test Case 2 (HMAC-SHA-256, key "Jefe"), pinning the MAC the stored form relies on.
    @Test func hmacSHA256Vector() {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("what do ya want for nothing?".utf8),
                                                  using: SymmetricKey(data: Array("Jefe".utf8)))
        #expect(Hex.encode(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func codesAndKeysDiffer() {
        let issued = (0..<50).map { _ in OneTimeCode.issue(ttl: 600, attempts: 5, now: now) }
        #expect(Set(issued.map(\.code)).count > 40)
        #expect(Set(issued.map(\.stored.key)).count == 50)
        // Leading zeros are kept: every code has six characters.
        #expect(issued.allSatisfy { $0.code.count == 6 })
    }

    @Test func correctCodeVerifies() throws {
        var (code, stored) = OneTimeCode.issue(ttl: 600, attempts: 3, now: now)
        try stored.verify(code, now: now.addingTimeInterval(599))
        #expect(stored.attemptsLeft == 3)
    }

    @Test func wrongCodesCountDownThenExceed() throws {
        var (code, stored) = OneTimeCode.issue(ttl: 600, attempts: 3, now: now)
        let wrong = code == "000000" ? "000001" : "000000"
        let first = expectError(.otpInvalid) { () throws(TesseraError) in try stored.verify(wrong, now: now) }
        #expect(first?.details["attemptsLeft"] == 2)
        #expect(first?.retryable == false)
        let second = expectError(.otpInvalid) { () throws(TesseraError) in try stored.verify(wrong, now: now) }
        #expect(second?.details["attemptsLeft"] == 1)
        expectError(.otpAttemptsExceeded) { () throws(TesseraError) in try stored.verify(wrong, now: now) }
        #expect(stored.attemptsLeft == 0)
        // Once exhausted even the right code is refused.
        expectError(.otpAttemptsExceeded) { () throws(TesseraError) in try stored.verify(code, now: now) }
        #expect(stored.attemptsLeft == 0)
    }

    @Test func expiredCodeConsumesNoAttempt() {
        var (code, stored) = OneTimeCode.issue(ttl: 600, attempts: 3, now: now)
        expectError(.otpExpired) { () throws(TesseraError) in try stored.verify(code, now: now.addingTimeInterval(600)) }
        expectError(.otpExpired) { () throws(TesseraError) in
            try stored.verify("12345x", now: now.addingTimeInterval(601))
        }
        #expect(stored.attemptsLeft == 3)
    }

    @Test(arguments: ["", "12345", "1234567", "12345a", " 123456", "１２３４５６", "+12345"])
    func malformedCodeConsumesNoAttempt(submitted: String) {
        var (_, stored) = OneTimeCode.issue(ttl: 600, attempts: 3, now: now)
        let e = expectError(.invalidInput) { () throws(TesseraError) in try stored.verify(submitted, now: now) }
        #expect(e?.details["field"] == "otp")
        #expect(stored.attemptsLeft == 3)
    }

    @Test func jsonRoundTrip() throws {
        var (code, stored) = OneTimeCode.issue(ttl: 600.5, attempts: 4, now: now)
        let wrong = code == "999999" ? "999998" : "999999"
        _ = thrownError { () throws(TesseraError) in try stored.verify(wrong, now: now) }
        let text = stored.json.serialized()
        var back = try OneTimeCode(json: JSONValue.parse(text))
        #expect(back == stored)
        #expect(back.attemptsLeft == 3)
        try back.verify(code, now: now)
    }

    @Test func unreadableStoredForm() {
        let good = OneTimeCode.issue(ttl: 600, attempts: 3, now: now).stored.json
        guard case .object(let o) = good else { Issue.record("not an object"); return }
        var cases: [JSONValue] = [.null, .array([]), "x"]
        for (key, bad) in [("key", JSONValue.string("AAAA")), ("mac", "%%%"), ("issuedAt", "1"),
                           ("expiresAt", .null), ("attemptsLeft", -1), ("attemptsLeft", 1.5)] {
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
