import CBOR
import CryptoPrimitives
import TesseraCore
import X509Support

/// The mDL namespace and docType of ISO/IEC 18013-5 §7.
public enum MDL {
    public static let docType = "org.iso.18013.5.1.mDL"
    public static let namespace = "org.iso.18013.5.1"
    /// Elements a kiosk asks for by default: portrait, names, birth date, document number, expiry, issuing country.
    public static let defaultElements = [
        "portrait", "family_name", "given_name", "birth_date", "document_number",
        "expiry_date", "issuing_country",
    ]
}

/// One document request (§8.3.2.1.2.1): the ItemsRequest as sent (signed by readerAuth) and its readerAuth.
public struct DocRequest: Sendable, Equatable {
    /// ItemsRequestBytes' contents: the encoded ItemsRequest.
    public let itemsRequestBytes: [UInt8]
    public let docType: String
    /// namespace → [(element identifier, intent to retain)], in request order.
    public let nameSpaces: [(namespace: String, elements: [(identifier: String, intentToRetain: Bool)])]
    public let readerAuth: COSESign1?

    public static func == (a: DocRequest, b: DocRequest) -> Bool {
        a.itemsRequestBytes == b.itemsRequestBytes && a.readerAuth == b.readerAuth
    }

    init(itemsRequestBytes: [UInt8], readerAuth: COSESign1?) throws(TesseraError) {
        let items = try MDocCBOR.map(try MDocCBOR.decode(itemsRequestBytes, "ItemsRequest"), "ItemsRequest")
        self.itemsRequestBytes = itemsRequestBytes
        self.readerAuth = readerAuth
        docType = try MDocCBOR.text(items["docType"], "ItemsRequest docType")
        var spaces: [(namespace: String, elements: [(identifier: String, intentToRetain: Bool)])] = []
        for (ns, elements) in try MDocCBOR.textKeyed(items["nameSpaces"], "ItemsRequest nameSpaces") {
            var list: [(identifier: String, intentToRetain: Bool)] = []
            for (id, retain) in try MDocCBOR.textKeyed(elements, "ItemsRequest namespace \(ns)") {
                guard let flag = retain.boolValue else {
                    throw MDocCBOR.malformed("IntentToRetain of \(id) is not a bool")
                }
                list.append((id, flag))
            }
            spaces.append((ns, list))
        }
        nameSpaces = spaces
    }

    /// A request for `elements` (intent to retain false), signed by `readerAuth` when given.
    public static func make(
        docType: String, elements: [String: [String]], sessionTranscript: SessionTranscript,
        readerAuth: (chain: [[UInt8]], algorithm: COSEAlgorithm, signer: COSESigner)? = nil
    )
        throws(TesseraError) -> DocRequest
    {
        var spaces: [(key: CBORValue, value: CBORValue)] = []
        for ns in elements.keys.sorted() {
            var flags: [(key: CBORValue, value: CBORValue)] = []
            for id in elements[ns] ?? [] { flags.append((key: .textString(id), value: .bool(false))) }
            spaces.append((key: .textString(ns), value: .map(flags)))
        }
        let items = MDocCBOR.encode(["docType": .textString(docType), "nameSpaces": .map(spaces)])
        var auth: COSESign1?
        if let readerAuth {
            auth = try COSESign1.sign(
                payload: readerAuthenticationBytes(sessionTranscript: sessionTranscript, itemsRequestBytes: items),
                detached: true, algorithm: readerAuth.algorithm, x5chain: readerAuth.chain, signer: readerAuth.signer)
        }
        return try DocRequest(itemsRequestBytes: items, readerAuth: auth)
    }

    /// ReaderAuthenticationBytes (§9.1.4): `#6.24(["ReaderAuthentication", SessionTranscript, ItemsRequestBytes])`.
    public static func readerAuthenticationBytes(sessionTranscript: SessionTranscript, itemsRequestBytes: [UInt8])
        -> [UInt8]
    {
        let inner =
            [0x83] + MDocCBOR.encode("ReaderAuthentication") + sessionTranscript.encoded
            + MDocCBOR.tag24Bytes(itemsRequestBytes)
        return MDocCBOR.tag24Bytes(inner)
    }

    var value: CBORValue {
        var pairs: [(key: CBORValue, value: CBORValue)] = [("itemsRequest", MDocCBOR.tag24(itemsRequestBytes))]
        if let readerAuth { pairs.append(("readerAuth", readerAuth.value)) }
        return .map(pairs)
    }
}

/// DeviceRequest (§8.3.2.1.2.1).
public struct DeviceRequest: Sendable, Equatable {
    public let version: String
    public let docRequests: [DocRequest]

    public init(docRequests: [DocRequest]) { version = "1.0"; self.docRequests = docRequests }

    public init(bytes: [UInt8]) throws(TesseraError) {
        let value = try MDocCBOR.map(try MDocCBOR.decode(bytes, "DeviceRequest"), "DeviceRequest")
        version = try MDocCBOR.text(value["version"], "DeviceRequest version")
        guard version.hasPrefix("1.") else {
            throw TesseraError(.unsupportedProtocol, "DeviceRequest version \(version)")
        }
        var requests: [DocRequest] = []
        for entry in try MDocCBOR.array(value["docRequests"], "docRequests") {
            let items = try MDocCBOR.untag24(entry["itemsRequest"], "itemsRequest")
            let auth = try entry["readerAuth"].map { v throws(TesseraError) in try COSESign1(v) }
            requests.append(try DocRequest(itemsRequestBytes: items, readerAuth: auth))
        }
        docRequests = requests
    }

    public var encoded: [UInt8] {
        MDocCBOR.encode(["version": .textString(version), "docRequests": .array(docRequests.map(\.value))])
    }
}

/// The reader's readerAuth material: its private key and certificate chain (DER, leaf first).
public struct ReaderAuthKey: Sendable {
    public let chain: [[UInt8]]
    public let algorithm: COSEAlgorithm
    public let signer: COSESigner

    /// `privateKey`: PKCS#8 or SEC 1, PEM or DER, on P-256, P-384 or P-521; the leaf of `chain` must hold its
    /// public key.
    public init(privateKey bytes: [UInt8], chain: [[UInt8]]) throws(TesseraError) {
        let der =
            PEM.blocks(bytes, label: "PRIVATE KEY").first ?? PEM.blocks(bytes, label: "EC PRIVATE KEY").first ?? bytes
        let spki = try Signatures.publicKey(ofPrivateKey: der)
        let bits = try Signatures.describe(publicKey: spki).bits
        algorithm = bits > 384 ? .es512 : bits > 256 ? .es384 : .es256
        guard let leaf = chain.first, let certificate = try? ParsedCertificate(der: leaf),
            certificate.subjectPublicKeyInfo.suffix(64) == spki.suffix(64)
        else { throw .invalidInput("the reader certificate does not hold the reader key") }
        self.chain = chain
        signer = COSESign1.privateKeySigner(der: der, algorithm: algorithm)
    }
}
