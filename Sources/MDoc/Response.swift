import CBOR
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

/// IssuerSignedItem (§8.3.2.1.2.2), kept with the tag-24 bytes its MSO digest is computed over.
public struct IssuerSignedItem: Sendable, Equatable {
    /// `#6.24(bstr)` as encoded: the digest input.
    public let taggedBytes: [UInt8]
    public let digestID: UInt64
    public let random: [UInt8]
    public let elementIdentifier: String
    public let elementValue: CBORValue

    public init(_ value: CBORValue) throws(TesseraError) {
        let inner = try MDocCBOR.untag24(value, "IssuerSignedItemBytes")
        let item = try MDocCBOR.map(try MDocCBOR.decode(inner, "IssuerSignedItem"), "IssuerSignedItem")
        taggedBytes = MDocCBOR.tag24Bytes(inner)
        digestID = try MDocCBOR.uint(item["digestID"], "digestID")
        random = try MDocCBOR.bytes(item["random"], "random")
        elementIdentifier = try MDocCBOR.text(item["elementIdentifier"], "elementIdentifier")
        guard let v = item["elementValue"] else { throw MDocCBOR.malformed("IssuerSignedItem lacks elementValue") }
        elementValue = v
    }

    public static func make(digestID: UInt64, random: [UInt8], identifier: String, value: CBORValue)
        throws(TesseraError) -> IssuerSignedItem
    {
        let item: CBORValue = [
            "digestID": .unsigned(digestID), "random": .byteString(random),
            "elementIdentifier": .textString(identifier), "elementValue": value,
        ]
        return try IssuerSignedItem(MDocCBOR.tag24(MDocCBOR.encode(item)))
    }

    var value: CBORValue { (try? MDocCBOR.decode(taggedBytes, "IssuerSignedItemBytes")) ?? .null }
}

/// IssuerSigned (§8.3.2.1.2.2): the issuer's elements by namespace and issuerAuth (COSE_Sign1 over the MSO).
public struct IssuerSigned: Sendable, Equatable {
    public let nameSpaces: [(namespace: String, items: [IssuerSignedItem])]
    public let issuerAuth: COSESign1

    public static func == (a: IssuerSigned, b: IssuerSigned) -> Bool { a.value == b.value }

    public init(nameSpaces: [(namespace: String, items: [IssuerSignedItem])], issuerAuth: COSESign1) {
        self.nameSpaces = nameSpaces; self.issuerAuth = issuerAuth
    }

    public init(_ value: CBORValue) throws(TesseraError) {
        let v = try MDocCBOR.map(value, "IssuerSigned")
        var spaces: [(namespace: String, items: [IssuerSignedItem])] = []
        if let ns = v["nameSpaces"] {
            for (name, list) in try MDocCBOR.textKeyed(ns, "IssuerNameSpaces") {
                var items: [IssuerSignedItem] = []
                for item in try MDocCBOR.array(list, "namespace \(name)") { items.append(try IssuerSignedItem(item)) }
                spaces.append((name, items))
            }
        }
        nameSpaces = spaces
        guard let auth = v["issuerAuth"] else { throw MDocCBOR.malformed("IssuerSigned lacks issuerAuth") }
        issuerAuth = try COSESign1(auth)
    }

    public init(bytes: [UInt8]) throws(TesseraError) { try self.init(try MDocCBOR.decode(bytes, "IssuerSigned")) }

    public var value: CBORValue {
        var spaces: [(key: CBORValue, value: CBORValue)] = []
        for ns in nameSpaces { spaces.append((key: .textString(ns.namespace), value: .array(ns.items.map(\.value)))) }
        return ["nameSpaces": .map(spaces), "issuerAuth": issuerAuth.value]
    }

    public var encoded: [UInt8] { MDocCBOR.encode(value) }

    /// The same IssuerSigned with only the elements `keep` allows.
    public func disclosing(_ keep: (String, String) -> Bool) -> IssuerSigned {
        IssuerSigned(
            nameSpaces: nameSpaces.compactMap { ns -> (namespace: String, items: [IssuerSignedItem])? in
                let items = ns.items.filter { keep(ns.namespace, $0.elementIdentifier) }
                return items.isEmpty ? nil : (ns.namespace, items)
            }, issuerAuth: issuerAuth)
    }
}

/// MobileSecurityObject (§9.1.2.4): digests of every element, the device key, docType and validity.
public struct MobileSecurityObject: Sendable, Equatable {
    public let version: String
    /// "SHA-256", "SHA-384" or "SHA-512".
    public let digestAlgorithm: String
    /// namespace → digestID → digest.
    public let valueDigests: [String: [UInt64: [UInt8]]]
    public let deviceKey: MDocECKey
    public let docType: String
    public let signed: Date
    public let validFrom: Date
    public let validUntil: Date

    public init(_ value: CBORValue) throws(TesseraError) {
        let v = try MDocCBOR.map(value, "MobileSecurityObject")
        version = try MDocCBOR.text(v["version"], "MSO version")
        digestAlgorithm = try MDocCBOR.text(v["digestAlgorithm"], "MSO digestAlgorithm")
        var digests: [String: [UInt64: [UInt8]]] = [:]
        for (ns, map) in try MDocCBOR.textKeyed(v["valueDigests"], "MSO valueDigests") {
            var entries: [UInt64: [UInt8]] = [:]
            for pair in map.mapValue ?? [] {
                guard case .unsigned(let id) = pair.key, let d = pair.value.bytesValue else {
                    throw MDocCBOR.malformed("MSO digest entry of \(ns) is not uint → bstr")
                }
                entries[id] = d
            }
            digests[ns] = entries
        }
        valueDigests = digests
        let info = try MDocCBOR.map(v["deviceKeyInfo"], "MSO deviceKeyInfo")
        guard let key = info["deviceKey"] else { throw MDocCBOR.malformed("MSO lacks deviceKey") }
        deviceKey = try MDocECKey(key)
        docType = try MDocCBOR.text(v["docType"], "MSO docType")
        let validity = try MDocCBOR.map(v["validityInfo"], "MSO validityInfo")
        signed = try Self.tdate(validity["signed"], "signed")
        validFrom = try Self.tdate(validity["validFrom"], "validFrom")
        validUntil = try Self.tdate(validity["validUntil"], "validUntil")
    }

    /// The MSO inside an issuerAuth payload (`#6.24(bstr .cbor MobileSecurityObject)`).
    public init(issuerAuth: COSESign1) throws(TesseraError) {
        guard let payload = issuerAuth.payload else { throw MDocCBOR.malformed("issuerAuth has no payload") }
        let inner = try MDocCBOR.untag24(
            try MDocCBOR.decode(payload, "MobileSecurityObjectBytes"), "MobileSecurityObjectBytes")
        try self.init(try MDocCBOR.decode(inner, "MobileSecurityObject"))
    }

    /// `tdate`: `#6.0(text)`, RFC 3339 without fractions, UTC ("Z").
    static func tdate(_ value: CBORValue?, _ what: String) throws(TesseraError) -> Date {
        guard case .tagged(0, .textString(let text))? = value, let date = MDocDate.parse(text) else {
            throw MDocCBOR.malformed("MSO \(what) is not a tdate")
        }
        return date
    }

    /// The digest of `bytes` with this MSO's algorithm; nil for an unknown algorithm.
    public func digest(_ bytes: [UInt8]) -> [UInt8]? { MDocDate.digest(digestAlgorithm, bytes) }
}

/// tdate/full-date text and digest helpers.
public enum MDocDate {
    /// Parses "YYYY-MM-DDTHH:MM:SS[.fff](Z|±hh:mm)".
    public static func parse(_ text: String) -> Date? { Date(rfc3339: text) }

    /// "YYYY-MM-DDTHH:MM:SSZ" (whole seconds, UTC), as `tdate` should be encoded.
    public static func format(_ date: Date) -> String { date.iso8601Seconds }

    /// `#6.0(tdate)`.
    public static func tdate(_ date: Date) -> CBORValue { .tagged(0, .textString(format(date))) }

    /// `#6.1004(full-date)` from "YYYY-MM-DD".
    public static func fullDate(_ text: String) -> CBORValue { .tagged(1004, .textString(text)) }

    static func digest(_ algorithm: String, _ bytes: [UInt8]) -> [UInt8]? {
        switch algorithm {
        case "SHA-256": MessageDigest.sha256(bytes)
        case "SHA-384": MessageDigest.sha384(bytes)
        case "SHA-512": MessageDigest.sha512(bytes)
        default: nil
        }
    }
}

/// DeviceSigned (§8.3.2.1.2.2): device-signed elements and DeviceAuth.
public struct DeviceSigned: Sendable, Equatable {
    /// DeviceNameSpacesBytes' contents.
    public let nameSpacesBytes: [UInt8]
    public let deviceSignature: COSESign1?
    public let deviceMac: COSEMac0?

    public init(nameSpacesBytes: [UInt8], deviceSignature: COSESign1?, deviceMac: COSEMac0?) {
        self.nameSpacesBytes = nameSpacesBytes; self.deviceSignature = deviceSignature; self.deviceMac = deviceMac
    }

    public init(_ value: CBORValue) throws(TesseraError) {
        let v = try MDocCBOR.map(value, "DeviceSigned")
        nameSpacesBytes = try MDocCBOR.untag24(v["nameSpaces"], "DeviceNameSpacesBytes")
        let auth = try MDocCBOR.map(v["deviceAuth"], "DeviceAuth")
        deviceSignature = try auth["deviceSignature"].map { s throws(TesseraError) in try COSESign1(s) }
        deviceMac = try auth["deviceMac"].map { m throws(TesseraError) in try COSEMac0(m) }
        guard (deviceSignature == nil) != (deviceMac == nil) else {
            throw MDocCBOR.malformed("DeviceAuth must hold exactly one of deviceSignature and deviceMac")
        }
    }

    public var value: CBORValue {
        let auth: CBORValue =
            if let deviceSignature { ["deviceSignature": deviceSignature.value] } else {
                ["deviceMac": deviceMac?.value ?? .null]
            }
        return ["nameSpaces": MDocCBOR.tag24(nameSpacesBytes), "deviceAuth": auth]
    }

    /// DeviceAuthenticationBytes (§9.1.3.4): `#6.24(["DeviceAuthentication", SessionTranscript, DocType, DeviceNameSpacesBytes])`.
    public static func deviceAuthenticationBytes(
        sessionTranscript: SessionTranscript, docType: String,
        nameSpacesBytes: [UInt8]
    ) -> [UInt8] {
        let inner =
            [0x84] + MDocCBOR.encode("DeviceAuthentication") + sessionTranscript.encoded
            + MDocCBOR.encode(.textString(docType)) + MDocCBOR.tag24Bytes(nameSpacesBytes)
        return MDocCBOR.tag24Bytes(inner)
    }

    /// DeviceSigned with no device-signed elements and a deviceSignature made by `signer` (the device key).
    public static func signed(
        sessionTranscript: SessionTranscript, docType: String, algorithm: COSEAlgorithm = .es256,
        signer: COSESigner
    ) throws(TesseraError) -> DeviceSigned {
        let empty = MDocCBOR.encode(.map([]))
        let payload = deviceAuthenticationBytes(
            sessionTranscript: sessionTranscript, docType: docType, nameSpacesBytes: empty)
        let sig = try COSESign1.sign(payload: payload, detached: true, algorithm: algorithm, signer: signer)
        return DeviceSigned(nameSpacesBytes: empty, deviceSignature: sig, deviceMac: nil)
    }
}

/// One Document of a DeviceResponse.
public struct MDocDocument: Sendable, Equatable {
    public let docType: String
    public let issuerSigned: IssuerSigned
    public let deviceSigned: DeviceSigned?

    public init(docType: String, issuerSigned: IssuerSigned, deviceSigned: DeviceSigned?) {
        self.docType = docType; self.issuerSigned = issuerSigned; self.deviceSigned = deviceSigned
    }

    public init(_ value: CBORValue) throws(TesseraError) {
        let v = try MDocCBOR.map(value, "Document")
        docType = try MDocCBOR.text(v["docType"], "Document docType")
        issuerSigned = try IssuerSigned(try MDocCBOR.map(v["issuerSigned"], "IssuerSigned"))
        deviceSigned = try v["deviceSigned"].map { d throws(TesseraError) in try DeviceSigned(d) }
    }

    public var value: CBORValue {
        var pairs: [(key: CBORValue, value: CBORValue)] = [
            ("docType", .textString(docType)), ("issuerSigned", issuerSigned.value),
        ]
        if let deviceSigned { pairs.append(("deviceSigned", deviceSigned.value)) }
        return .map(pairs)
    }
}

/// DeviceResponse (§8.3.2.1.2.2).
public struct DeviceResponse: Sendable, Equatable {
    public let version: String
    public let documents: [MDocDocument]
    /// 0 OK, 10 general error, 11 CBOR decoding error, 12 CBOR validation error.
    public let status: UInt64

    public init(documents: [MDocDocument], status: UInt64 = 0) {
        version = "1.0"; self.documents = documents; self.status = status
    }

    public init(bytes: [UInt8]) throws(TesseraError) {
        let value = try MDocCBOR.map(try MDocCBOR.decode(bytes, "DeviceResponse"), "DeviceResponse")
        version = try MDocCBOR.text(value["version"], "DeviceResponse version")
        guard version.hasPrefix("1.") else {
            throw TesseraError(.unsupportedProtocol, "DeviceResponse version \(version)")
        }
        var docs: [MDocDocument] = []
        if let list = value["documents"] {
            for d in try MDocCBOR.array(list, "documents") { docs.append(try MDocDocument(d)) }
        }
        documents = docs
        status = try MDocCBOR.uint(value["status"], "DeviceResponse status")
    }

    public var encoded: [UInt8] {
        var pairs: [(key: CBORValue, value: CBORValue)] = [("version", .textString(version))]
        if !documents.isEmpty { pairs.append(("documents", .array(documents.map(\.value)))) }
        pairs.append(("status", .unsigned(status)))
        return MDocCBOR.encode(.map(pairs))
    }
}
