import APDU
import CryptoPrimitives
import TesseraCore
import X509Support

/// Builds LDS 1 files for emulated chips and tests (the inverse of the LDS parsers).
public enum LDSBuilder {
    /// EF.COM with LDS version "0107" and Unicode version "040000" by default.
    public static func com(dataGroups: [Int], ldsVersion: String = "0107", unicodeVersion: String = "040000") -> [UInt8]
    {
        let tags = dataGroups.compactMap { LDSFile(dataGroup: $0)?.tag }
        return TLV(
            tag: 0x60,
            value: TLV.encode(tag: 0x5F01, value: Array(ldsVersion.utf8))
                + TLV.encode(tag: 0x5F36, value: Array(unicodeVersion.utf8))
                + TLV.encode(tag: 0x5C, value: tags)
        ).encoded
    }

    /// DG1 from the MRZ text (line breaks removed). Throws INVALID_INPUT for a length other than 88, 72 or 90.
    public static func dg1(mrz: String) throws(TesseraError) -> [UInt8] {
        let text = mrz.filter { $0 != "\n" && $0 != "\r" }
        guard [88, 72, 90].contains(text.utf8.count), text.allSatisfy({ $0.isASCII }) else {
            throw .invalidInput("MRZ must be 88 (TD3), 72 (TD2) or 90 (TD1) ASCII characters")
        }
        return TLV(tag: 0x61, value: TLV.encode(tag: 0x5F1F, value: Array(text.utf8))).encoded
    }

    /// DG2 with one ISO/IEC 19794-5:2005 facial record around a JPEG or JPEG 2000 image of the given size.
    public static func dg2(image: [UInt8], width: Int, height: Int) throws(TesseraError) -> [UInt8] {
        guard !image.isEmpty, image.count < 1 << 24, (1...65535).contains(width), (1...65535).contains(height) else {
            throw .invalidInput("bad face image or dimensions")
        }
        let mime = LDSParsing.mimeType(of: image)
        guard mime == "image/jpeg" || mime == "image/jp2" else {
            throw .invalidInput("face image must be JPEG or JPEG 2000")
        }
        func u16(_ v: Int) -> [UInt8] { [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
        func u32(_ v: Int) -> [UInt8] {
            [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
        }
        let blockLength = 20 + 12 + image.count
        var record = Array("FAC".utf8) + [0] + Array("010".utf8) + [0] + u32(14 + blockLength) + u16(1)
        // Facial information: length, 0 feature points, gender, eye, hair, feature mask, expression, pose, uncertainty.
        record += u32(blockLength) + u16(0) + [0, 0, 0] + [0, 0, 0] + u16(0) + [0, 0, 0] + [0, 0, 0]
        // Image information: full frontal, data type, width, height, 24-bit RGB, digital still, device 0, quality 0.
        record +=
            [0x01, mime == "image/jpeg" ? 0x00 : 0x01] + u16(width) + u16(height) + [0x01, 0x02] + u16(0) + u16(0)
        record += image
        let header = TLV(
            tag: 0xA1,
            value: TLV.encode(tag: 0x80, value: [0x01, 0x01])
                + TLV.encode(tag: 0x81, value: [0x02])
                + TLV.encode(tag: 0x87, value: [0x01, 0x01])
                + TLV.encode(tag: 0x88, value: [0x00, 0x08])
        ).encoded
        let bit = TLV(tag: 0x7F60, value: header + TLV.encode(tag: 0x5F2E, value: record)).encoded
        let group = TLV(tag: 0x7F61, value: TLV.encode(tag: 0x02, value: [0x01]) + bit).encoded
        return TLV(tag: 0x75, value: group).encoded
    }

    /// DG7 with one displayed signature image.
    public static func dg7(image: [UInt8]) -> [UInt8] {
        TLV(tag: 0x67, value: TLV.encode(tag: 0x02, value: [0x01]) + TLV.encode(tag: 0x5F43, value: image)).encoded
    }

    /// DG11 from the set text fields (images other than proof of citizenship are not written).
    public static func dg11(_ d: DG11) -> [UInt8] {
        var items: [(UInt32, [UInt8])] = []
        func add(_ tag: UInt32, _ s: String?) { if let s { items.append((tag, Array(s.utf8))) } }
        add(0x5F0E, d.fullName)
        if !d.otherNames.isEmpty {
            let inner =
                TLV.encode(tag: 0x02, value: [UInt8(min(d.otherNames.count, 255))])
                + d.otherNames.flatMap { TLV.encode(tag: 0x5F0F, value: Array($0.utf8)) }
            items.append((0xA0, inner))
        }
        add(0x5F10, d.personalNumber); add(0x5F2B, d.fullDateOfBirth); add(0x5F11, d.placeOfBirth)
        add(0x5F42, d.address); add(0x5F12, d.telephone); add(0x5F13, d.profession); add(0x5F14, d.title)
        add(0x5F15, d.personalSummary)
        if let p = d.proofOfCitizenship { items.append((0x5F16, p.data)) }
        for n in d.otherTravelDocumentNumbers { add(0x5F17, n) }
        add(0x5F18, d.custodyInformation)
        return tagListed(0x6B, items, groupTag: 0x5F0F)
    }

    /// DG12 from the set text fields.
    public static func dg12(_ d: DG12) -> [UInt8] {
        var items: [(UInt32, [UInt8])] = []
        func add(_ tag: UInt32, _ s: String?) { if let s { items.append((tag, Array(s.utf8))) } }
        add(0x5F19, d.issuingAuthority); add(0x5F26, d.dateOfIssue)
        if !d.otherPersons.isEmpty {
            items.append(
                (
                    0xA0,
                    TLV.encode(tag: 0x02, value: [UInt8(min(d.otherPersons.count, 255))])
                        + d.otherPersons.flatMap { TLV.encode(tag: 0x5F1A, value: Array($0.utf8)) }
                ))
        }
        add(0x5F1B, d.endorsements); add(0x5F1C, d.taxOrExitRequirements)
        if let f = d.frontImage { items.append((0x5F1D, f.data)) }
        if let r = d.rearImage { items.append((0x5F1E, r.data)) }
        add(0x5F55, d.personalizationTime); add(0x5F56, d.personalizationDeviceSerial)
        return tagListed(0x6C, items, groupTag: 0x5F1A)
    }

    /// DG14 from a DER SET OF SecurityInfo.
    public static func dg14(securityInfos: [UInt8]) -> [UInt8] { TLV(tag: 0x6E, value: securityInfos).encoded }

    /// DG15 from a DER SubjectPublicKeyInfo.
    public static func dg15(publicKeyInfo: [UInt8]) -> [UInt8] { TLV(tag: 0x6F, value: publicKeyInfo).encoded }

    /// DG14 content announcing ECDSA active authentication with `hash` (ActiveAuthenticationInfo, Doc 9303 Part 11 §6.1).
    public static func activeAuthenticationInfo(hash: SignatureHash) -> [UInt8] {
        let alg = AlgorithmOIDs.ecdsaPlain.first { $0.value == hash }!.key
        return ASN1.setOf([ASN1.seq([ASN1.oid("2.23.136.1.1.5"), ASN1.int(1), ASN1.oid(alg)])])
    }

    /// A ChipAuthenticationPublicKeyInfo (id-PK-ECDH, TR-03110 Part 3 §A.1.1.2) for DG14: the EC point
    /// `publicKey` on standardized domain parameters `parameterId` (AlgorithmIdentifier standardizedDomainParameters).
    public static func chipAuthenticationPublicKeyInfo(parameterId: Int, publicKey: [UInt8], keyId: Int?) -> [UInt8] {
        let algorithm = ASN1.seq([
            ASN1.oid(ChipAuthenticationMapping.standardizedDomainParameters), ASN1.int(parameterId),
        ])
        let spki = ASN1.seq([algorithm, ASN1.node(ASN1.bitString, [0] + publicKey)])
        return ASN1.seq([ASN1.oid(ChipAuthenticationMapping.idPKECDH), spki] + (keyId.map { [ASN1.int($0)] } ?? []))
    }

    /// `tag { 5C taglist, items… }` as DG11/DG12 require.
    private static func tagListed(_ tag: UInt32, _ items: [(UInt32, [UInt8])], groupTag: UInt32) -> [UInt8] {
        let list = items.flatMap { $0.0 == 0xA0 ? TLV.tagBytes(groupTag) : TLV.tagBytes($0.0) }
        let body = TLV.encode(tag: 0x5C, value: list) + items.flatMap { TLV.encode(tag: $0.0, value: $0.1) }
        return TLV(tag: tag, value: body).encoded
    }
}
