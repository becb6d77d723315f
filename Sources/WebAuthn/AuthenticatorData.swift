import CBOR
import CryptoPrimitives
import TesseraCore

/// The flags byte of authenticator data (WebAuthn §6.1).
public struct AuthenticatorFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// UP
    public static let userPresent = AuthenticatorFlags(rawValue: 0x01)
    /// UV
    public static let userVerified = AuthenticatorFlags(rawValue: 0x04)
    /// BE
    public static let backupEligible = AuthenticatorFlags(rawValue: 0x08)
    /// BS
    public static let backedUp = AuthenticatorFlags(rawValue: 0x10)
    /// AT: attested credential data follows.
    public static let attestedCredentialData = AuthenticatorFlags(rawValue: 0x40)
    /// ED: an extensions map follows.
    public static let extensionData = AuthenticatorFlags(rawValue: 0x80)
}

/// Attested credential data (WebAuthn §6.5.2): AAGUID, credential ID and COSE public key.
public struct AttestedCredentialData: Sendable, Equatable {
    public let aaguid: [UInt8]
    public let credentialId: [UInt8]
    /// The credential public key as canonical COSE_Key CBOR (see `COSEKey`).
    public let publicKey: [UInt8]

    /// Largest credential ID WebAuthn allows.
    public static let maxCredentialIdLength = 1023

    /// Throws `INVALID_INPUT` unless `aaguid` is 16 bytes, `credentialId` 1…1023 bytes and
    /// `publicKey` exactly one canonical CBOR map.
    public init(aaguid: [UInt8], credentialId: [UInt8], publicKey: [UInt8]) throws(TesseraError) {
        guard aaguid.count == 16 else { throw .invalidInput("AAGUID must be 16 bytes") }
        guard (1...Self.maxCredentialIdLength).contains(credentialId.count) else {
            throw .invalidInput("credential ID must be 1…\(Self.maxCredentialIdLength) bytes")
        }
        let key: CBORValue
        do {
            key = try CBORValue(decoding: publicKey)
        } catch {
            throw .invalidInput("credential public key is not canonical CBOR: \(error.message)")
        }
        guard key.mapValue != nil else { throw .invalidInput("credential public key is not a CBOR map") }
        self.aaguid = aaguid
        self.credentialId = credentialId
        self.publicKey = publicKey
    }
}

/// Authenticator data (WebAuthn §6.1): rpIdHash ‖ flags ‖ signCount ‖ [attested credential data] ‖ [extensions].
public struct AuthenticatorData: Sendable, Equatable {
    public let rpIdHash: [UInt8]
    /// The flags as encoded; AT and ED always match the presence of `attestedCredential` and `extensions`.
    public let flags: AuthenticatorFlags
    public let signCount: UInt32
    public let attestedCredential: AttestedCredentialData?
    /// The extension outputs as one canonical CBOR map, when present.
    public let extensions: [UInt8]?

    /// `rpIdHash` is SHA-256 of the UTF-8 `rpId`; the AT and ED flags are set from the optional parts.
    public init(
        rpId: String, flags: AuthenticatorFlags, signCount: UInt32,
        attestedCredential: AttestedCredentialData? = nil, extensions: [UInt8]? = nil
    ) {
        self.init(
            rpIdHash: MessageDigest.sha256(Array(rpId.utf8)), flags: flags, signCount: signCount,
            attestedCredential: attestedCredential, extensions: extensions)
    }

    /// As `init(rpId:…)` with SHA-256 of the rpId computed by the caller (e.g. kept between assertions).
    public init(
        rpIdHash: [UInt8], flags: AuthenticatorFlags, signCount: UInt32,
        attestedCredential: AttestedCredentialData? = nil, extensions: [UInt8]? = nil
    ) {
        var flags = flags.subtracting([.attestedCredentialData, .extensionData])
        if attestedCredential != nil { flags.insert(.attestedCredentialData) }
        if extensions != nil { flags.insert(.extensionData) }
        self.rpIdHash = rpIdHash
        self.flags = flags
        self.signCount = signCount
        self.attestedCredential = attestedCredential
        self.extensions = extensions
    }

    /// Parses authenticator data; throws `MALFORMED_DATA` on bad lengths, bad CBOR or trailing bytes.
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        guard bytes.count >= 37 else {
            throw TesseraError(.malformedData, "authenticator data is \(bytes.count) bytes, at least 37 needed")
        }
        let flags = AuthenticatorFlags(rawValue: bytes[32])
        let signCount = bytes[33..<37].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        var position = 37
        var attested: AttestedCredentialData?
        if flags.contains(.attestedCredentialData) {
            guard bytes.count - position >= 18 else {
                throw TesseraError(.malformedData, "attested credential data truncated at offset \(position)")
            }
            let aaguid = Array(bytes[position..<position + 16])
            let idLength = Int(bytes[position + 16]) << 8 | Int(bytes[position + 17])
            position += 18
            guard idLength <= AttestedCredentialData.maxCredentialIdLength, bytes.count - position >= idLength else {
                throw TesseraError(.malformedData, "credential ID length \(idLength) invalid at offset \(position - 2)")
            }
            let credentialId = Array(bytes[position..<position + idLength])
            position += idLength
            let (key, end) = try CBORValue.decode(bytes, from: position)
            guard key.mapValue != nil else {
                throw TesseraError(.malformedData, "credential public key at offset \(position) is not a map")
            }
            do {
                attested = try AttestedCredentialData(
                    aaguid: aaguid, credentialId: credentialId, publicKey: Array(bytes[position..<end]))
            } catch {
                throw TesseraError(.malformedData, error.message)
            }
            position = end
        }
        var extensions: [UInt8]?
        if flags.contains(.extensionData) {
            let (map, end) = try CBORValue.decode(bytes, from: position)
            guard map.mapValue != nil else {
                throw TesseraError(.malformedData, "extensions at offset \(position) are not a map")
            }
            extensions = Array(bytes[position..<end])
            position = end
        }
        guard position == bytes.count else {
            throw TesseraError(.malformedData, "\(bytes.count - position) trailing byte(s) at offset \(position)")
        }
        self.init(
            rpIdHash: Array(bytes[0..<32]), flags: flags, signCount: signCount,
            attestedCredential: attested, extensions: extensions)
    }

    public var encoded: [UInt8] {
        var out = rpIdHash
        out.append(flags.rawValue)
        out += [
            UInt8(signCount >> 24), UInt8(signCount >> 16 & 0xFF), UInt8(signCount >> 8 & 0xFF),
            UInt8(signCount & 0xFF),
        ]
        if let attestedCredential {
            out += attestedCredential.aaguid
            let length = attestedCredential.credentialId.count
            out += [UInt8(length >> 8), UInt8(length & 0xFF)]
            out += attestedCredential.credentialId
            out += attestedCredential.publicKey
        }
        if let extensions { out += extensions }
        return out
    }
}
