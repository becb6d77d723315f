import Crypto
import FoundationEssentials
import TesseraCore

/// A 6-digit one-time code as stored: never the code itself, only HMAC-SHA-256 of it under a key derived
/// (HKDF-SHA-256, RFC 5869) from the daemon's secret and a random 32-byte salt of the code's own, with its
/// validity and the attempts left. The stored form holds the salt, never the key: a copy of the database without
/// the secret (a file of its own, see `DaemonSecret`) does not reveal the code.
public struct OneTimeCode: Sendable, Equatable {
    public var salt: [UInt8]
    public var mac: [UInt8]
    public var issuedAt: Date
    public var expiresAt: Date
    public var attemptsLeft: Int

    /// HKDF `info` of the MAC key.
    static let keyInfo = Array("tessera enrollment one-time code v1".utf8)

    public init(salt: [UInt8], mac: [UInt8], issuedAt: Date, expiresAt: Date, attemptsLeft: Int) {
        self.salt = salt
        self.mac = mac
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.attemptsLeft = attemptsLeft
    }

    /// A fresh uniformly random code ("000000"–"999999", from `SystemRandomNumberGenerator`) valid for
    /// `ttl` seconds from `now` with `attempts` tries, and its stored form (MAC keyed from `secret`).
    public static func issue(ttl: TimeInterval, attempts: Int, now: Date, secret: [UInt8]) -> (
        code: String, stored: OneTimeCode
    ) {
        var rng = SystemRandomNumberGenerator()
        let value = Int.random(in: 0...999_999, using: &rng)
        let digits = String(value)
        let code = String(repeating: "0", count: 6 - digits.count) + digits
        let salt = SecureRandom.bytes(32)
        let stored = OneTimeCode(
            salt: salt, mac: authenticationCode(code, key: macKey(secret: secret, salt: salt)),
            issuedAt: now, expiresAt: now.addingTimeInterval(ttl), attemptsLeft: max(0, attempts))
        return (code, stored)
    }

    /// Checks a submitted code, comparing MACs in constant time. A code that is not 6 ASCII digits is
    /// `INVALID_INPUT` (`details.field` "otp"); at or after `expiresAt`, `OTP_EXPIRED`; neither consumes
    /// an attempt. A wrong code consumes one: `OTP_INVALID` (`details.attemptsLeft`), or
    /// `OTP_ATTEMPTS_EXCEEDED` when it was the last (as when none was left).
    public mutating func verify(_ submitted: String, now: Date, secret: [UInt8]) throws(TesseraError) {
        guard attemptsLeft > 0 else {
            throw TesseraError(.otpAttemptsExceeded, "too many wrong codes", details: ["attemptsLeft": 0])
        }
        guard now < expiresAt else { throw TesseraError(.otpExpired, "the code has expired") }
        let bytes = Array(submitted.utf8)
        guard bytes.count == 6, bytes.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw TesseraError(.invalidInput, "the code is 6 digits", details: ["field": "otp"])
        }
        let candidate = Self.authenticationCode(submitted, key: Self.macKey(secret: secret, salt: salt))
        if ConstantTime.equal(candidate, mac) { return }
        attemptsLeft -= 1
        if attemptsLeft == 0 {
            throw TesseraError(.otpAttemptsExceeded, "wrong code; no attempts left", details: ["attemptsLeft": 0])
        }
        throw TesseraError(.otpInvalid, "wrong code", details: ["attemptsLeft": .number(Double(attemptsLeft))])
    }

    /// `{"salt", "mac"` (base64url)`, "issuedAt", "expiresAt"` (seconds since the epoch)`, "attemptsLeft"}`.
    public var json: JSONValue {
        [
            "salt": .string(Base64URL.encode(salt)),
            "mac": .string(Base64URL.encode(mac)),
            "issuedAt": .number(issuedAt.timeIntervalSince1970),
            "expiresAt": .number(expiresAt.timeIntervalSince1970),
            "attemptsLeft": .number(Double(attemptsLeft)),
        ]
    }

    /// Reads the form written by `json`. `STORAGE_ERROR` when it is not one.
    public init(json: JSONValue) throws(TesseraError) {
        guard let o = json.objectValue,
            let salt = o["salt"]?.stringValue.flatMap(Base64URL.decode), salt.count == 32,
            let mac = o["mac"]?.stringValue.flatMap(Base64URL.decode), mac.count == SHA256.byteCount,
            let issuedAt = o["issuedAt"]?.doubleValue, issuedAt.isFinite,
            let expiresAt = o["expiresAt"]?.doubleValue, expiresAt.isFinite,
            let attemptsLeft = o["attemptsLeft"]?.intValue, attemptsLeft >= 0
        else { throw TesseraError(.storageError, "stored one-time code is unreadable") }
        self.init(
            salt: salt, mac: mac, issuedAt: Date(timeIntervalSince1970: issuedAt),
            expiresAt: Date(timeIntervalSince1970: expiresAt), attemptsLeft: attemptsLeft)
    }

    /// HKDF-SHA-256(secret, salt, info "tessera enrollment one-time code v1"), 32 bytes.
    static func macKey(secret: [UInt8], salt: [UInt8]) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), salt: salt, info: keyInfo,
            outputByteCount: 32)
    }

    static func authenticationCode(_ code: String, key: SymmetricKey) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array(code.utf8), using: key))
    }
}
