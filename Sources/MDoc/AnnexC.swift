import CBOR
import Crypto
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

// ISO/IEC 18013-7 Annex C: an mdoc request and response over the W3C Digital Credentials API (protocol
// "org-iso-mdoc"). What is implemented, and where it was confirmed (the ISO text itself is not public):
// - The request data `{deviceRequest, encryptionInfo}`, both base64url (no padding) CBOR, and the response data
//   `{response}`: W3C WPT digital-credentials/mdoc/valid-roundtrip.https.html (ISO/IEC 18013-7 2nd edition
//   Annex C reference vectors, by Martijn Haring, ISO/IEC JTC 1/SC 17/WG 10), walt.id's Annex C specification
//   (waltid-identity annex-c SPEC.md), SMART Health check-in's Annex C wallet.
// - EncryptionInfo = ["dcapi", {"nonce": bstr, "recipientPublicKey": COSE_Key}]: the WPT vector's bytes
//   (82 65 "dcapi" a2 65 "nonce" 50 … 72 "recipientPublicKey" a4 01 02 20 01 21 58 20 …), Multipaz's
//   DigitalCredentials presentment, asitplus vck's EncryptionInfo, walt.id's EncryptionParameters (nonce of at
//   least 16 bytes, ISO/IEC TS 18013-7:2024 Annex C.2).
// - dcapiInfo = [Base64EncryptionInfo, SerializedOrigin] (the base64url string as received, the ASCII
//   serialisation of the caller's origin); SessionTranscript = [null, null, ["dcapi", SHA-256(dcapiInfo)]]:
//   Multipaz, walt.id SPEC.md, asitplus DCAPIInfo.
// - HPKE (RFC 9180) base mode, DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, info = the SessionTranscript's
//   CBOR, aad empty; EncryptedResponse = ["dcapi", {"enc": bstr (the 65-byte uncompressed ephemeral point),
//   "cipherText": bstr}]: Multipaz (HPKE_BASE_P256_SHA256_AES128GCM), walt.id SPEC.md, SMART Health check-in.

/// ISO/IEC 18013-7 Annex C (Digital Credentials API, "org-iso-mdoc"): HPKE sealing of a DeviceResponse to the
/// reader's key, bound to the web origin through the SessionTranscript.
public enum AnnexC {
    /// The Digital Credentials API protocol identifier.
    public static let protocolIdentifier = "org-iso-mdoc"
    /// The tag of EncryptionInfo, the Handover and EncryptedResponse.
    public static let dcapi = "dcapi"
    /// HPKE base mode, DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.
    public static let ciphersuite = HPKE.Ciphersuite(kem: .P256_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .AES_GCM_128)
    /// EncryptionInfo's nonce carries at least 16 bytes of entropy.
    public static let minimumNonceLength = 16
    /// Upper bound of an origin's ASCII serialisation (longer is refused as malformed).
    public static let maximumOriginLength = 2048

    /// Seals `deviceResponse` (the encoded DeviceResponse) to EncryptionInfo's recipient key with `sessionTranscript`
    /// (from `AnnexCRequest.sessionTranscript(origin:)`) as HPKE info and no aad.
    public static func seal(
        deviceResponse: [UInt8], encryptionInfo: AnnexCEncryptionInfo, sessionTranscript: SessionTranscript
    ) throws(TesseraError) -> AnnexCEncryptedResponse {
        do {
            let key = try P256.KeyAgreement.PublicKey(
                x963Representation: encryptionInfo.recipientPublicKey.uncompressedPoint)
            var sender = try HPKE.Sender(
                recipientKey: key, ciphersuite: ciphersuite, info: Data(sessionTranscript.encoded))
            let cipherText = try sender.seal(deviceResponse)
            return AnnexCEncryptedResponse(enc: Array(sender.encapsulatedKey), cipherText: Array(cipherText))
        } catch {
            throw TesseraError(.cryptoError, "18013-7 Annex C: HPKE seal failed")
        }
    }

    /// The reader side: the DeviceResponse bytes inside `response`, decrypted with the recipient private key;
    /// `CRYPTO_ERROR` when it does not decrypt (another key, another origin or EncryptionInfo, or tampered).
    public static func open(
        _ response: AnnexCEncryptedResponse, recipientPrivateKey: P256.KeyAgreement.PrivateKey,
        sessionTranscript: SessionTranscript
    ) throws(TesseraError) -> [UInt8] {
        try hpkeOpen(
            enc: response.enc, cipherText: response.cipherText, privateKey: recipientPrivateKey,
            info: sessionTranscript.encoded, aad: [])
    }

    /// HPKE base-mode open with this ciphersuite, any info and aad (tested against RFC 9180 A.3.1).
    @_spi(Testing) public static func hpkeOpen(
        enc: [UInt8], cipherText: [UInt8], privateKey: P256.KeyAgreement.PrivateKey, info: [UInt8], aad: [UInt8]
    ) throws(TesseraError) -> [UInt8] {
        do {
            var recipient = try HPKE.Recipient(
                privateKey: privateKey, ciphersuite: ciphersuite, info: Data(info), encapsulatedKey: Data(enc))
            return Array(try recipient.open(cipherText, authenticating: aad))
        } catch {
            throw TesseraError(.cryptoError, "18013-7 Annex C: the response does not decrypt")
        }
    }

    /// The ASCII serialisation of an origin (`scheme://host[:port]`, no path, query or fragment), as the
    /// Digital Credentials API passes it; `MDOC_REQUEST_MALFORMED` (field `origin`) otherwise.
    public static func checkOrigin(_ origin: String) throws(TesseraError) {
        let bytes = Array(origin.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumOriginLength,
            bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
            let separator = origin.firstRange(of: "://")
        else { throw requestMalformed("origin", "the origin is not an ASCII serialised origin") }
        let scheme = origin[..<separator.lowerBound]
        let authority = origin[separator.upperBound...]
        guard let first = scheme.utf8.first, (0x61...0x7A).contains(first),
            scheme.utf8.allSatisfy({
                (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || "+-.".utf8.contains($0)
            }),
            !authority.isEmpty, !authority.contains(where: { "/?#".contains($0) })
        else { throw requestMalformed("origin", "the origin is not scheme://host[:port]") }
    }

    static func requestMalformed(_ field: String, _ message: String) -> TesseraError {
        TesseraError(.mdocRequestMalformed, "18013-7 Annex C: \(message)", details: ["field": .string(field)])
    }

    static func responseMalformed(_ message: String) -> TesseraError {
        TesseraError(.mdocResponseMalformed, "18013-7 Annex C: \(message)")
    }
}

/// EncryptionInfo (Annex C): `["dcapi", {"nonce": bstr, "recipientPublicKey": COSE_Key}]`, kept with the base64url
/// text it came as (dcapiInfo hashes that text, not a re-encoding).
public struct AnnexCEncryptionInfo: Sendable, Equatable {
    /// base64url of `bytes`, as received (or as made).
    public let base64url: String
    public let bytes: [UInt8]
    public let nonce: [UInt8]
    /// The reader's HPKE recipient key (EC2, P-256, a point on the curve).
    public let recipientPublicKey: MDocECKey

    /// Parses the request's `encryptionInfo`; `MDOC_REQUEST_MALFORMED` (field `encryptionInfo`) when it is not
    /// base64url CBOR of that shape, the nonce is shorter than 16 bytes or the key is not a P-256 point.
    public init(base64url: String) throws(TesseraError) {
        guard let bytes = Base64URL.decode(base64url), !bytes.isEmpty else {
            throw AnnexC.requestMalformed("encryptionInfo", "encryptionInfo is not base64url")
        }
        let value: CBORValue
        do { value = try MDocCBOR.decode(bytes, "EncryptionInfo") } catch {
            throw AnnexC.requestMalformed("encryptionInfo", error.message)
        }
        guard let array = value.arrayValue, array.count == 2, array[0].textValue == AnnexC.dcapi,
            array[1].mapValue != nil
        else { throw AnnexC.requestMalformed("encryptionInfo", "EncryptionInfo is not [\"dcapi\", {…}]") }
        let parameters = array[1]
        guard let nonce = parameters["nonce"]?.bytesValue, nonce.count >= AnnexC.minimumNonceLength else {
            throw AnnexC.requestMalformed(
                "encryptionInfo", "EncryptionInfo's nonce is not a byte string of at least 16 bytes")
        }
        guard let keyValue = parameters["recipientPublicKey"] else {
            throw AnnexC.requestMalformed("encryptionInfo", "EncryptionInfo has no recipientPublicKey")
        }
        let key: MDocECKey
        do { key = try MDocECKey(keyValue) } catch {
            throw AnnexC.requestMalformed("encryptionInfo", "recipientPublicKey: \(error.message)")
        }
        guard key.curve == 1, (try? P256.KeyAgreement.PublicKey(x963Representation: key.uncompressedPoint)) != nil
        else {
            throw AnnexC.requestMalformed("encryptionInfo", "recipientPublicKey is not a P-256 point")
        }
        self.base64url = base64url
        self.bytes = bytes
        self.nonce = nonce
        recipientPublicKey = key
    }

    /// The reader side: EncryptionInfo for `nonce` (at least 16 random bytes) and the reader's P-256 HPKE key.
    public init(nonce: [UInt8], recipientPublicKey: P256.KeyAgreement.PublicKey) throws(TesseraError) {
        guard nonce.count >= AnnexC.minimumNonceLength else {
            throw .invalidInput("an Annex C nonce needs at least 16 bytes")
        }
        let key = try MDocECKey(uncompressedPoint: Array(recipientPublicKey.x963Representation))
        let parameters: [(key: CBORValue, value: CBORValue)] = [
            (.textString("nonce"), .byteString(nonce)), (.textString("recipientPublicKey"), key.value),
        ]
        bytes = MDocCBOR.encode(.array([.textString(AnnexC.dcapi), .map(parameters)]))
        base64url = Base64URL.encode(bytes)
        self.nonce = nonce
        self.recipientPublicKey = key
    }
}

/// An Annex C request: the Digital Credentials API request data `{deviceRequest, encryptionInfo}`.
public struct AnnexCRequest: Sendable {
    /// base64url of `deviceRequestBytes`, as received.
    public let deviceRequestBase64url: String
    public let deviceRequestBytes: [UInt8]
    public let deviceRequest: DeviceRequest
    public let encryptionInfo: AnnexCEncryptionInfo

    /// Parses both members; `MDOC_REQUEST_MALFORMED` with `details.field` naming the one that does not parse (a
    /// DeviceRequest without document requests included), `UNSUPPORTED_PROTOCOL` for a DeviceRequest version
    /// other than 1.x. readerAuth is parsed, not verified (that needs the holder's trust list and
    /// `sessionTranscript(origin:)`).
    public init(deviceRequest: String, encryptionInfo: String) throws(TesseraError) {
        let info = try AnnexCEncryptionInfo(base64url: encryptionInfo)
        guard let bytes = Base64URL.decode(deviceRequest), !bytes.isEmpty else {
            throw AnnexC.requestMalformed("deviceRequest", "deviceRequest is not base64url")
        }
        let request: DeviceRequest
        do { request = try DeviceRequest(bytes: bytes) } catch {
            if error.code == .unsupportedProtocol { throw error }
            throw AnnexC.requestMalformed("deviceRequest", error.message)
        }
        guard !request.docRequests.isEmpty else {
            throw AnnexC.requestMalformed("deviceRequest", "the DeviceRequest has no document request")
        }
        deviceRequestBase64url = deviceRequest
        deviceRequestBytes = bytes
        self.deviceRequest = request
        self.encryptionInfo = info
    }

    /// From the request data object (JSON) `{"deviceRequest": "…", "encryptionInfo": "…"}`.
    public init(json: JSONValue) throws(TesseraError) {
        guard case .object = json else { throw AnnexC.requestMalformed("request", "the request is not an object") }
        guard case .string(let deviceRequest)? = json["deviceRequest"] else {
            throw AnnexC.requestMalformed("deviceRequest", "deviceRequest is not a string")
        }
        guard case .string(let encryptionInfo)? = json["encryptionInfo"] else {
            throw AnnexC.requestMalformed("encryptionInfo", "encryptionInfo is not a string")
        }
        try self.init(deviceRequest: deviceRequest, encryptionInfo: encryptionInfo)
    }

    /// The reader side: a request from a DeviceRequest (whose readerAuth, if any, signed
    /// `SessionTranscript(dcapiEncryptionInfo: encryptionInfo.base64url, origin:)`).
    public init(deviceRequest: DeviceRequest, encryptionInfo: AnnexCEncryptionInfo) throws(TesseraError) {
        try self.init(deviceRequest: Base64URL.encode(deviceRequest.encoded), encryptionInfo: encryptionInfo.base64url)
    }

    /// The request data object as the Digital Credentials API carries it.
    public var json: JSONValue {
        .object(["deviceRequest": .string(deviceRequestBase64url), "encryptionInfo": .string(encryptionInfo.base64url)])
    }

    /// The SessionTranscript for a request made by `origin`; `MDOC_REQUEST_MALFORMED` (field `origin`) when the
    /// origin is not an ASCII serialised origin.
    public func sessionTranscript(origin: String) throws(TesseraError) -> SessionTranscript {
        try AnnexC.checkOrigin(origin)
        return SessionTranscript(dcapiEncryptionInfo: encryptionInfo.base64url, origin: origin)
    }
}

extension SessionTranscript {
    /// The Annex C SessionTranscript `[null, null, ["dcapi", SHA-256(dcapiInfo)]]` with dcapiInfo =
    /// `[Base64EncryptionInfo, SerializedOrigin]` (CBOR array of two text strings).
    public init(dcapiEncryptionInfo base64url: String, origin: String) {
        let dcapiInfo = MDocCBOR.encode(.array([.textString(base64url), .textString(origin)]))
        let handover: CBORValue = .array([.textString(AnnexC.dcapi), .byteString(MessageDigest.sha256(dcapiInfo))])
        self.init(encoded: MDocCBOR.encode(.array([.null, .null, handover])))
    }
}

/// EncryptedResponse (Annex C): `["dcapi", {"enc": bstr, "cipherText": bstr}]`.
public struct AnnexCEncryptedResponse: Sendable, Equatable {
    /// The HPKE encapsulated key: the sender's ephemeral P-256 point, uncompressed (65 bytes).
    public let enc: [UInt8]
    /// The DeviceResponse sealed with AES-128-GCM (ciphertext ‖ 16-byte tag).
    public let cipherText: [UInt8]

    public init(enc: [UInt8], cipherText: [UInt8]) { self.enc = enc; self.cipherText = cipherText }

    /// Parses an EncryptedResponse; `MDOC_RESPONSE_MALFORMED` when it is not that shape, `enc` is not an
    /// uncompressed P-256 point or `cipherText` is shorter than a GCM tag.
    public init(bytes: [UInt8]) throws(TesseraError) {
        let value: CBORValue
        do { value = try MDocCBOR.decode(bytes, "EncryptedResponse") } catch {
            throw AnnexC.responseMalformed(error.message)
        }
        guard let array = value.arrayValue, array.count == 2, array[0].textValue == AnnexC.dcapi,
            array[1].mapValue != nil, let enc = array[1]["enc"]?.bytesValue,
            let cipherText = array[1]["cipherText"]?.bytesValue
        else { throw AnnexC.responseMalformed("EncryptedResponse is not [\"dcapi\", {enc, cipherText}]") }
        guard enc.count == 65, enc[0] == 0x04 else {
            throw AnnexC.responseMalformed("enc is not an uncompressed P-256 point")
        }
        guard cipherText.count >= 16 else { throw AnnexC.responseMalformed("cipherText is shorter than its tag") }
        self.enc = enc
        self.cipherText = cipherText
    }

    /// From the response data object (JSON) `{"response": base64url(EncryptedResponse)}`.
    public init(json: JSONValue) throws(TesseraError) {
        guard case .string(let text)? = json["response"], let bytes = Base64URL.decode(text) else {
            throw AnnexC.responseMalformed("the response data has no base64url response")
        }
        try self.init(bytes: bytes)
    }

    public var encoded: [UInt8] {
        let body: [(key: CBORValue, value: CBORValue)] = [
            (.textString("enc"), .byteString(enc)), (.textString("cipherText"), .byteString(cipherText)),
        ]
        return MDocCBOR.encode(.array([.textString(AnnexC.dcapi), .map(body)]))
    }

    /// The response data object the Digital Credentials API returns to the page: `{"response": "…"}`.
    public var json: JSONValue { .object(["response": .string(Base64URL.encode(encoded))]) }
}
