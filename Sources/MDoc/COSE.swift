import CBOR
import Crypto
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

/// COSE algorithms mdoc uses (RFC 9053): ECDSA signatures and HMAC 256/256.
public enum COSEAlgorithm: Int64, Sendable {
    case es256 = -7, es384 = -35, es512 = -36
    case hmac256 = 5

    /// The hash of an ECDSA algorithm.
    public var signatureHash: SignatureHash? {
        switch self {
        case .es256: .sha256
        case .es384: .sha384
        case .es512: .sha512
        case .hmac256: nil
        }
    }
}

/// An EC2 COSE_Key (RFC 9052 §7) as mdoc carries device and ephemeral keys: `{1: 2, -1: crv, -2: x, -3: y}`,
/// without the `alg` that WebAuthn's `COSEKey` requires (an `alg` read is not kept). Read and written by the one
/// COSE EC2 codec, `CBOR`'s `COSEEC2Key`.
public struct MDocECKey: Sendable, Equatable {
    /// The key without `alg`.
    public let key: COSEEC2Key
    /// COSE curve: 1 P-256, 2 P-384, 3 P-521.
    public var curve: Int64 { key.curve }
    public var x: [UInt8] { key.x }
    public var y: [UInt8] { key.y }

    public init(curve: Int64, x: [UInt8], y: [UInt8]) throws(TesseraError) {
        do { key = try COSEEC2Key(algorithm: nil, curve: curve, x: x, y: y) } catch {
            throw MDocCBOR.malformed(error.message)
        }
    }

    /// From an uncompressed point `04 || x || y` on P-256, P-384 or P-521.
    public init(uncompressedPoint point: [UInt8]) throws(TesseraError) {
        do { key = try COSEEC2Key(algorithm: nil, uncompressedPoint: point) } catch {
            throw MDocCBOR.malformed(error.message)
        }
    }

    public init(_ value: CBORValue) throws(TesseraError) {
        let parsed: COSEEC2Key
        do { parsed = try COSEEC2Key(value) } catch { throw MDocCBOR.malformed(error.message) }
        try self.init(curve: parsed.curve, x: parsed.x, y: parsed.y)
    }

    /// `{1: 2, -1: crv, -2: x, -3: y}` in that order (as Annex D encodes EDeviceKey and DeviceKey).
    public var value: CBORValue { key.value }
    public var encoded: [UInt8] { key.encoded }
    public var uncompressedPoint: [UInt8] { key.uncompressedPoint }

    /// The key as a DER SubjectPublicKeyInfo (named curve).
    public var subjectPublicKeyInfo: [UInt8] {
        let prefix: String =
            switch curve {
            case 1: "3059301306072a8648ce3d020106082a8648ce3d030107034200"
            case 2: "3076301006072a8648ce3d020106052b81040022036200"
            default: "30819b301006072a8648ce3d020106052b8104002303818600"
            }
        return Hex.decode(prefix)! + uncompressedPoint
    }
}

/// Signs a COSE `Sig_structure`: returns the raw `r || s` signature. Lets a token hold the key.
public typealias COSESigner = @Sendable (_ toBeSigned: [UInt8]) throws(TesseraError) -> [UInt8]

/// A COSE_Sign1 message (RFC 9052 §4.2), payload attached or detached.
public struct COSESign1: Sendable, Equatable {
    /// The serialized protected header map (the bstr's contents).
    public var protectedHeader: [UInt8]
    public var unprotectedHeader: CBORValue
    /// Nil when detached.
    public var payload: [UInt8]?
    public var signature: [UInt8]

    public init(protectedHeader: [UInt8], unprotectedHeader: CBORValue, payload: [UInt8]?, signature: [UInt8]) {
        self.protectedHeader = protectedHeader; self.unprotectedHeader = unprotectedHeader
        self.payload = payload; self.signature = signature
    }

    public init(_ value: CBORValue) throws(TesseraError) {
        var v = value
        if case .tagged(18, let inner) = value { v = inner }
        guard let parts = v.arrayValue, parts.count == 4 else {
            throw MDocCBOR.malformed("COSE_Sign1 is not a 4-element array")
        }
        protectedHeader = try MDocCBOR.bytes(parts[0], "COSE_Sign1 protected header")
        unprotectedHeader = try MDocCBOR.map(parts[1], "COSE_Sign1 unprotected header")
        switch parts[2] {
        case .null: payload = nil
        case .byteString(let b): payload = b
        default: throw MDocCBOR.malformed("COSE_Sign1 payload is neither bytes nor null")
        }
        signature = try MDocCBOR.bytes(parts[3], "COSE_Sign1 signature")
    }

    public var value: CBORValue {
        [
            .byteString(protectedHeader), unprotectedHeader, payload.map { CBORValue.byteString($0) } ?? .null,
            .byteString(signature),
        ]
    }

    /// The `alg` of the protected header.
    public var algorithm: COSEAlgorithm? {
        guard !protectedHeader.isEmpty, let header = try? MDocCBOR.decode(protectedHeader, "protected header"),
            let alg = header[1]?.int64Value
        else { return nil }
        return COSEAlgorithm(rawValue: alg)
    }

    /// The DER certificates of the `x5chain` header (label 33), leaf first.
    public var x5chain: [[UInt8]] {
        let protected = try? MDocCBOR.decode(protectedHeader, "protected header")
        switch unprotectedHeader[33] ?? protected?[33] {
        case .byteString(let der)?: return [der]
        case .array(let items)?: return items.compactMap(\.bytesValue)
        default: return []
        }
    }

    /// `Sig_structure` = ["Signature1", protected, external_aad (empty), payload].
    public static func toBeSigned(protectedHeader: [UInt8], payload: [UInt8]) -> [UInt8] {
        MDocCBOR.encode(["Signature1", .byteString(protectedHeader), .byteString([]), .byteString(payload)])
    }

    /// Verifies the ECDSA signature with a DER SubjectPublicKeyInfo: over the message's own payload, or over
    /// `detachedPayload` when given. With `detachedPayload` the message must carry no payload (ISO/IEC 18013-5
    /// detaches deviceSignature's and readerAuth's): one that carries a payload is invalid, whatever it signs.
    public func verify(publicKey spki: [UInt8], detachedPayload: [UInt8]? = nil) -> Bool {
        guard let hash = algorithm?.signatureHash,
            let content = COSEPayload.content(attached: payload, detached: detachedPayload)
        else { return false }
        let tbs = Self.toBeSigned(protectedHeader: protectedHeader, payload: content)
        return (try? Signatures.verify(signature, over: tbs, publicKey: spki, scheme: .ecdsaPlain(hash))) == true
    }

    /// Signs `payload` (kept in the message unless `detached`). `x5chain` goes into the unprotected header.
    public static func sign(
        payload: [UInt8], detached: Bool = false, algorithm: COSEAlgorithm,
        x5chain: [[UInt8]] = [], signer: COSESigner
    ) throws(TesseraError) -> COSESign1 {
        let protected = MDocCBOR.encode([1: CBORValue(algorithm.rawValue)])
        var unprotected: [(key: CBORValue, value: CBORValue)] = []
        if x5chain.count == 1 {
            unprotected.append((33, .byteString(x5chain[0])))
        } else if !x5chain.isEmpty {
            unprotected.append((33, .array(x5chain.map { .byteString($0) })))
        }
        let signature = try signer(toBeSigned(protectedHeader: protected, payload: payload))
        return COSESign1(
            protectedHeader: protected, unprotectedHeader: .map(unprotected),
            payload: detached ? nil : payload, signature: signature)
    }

    /// A signer over a DER private key (PKCS#8 or SEC 1) held in memory: for tests and lab issuers.
    public static func privateKeySigner(der: [UInt8], algorithm: COSEAlgorithm) -> COSESigner {
        { (tbs: [UInt8]) throws(TesseraError) -> [UInt8] in
            guard let hash = algorithm.signatureHash else { throw .invalidInput("not a signature algorithm") }
            return try Signatures.sign(tbs, privateKey: der, scheme: .ecdsaPlain(hash))
        }
    }
}

enum COSEPayload {
    /// What a COSE message is verified over: the detached payload when the caller gives one (then the message must
    /// carry none: nil), else the message's own.
    static func content(attached: [UInt8]?, detached: [UInt8]?) -> [UInt8]? {
        guard let detached else { return attached }
        return attached == nil ? detached : nil
    }
}

/// A COSE_Mac0 message (RFC 9052 §6.2) with HMAC 256/256, as mdoc's deviceMac.
public struct COSEMac0: Sendable, Equatable {
    public var protectedHeader: [UInt8]
    public var unprotectedHeader: CBORValue
    public var payload: [UInt8]?
    public var tag: [UInt8]

    public init(_ value: CBORValue) throws(TesseraError) {
        var v = value
        if case .tagged(17, let inner) = value { v = inner }
        guard let parts = v.arrayValue, parts.count == 4 else {
            throw MDocCBOR.malformed("COSE_Mac0 is not a 4-element array")
        }
        protectedHeader = try MDocCBOR.bytes(parts[0], "COSE_Mac0 protected header")
        unprotectedHeader = try MDocCBOR.map(parts[1], "COSE_Mac0 unprotected header")
        switch parts[2] {
        case .null: payload = nil
        case .byteString(let b): payload = b
        default: throw MDocCBOR.malformed("COSE_Mac0 payload is neither bytes nor null")
        }
        tag = try MDocCBOR.bytes(parts[3], "COSE_Mac0 tag")
    }

    /// A detached-payload HMAC 256/256 MAC over `payload`.
    public init(detachedPayload payload: [UInt8], key: [UInt8]) {
        protectedHeader = MDocCBOR.encode([1: CBORValue(COSEAlgorithm.hmac256.rawValue)])
        unprotectedHeader = .map([])
        self.payload = nil
        tag = Self.mac(protectedHeader: protectedHeader, payload: payload, key: key)
    }

    public var value: CBORValue {
        [
            .byteString(protectedHeader), unprotectedHeader, payload.map { CBORValue.byteString($0) } ?? .null,
            .byteString(tag),
        ]
    }

    /// `MAC_structure` = ["MAC0", protected, external_aad (empty), payload].
    public static func toBeMACed(protectedHeader: [UInt8], payload: [UInt8]) -> [UInt8] {
        MDocCBOR.encode(["MAC0", .byteString(protectedHeader), .byteString([]), .byteString(payload)])
    }

    static func mac(protectedHeader: [UInt8], payload: [UInt8], key: [UInt8]) -> [UInt8] {
        Array(
            HMAC<SHA256>.authenticationCode(
                for: toBeMACed(protectedHeader: protectedHeader, payload: payload),
                using: SymmetricKey(data: key)))
    }

    /// Checks the tag in constant time; only HMAC 256/256 (alg 5) is accepted. With `detachedPayload` (deviceMac)
    /// the message must carry no payload: one that does is invalid.
    public func verify(key: [UInt8], detachedPayload: [UInt8]? = nil) -> Bool {
        guard let header = try? MDocCBOR.decode(protectedHeader, "protected header"),
            header[1]?.int64Value == COSEAlgorithm.hmac256.rawValue,
            let content = COSEPayload.content(attached: payload, detached: detachedPayload)
        else { return false }
        return ConstantTime.equal(Self.mac(protectedHeader: protectedHeader, payload: content, key: key), tag)
    }
}
