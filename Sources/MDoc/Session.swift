import CBOR
import Crypto
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// SessionTranscript (ISO/IEC 18013-5 §9.1.5.1): `[DeviceEngagementBytes, EReaderKeyBytes, Handover]`.
public struct SessionTranscript: Sendable, Equatable {
    /// The encoded array (what DeviceAuthentication and ReaderAuthentication embed).
    public let encoded: [UInt8]

    public init(encoded: [UInt8]) { self.encoded = encoded }

    public init(deviceEngagementBytes: [UInt8], eReaderKeyBytes: [UInt8], handover: CBORValue) {
        var out: [UInt8] = [0x83]
        out += MDocCBOR.tag24Bytes(deviceEngagementBytes)
        out += MDocCBOR.tag24Bytes(eReaderKeyBytes)
        out += MDocCBOR.encode(handover)
        encoded = out
    }

    /// SessionTranscriptBytes: `#6.24(bstr .cbor SessionTranscript)`, the HKDF salt's input.
    public var taggedBytes: [UInt8] { MDocCBOR.tag24Bytes(encoded) }

    /// From SessionTranscriptBytes.
    public init(taggedBytes: [UInt8]) throws(TesseraError) {
        encoded = try MDocCBOR.untag24(
            try MDocCBOR.decode(taggedBytes, "SessionTranscriptBytes"), "SessionTranscriptBytes")
    }
}

/// Session encryption (ISO/IEC 18013-5 §9.1.1.5): ECDH on the ephemeral keys, HKDF-SHA-256 SKReader and SKDevice
/// salted with SHA-256(SessionTranscriptBytes), AES-256-GCM with the 12-byte IV identifier ‖ message counter.
public struct SessionEncryption: Sendable {
    public enum Role: Sendable { case reader, device }

    public let role: Role
    let sendKey: SymmetricKey
    let receiveKey: SymmetricKey
    /// Counters of the next message to send and to receive (both start at 1).
    public private(set) var sendCounter: UInt32 = 1
    public private(set) var receiveCounter: UInt32 = 1

    /// `privateKey` is this side's ephemeral key (EReaderKey or EDeviceKey), `peer` the other's.
    public init(
        role: Role, privateKey: P256.KeyAgreement.PrivateKey, peer: MDocECKey,
        sessionTranscript: SessionTranscript
    ) throws(TesseraError) {
        let keys = try Self.sessionKeys(privateKey: privateKey, peer: peer, sessionTranscript: sessionTranscript)
        self.role = role
        sendKey = SymmetricKey(data: role == .reader ? keys.skReader : keys.skDevice)
        receiveKey = SymmetricKey(data: role == .reader ? keys.skDevice : keys.skReader)
    }

    /// SKReader and SKDevice (32 bytes each).
    public static func sessionKeys(
        privateKey: P256.KeyAgreement.PrivateKey, peer: MDocECKey,
        sessionTranscript: SessionTranscript
    ) throws(TesseraError) -> (skReader: [UInt8], skDevice: [UInt8]) {
        let secret = try sharedSecret(privateKey: privateKey, peer: peer)
        let salt = MessageDigest.sha256(sessionTranscript.taggedBytes)
        return (derive(secret, salt: salt, info: "SKReader"), derive(secret, salt: salt, info: "SKDevice"))
    }

    /// EMacKey (§9.1.3.5): HKDF over ECDH(static DeviceKey, EReaderKey) with the same salt, info "EMacKey".
    public static func eMacKey(
        privateKey: P256.KeyAgreement.PrivateKey, peer: MDocECKey,
        sessionTranscript: SessionTranscript
    ) throws(TesseraError) -> [UInt8] {
        let secret = try sharedSecret(privateKey: privateKey, peer: peer)
        return derive(secret, salt: MessageDigest.sha256(sessionTranscript.taggedBytes), info: "EMacKey")
    }

    static func sharedSecret(privateKey: P256.KeyAgreement.PrivateKey, peer: MDocECKey) throws(TesseraError)
        -> SharedSecret
    {
        guard peer.curve == 1 else {
            throw TesseraError(.unsupportedProtocol, "mdoc session keys other than P-256 are not supported")
        }
        do {
            let key = try P256.KeyAgreement.PublicKey(x963Representation: peer.uncompressedPoint)
            return try privateKey.sharedSecretFromKeyAgreement(with: key)
        } catch {
            throw TesseraError(.cryptoError, "mdoc: ECDH with the peer's key failed")
        }
    }

    static func derive(_ secret: SharedSecret, salt: [UInt8], info: String) -> [UInt8] {
        secret.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: salt, sharedInfo: Array(info.utf8), outputByteCount: 32
        )
        .withUnsafeBytes { Array($0) }
    }

    static func iv(sender: Role, counter: UInt32) -> [UInt8] {
        [
            0, 0, 0, 0, 0, 0, 0, sender == .reader ? 0 : 1,
            UInt8(counter >> 24), UInt8(counter >> 16 & 0xFF), UInt8(counter >> 8 & 0xFF), UInt8(counter & 0xFF),
        ]
    }

    /// Encrypts the next outgoing message: ciphertext ‖ 16-byte tag.
    public mutating func encrypt(_ plaintext: [UInt8]) throws(TesseraError) -> [UInt8] {
        let nonceBytes = Self.iv(sender: role, counter: sendCounter)
        do {
            let box = try AES.GCM.seal(plaintext, using: sendKey, nonce: try AES.GCM.Nonce(data: nonceBytes))
            sendCounter &+= 1
            return Array(box.ciphertext) + Array(box.tag)
        } catch {
            throw TesseraError(.cryptoError, "mdoc: session encryption failed")
        }
    }

    /// Decrypts the next incoming message; `CRYPTO_ERROR` when it does not authenticate (status 10 on the wire).
    public mutating func decrypt(_ message: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard message.count >= 16 else { throw TesseraError(.cryptoError, "mdoc: session message too short") }
        let nonceBytes = Self.iv(sender: role == .reader ? .device : .reader, counter: receiveCounter)
        do {
            let box = try AES.GCM.SealedBox(
                nonce: try AES.GCM.Nonce(data: nonceBytes),
                ciphertext: message.dropLast(16), tag: message.suffix(16))
            let plain = try AES.GCM.open(box, using: receiveKey)
            receiveCounter &+= 1
            return Array(plain)
        } catch {
            throw TesseraError(.cryptoError, "mdoc: session message does not decrypt")
        }
    }
}

/// SessionEstablishment (§9.1.1.4): the reader's ephemeral key and the first encrypted message.
public struct SessionEstablishment: Sendable, Equatable {
    /// EReaderKeyBytes: the encoded COSE_Key.
    public let eReaderKeyBytes: [UInt8]
    public let eReaderKey: MDocECKey
    public let data: [UInt8]

    public init(eReaderKey: MDocECKey, data: [UInt8]) {
        self.eReaderKey = eReaderKey; eReaderKeyBytes = eReaderKey.encoded; self.data = data
    }

    public init(bytes: [UInt8]) throws(TesseraError) {
        let value = try MDocCBOR.map(try MDocCBOR.decode(bytes, "SessionEstablishment"), "SessionEstablishment")
        eReaderKeyBytes = try MDocCBOR.untag24(value["eReaderKey"], "eReaderKey")
        eReaderKey = try MDocECKey(try MDocCBOR.decode(eReaderKeyBytes, "EReaderKey"))
        data = try MDocCBOR.bytes(value["data"], "SessionEstablishment data")
    }

    public var encoded: [UInt8] {
        MDocCBOR.encode(["eReaderKey": MDocCBOR.tag24(eReaderKeyBytes), "data": .byteString(data)])
    }
}

/// SessionData (§9.1.1.4): an encrypted message, a status, or both.
public struct SessionData: Sendable, Equatable {
    /// 10: session encryption error, 11: CBOR decoding error, 20: session termination.
    public enum Status: UInt64, Sendable { case encryptionError = 10, decodingError = 11, sessionTermination = 20 }

    public var data: [UInt8]?
    public var status: UInt64?

    public init(data: [UInt8]? = nil, status: Status? = nil) { self.data = data; self.status = status?.rawValue }

    public init(bytes: [UInt8]) throws(TesseraError) {
        let value = try MDocCBOR.map(try MDocCBOR.decode(bytes, "SessionData"), "SessionData")
        data = try value["data"].map { v throws(TesseraError) in try MDocCBOR.bytes(v, "SessionData data") }
        status = try value["status"].map { v throws(TesseraError) in try MDocCBOR.uint(v, "SessionData status") }
        guard data != nil || status != nil else { throw MDocCBOR.malformed("SessionData has neither data nor status") }
    }

    public var encoded: [UInt8] {
        var pairs: [(key: CBORValue, value: CBORValue)] = []
        if let data { pairs.append(("data", .byteString(data))) }
        if let status { pairs.append(("status", .unsigned(status))) }
        return MDocCBOR.encode(.map(pairs))
    }
}
