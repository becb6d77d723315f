import APDU
import CryptoPrimitives
import MRZ
import TesseraCore
import X509Support

/// EF.COM (Doc 9303 Part 10 §4.6.1): LDS and Unicode versions and the tags of the present data groups.
public struct EFCOM: Sendable, Equatable {
    /// "1.7" from tag 5F01 ("0107").
    public var ldsVersion: String?
    /// "4.0.0" from tag 5F36 ("040000").
    public var unicodeVersion: String?
    /// Raw tag list (5C).
    public var tags: [UInt8]
    /// Data group numbers named by the tag list, in order; unknown tags are skipped.
    public var dataGroups: [Int]

    public init(ldsVersion: String?, unicodeVersion: String?, dataGroups: [Int]) {
        self.ldsVersion = ldsVersion; self.unicodeVersion = unicodeVersion; self.dataGroups = dataGroups
        tags = dataGroups.compactMap { LDSFile(dataGroup: $0)?.tag }
    }

    /// Parses the file content (tag 60).
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .com)
        var lds: String?, uni: String?, list: [UInt8]?
        for c in try outer.children() {
            switch c.tag {
            case 0x5F01:
                let d = LDSParsing.text(c.value)
                lds = d.count == 4 ? "\(Int(d.prefix(2)) ?? 0).\(Int(d.suffix(2)) ?? 0)" : d
            case 0x5F36:
                let d = LDSParsing.text(c.value)
                if d.count == 6 {
                    let a = Array(d)
                    uni = "\(Int(String(a[0..<2])) ?? 0).\(Int(String(a[2..<4])) ?? 0).\(Int(String(a[4..<6])) ?? 0)"
                } else {
                    uni = d
                }
            case 0x5C: list = c.value
            default: break
            }
        }
        guard let list else { throw TesseraError(.malformedData, "EF.COM without a tag list (5C)") }
        ldsVersion = lds; unicodeVersion = uni; tags = list
        dataGroups = list.compactMap { LDSFile(tag: $0)?.dataGroupNumber }
    }
}

/// DG1: the MRZ as printed (tag 5F1F), without line breaks. Parse it with the MRZ module.
public struct DG1: Sendable, Equatable {
    public var mrz: String
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(1))
        guard let m = try outer.child(0x5F1F) else { throw TesseraError(.malformedData, "DG1 without MRZ (5F1F)") }
        guard m.value.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw TesseraError(.malformedData, "DG1 MRZ is not ASCII")
        }
        mrz = String(decoding: m.value, as: UTF8.self)
    }

    /// The MRZ parsed and check-digit verified by the MRZ module (lines split by document format).
    /// Throws MRZ_INVALID.
    public func parsedMRZ() throws(TesseraError) -> MRZ {
        let chars = Array(mrz)
        let width = chars.count == 90 ? 30 : chars.count == 72 ? 36 : 44
        let lines = stride(from: 0, to: chars.count, by: width).map { String(chars[$0..<min($0 + width, chars.count)]) }
        return try MRZ(lines.joined(separator: "\n"))
    }
}

/// How a face image was encoded in DG2.
public enum BiometricEncoding: String, Sendable {
    case iso19794_5 = "ISO/IEC 19794-5"
    case iso39794_5 = "ISO/IEC 39794-5"
}

/// An image taken from a data group, with its MIME type and (when known) its size in pixels.
public struct LDSImage: Sendable, Equatable {
    /// "image/jpeg", "image/jp2", "image/x-wsq" or "application/octet-stream".
    public var mimeType: String
    public var data: [UInt8]
    public var width: Int?
    public var height: Int?

    public init(mimeType: String, data: [UInt8], width: Int? = nil, height: Int? = nil) {
        self.mimeType = mimeType; self.data = data; self.width = width; self.height = height
    }
}

/// DG2: encoded face images (Doc 9303 Part 10 §4.7.2, ISO/IEC 7816-11 biometric templates).
public struct DG2: Sendable, Equatable {
    public struct Face: Sendable, Equatable {
        public var image: LDSImage
        public var encoding: BiometricEncoding
    }
    public var faces: [Face]

    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(2))
        guard let group = try outer.child(0x7F61) else { throw TesseraError(.malformedData, "DG2 without 7F61") }
        var faces = [Face]()
        for bit in try group.children() where bit.tag == 0x7F60 {
            for c in try bit.children() {
                switch c.tag {
                case 0x5F2E:
                    if Array(c.value.prefix(4)) == Array("FAC".utf8) + [0] {
                        faces += try FaceRecord19794.parse(c.value).map { Face(image: $0, encoding: .iso19794_5) }
                    } else if let img = try LDSParsing.scanForImage(in: c.value) {
                        faces.append(Face(image: img, encoding: .iso39794_5))
                    }
                case 0x7F2E:
                    if let img = try LDSParsing.scanForImage(inTLV: c, depth: 0) {
                        faces.append(Face(image: img, encoding: .iso39794_5))
                    }
                default: break
                }
            }
        }
        guard !faces.isEmpty else { throw TesseraError(.malformedData, "DG2 holds no face image") }
        self.faces = faces
    }
}

/// ISO/IEC 19794-5:2005 facial record ("FAC\0", version "010\0").
enum FaceRecord19794 {
    static func parse(_ b: [UInt8]) throws(TesseraError) -> [LDSImage] {
        func u16(_ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
        func u32(_ i: Int) -> Int { Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3]) }
        guard b.count >= 14 else { throw TesseraError(.malformedData, "facial record header truncated") }
        let version = Array(b[4..<8])
        guard version == Array("010".utf8) + [0] else {
            // Other versions (e.g. 19794-5:2011) have different headers: fall back to the image signature.
            guard let img = try LDSParsing.scanForImage(in: b) else {
                throw TesseraError(.malformedData, "facial record without a recognizable image")
            }
            return [img]
        }
        let count = u16(12)
        guard count >= 1, count <= 16 else { throw TesseraError(.malformedData, "facial record with \(count) images") }
        var offset = 14
        var out = [LDSImage]()
        for _ in 0..<count {
            guard offset + 20 <= b.count else { throw TesseraError(.malformedData, "facial information truncated") }
            let blockLength = u32(offset)
            let features = u16(offset + 4)
            let imageInfo = offset + 20 + features * 8
            guard imageInfo + 12 <= b.count else { throw TesseraError(.malformedData, "image information truncated") }
            let dataType = b[imageInfo + 1]
            let width = u16(imageInfo + 2), height = u16(imageInfo + 4)
            let dataStart = imageInfo + 12
            guard blockLength >= dataStart - offset, blockLength <= b.count - offset else {
                throw TesseraError(.malformedData, "facial record length \(blockLength) inconsistent")
            }
            let end = offset + blockLength
            let data = Array(b[dataStart..<end])
            guard !data.isEmpty else { throw TesseraError(.malformedData, "empty face image") }
            var mime = LDSParsing.mimeType(of: data)
            if mime == LDSParsing.octetStream {
                mime = dataType == 0 ? "image/jpeg" : (dataType == 1 ? "image/jp2" : mime)
            }
            out.append(LDSImage(mimeType: mime, data: data, width: width, height: height))
            offset = end
        }
        return out
    }
}

/// DG7: displayed signature or usual mark images (tag 5F43).
public struct DG7: Sendable, Equatable {
    public var images: [LDSImage]
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(7))
        images = try outer.children().filter { $0.tag == 0x5F43 }.map(LDSParsing.image)
        guard !images.isEmpty else { throw TesseraError(.malformedData, "DG7 holds no image (5F43)") }
    }
}

/// DG11: additional personal details (Doc 9303 Part 10 §4.7.11). Text fields keep the '<' separators.
public struct DG11: Sendable, Equatable {
    public var fullName: String?
    public var otherNames: [String] = []
    public var personalNumber: String?
    /// YYYYMMDD as stored.
    public var fullDateOfBirth: String?
    public var placeOfBirth: String?
    public var address: String?
    public var telephone: String?
    public var profession: String?
    public var title: String?
    public var personalSummary: String?
    /// An image (tag 5F16).
    public var proofOfCitizenship: LDSImage?
    public var otherTravelDocumentNumbers: [String] = []
    public var custodyInformation: String?

    public init() {}

    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(11))
        for c in try LDSParsing.flattenCounted(outer.children()) {
            switch c.tag {
            case 0x5F0E: fullName = LDSParsing.text(c.value)
            case 0x5F0F: otherNames.append(LDSParsing.text(c.value))
            case 0x5F10: personalNumber = LDSParsing.text(c.value)
            case 0x5F2B: fullDateOfBirth = LDSParsing.date(c.value)
            case 0x5F11: placeOfBirth = LDSParsing.text(c.value)
            case 0x5F42: address = LDSParsing.text(c.value)
            case 0x5F12: telephone = LDSParsing.text(c.value)
            case 0x5F13: profession = LDSParsing.text(c.value)
            case 0x5F14: title = LDSParsing.text(c.value)
            case 0x5F15: personalSummary = LDSParsing.text(c.value)
            case 0x5F16: proofOfCitizenship = try LDSParsing.image(c)
            case 0x5F17: otherTravelDocumentNumbers.append(LDSParsing.text(c.value))
            case 0x5F18: custodyInformation = LDSParsing.text(c.value)
            default: break
            }
        }
    }
}

/// DG12: additional document details (Doc 9303 Part 10 §4.7.12).
public struct DG12: Sendable, Equatable {
    public var issuingAuthority: String?
    /// YYYYMMDD.
    public var dateOfIssue: String?
    public var otherPersons: [String] = []
    public var endorsements: String?
    public var taxOrExitRequirements: String?
    public var frontImage: LDSImage?
    public var rearImage: LDSImage?
    /// YYYYMMDDhhmmss.
    public var personalizationTime: String?
    public var personalizationDeviceSerial: String?

    public init() {}

    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(12))
        for c in try LDSParsing.flattenCounted(outer.children()) {
            switch c.tag {
            case 0x5F19: issuingAuthority = LDSParsing.text(c.value)
            case 0x5F26: dateOfIssue = LDSParsing.date(c.value)
            case 0x5F1A: otherPersons.append(LDSParsing.text(c.value))
            case 0x5F1B: endorsements = LDSParsing.text(c.value)
            case 0x5F1C: taxOrExitRequirements = LDSParsing.text(c.value)
            case 0x5F1D: frontImage = try LDSParsing.image(c)
            case 0x5F1E: rearImage = try LDSParsing.image(c)
            case 0x5F55: personalizationTime = LDSParsing.date(c.value)
            case 0x5F56: personalizationDeviceSerial = LDSParsing.text(c.value)
            default: break
            }
        }
    }
}

/// DG14: SecurityInfos for chip authentication, PACE and AA (kept raw; the protocol OIDs are listed).
public struct DG14: Sendable, Equatable {
    /// The DER SET OF SecurityInfo.
    public var securityInfos: [UInt8]
    /// The protocol OID of each SecurityInfo, in order.
    public var protocolOIDs: [String]

    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(14))
        let set = try TLV.parse(outer.value)
        try ASN1.expect(set, ASN1.set, "DG14 SecurityInfos")
        securityInfos = set.encoded
        var oids = [String]()
        for info in try set.children() {
            try ASN1.expect(info, ASN1.sequence, "SecurityInfo")
            guard let first = try info.children().first else {
                throw TesseraError(.malformedData, "empty SecurityInfo")
            }
            oids.append(try ASN1.oidValue(first))
        }
        protocolOIDs = oids
    }

    /// The signature hash named by an ActiveAuthenticationInfo (OID 2.23.136.1.1.5), if present.
    public var activeAuthenticationHash: SignatureHash? {
        guard let set = try? TLV.parse(securityInfos), let infos = try? set.children() else { return nil }
        for info in infos {
            guard let parts = try? info.children(), parts.count >= 3,
                (try? ASN1.oidValue(parts[0])) == "2.23.136.1.1.5",
                let alg = try? ASN1.oidValue(parts[2])
            else { continue }
            return AlgorithmOIDs.ecdsaHash[alg]
        }
        return nil
    }
}

/// DG15: the active authentication public key (SubjectPublicKeyInfo, RSA or EC).
public struct DG15: Sendable, Equatable {
    /// DER SubjectPublicKeyInfo.
    public var publicKeyInfo: [UInt8]
    public var key: PublicKeyDescription

    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let outer = try LDSParsing.outer(bytes, .dataGroup(15))
        let spki = try TLV.parse(outer.value)
        try ASN1.expect(spki, ASN1.sequence, "DG15 SubjectPublicKeyInfo")
        publicKeyInfo = spki.encoded
        do { key = try Signatures.describe(publicKey: spki.encoded) } catch {
            throw TesseraError(.malformedData, "DG15 key unusable: \(error.message)")
        }
    }
}

/// A parsed LDS file.
public enum LDSDataGroup: Sendable, Equatable {
    case com(EFCOM)
    case dg1(DG1)
    case dg2(DG2)
    case dg7(DG7)
    case dg11(DG11)
    case dg12(DG12)
    case dg14(DG14)
    case dg15(DG15)
    /// A file without a dedicated parser (DG3/DG4 need EAC; DG5, 6, 8–10, 13, 16), kept raw.
    case raw(LDSFile, [UInt8])

    /// Parses a file read from the chip.
    public static func parse(_ file: LDSFile, _ bytes: [UInt8]) throws(TesseraError) -> LDSDataGroup {
        switch file {
        case .com: return .com(try EFCOM(parsing: bytes))
        case .dataGroup(1): return .dg1(try DG1(parsing: bytes))
        case .dataGroup(2): return .dg2(try DG2(parsing: bytes))
        case .dataGroup(7): return .dg7(try DG7(parsing: bytes))
        case .dataGroup(11): return .dg11(try DG11(parsing: bytes))
        case .dataGroup(12): return .dg12(try DG12(parsing: bytes))
        case .dataGroup(14): return .dg14(try DG14(parsing: bytes))
        case .dataGroup(15): return .dg15(try DG15(parsing: bytes))
        default:
            _ = try LDSParsing.outer(bytes, file)
            return .raw(file, bytes)
        }
    }
}

enum LDSParsing {
    static let octetStream = "application/octet-stream"

    /// Parses the outer TLV of a file and checks its tag.
    static func outer(_ bytes: [UInt8], _ file: LDSFile) throws(TesseraError) -> TLV {
        let tlv = try TLV.parse(bytes, allowTrailing: true)
        guard tlv.tag == UInt32(file.tag) else {
            throw TesseraError(
                .malformedData,
                "\(file) starts with tag \(TLV.tagHex(tlv.tag)), expected \(TLV.tagHex(UInt32(file.tag)))")
        }
        return tlv
    }

    /// Flattens `A0 { 02 count, items… }` groups (other names, other persons) into the item list.
    static func flattenCounted(_ items: [TLV]) throws(TesseraError) -> [TLV] {
        var out = [TLV]()
        for i in items {
            if i.tag == 0xA0 { out += try i.children().filter { $0.tag != 0x02 } } else { out.append(i) }
        }
        return out
    }

    /// UTF-8 text, or Latin-1 when the bytes are not valid UTF-8.
    static func text(_ bytes: [UInt8]) -> String { ASN1.text(bytes) }

    /// A date stored as ASCII digits or BCD, returned as digits.
    static func date(_ bytes: [UInt8]) -> String {
        if bytes.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) { return text(bytes) }
        return Hex.encode(bytes)
    }

    static func image(_ tlv: TLV) throws(TesseraError) -> LDSImage {
        guard !tlv.value.isEmpty else { throw TesseraError(.malformedData, "empty image \(TLV.tagHex(tlv.tag))") }
        let mime = mimeType(of: tlv.value)
        let size = ImageHeader.dimensions(tlv.value, mime: mime)
        return LDSImage(mimeType: mime, data: tlv.value, width: size?.width, height: size?.height)
    }

    static let jp2Signature: [UInt8] = [0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20, 0x0D, 0x0A, 0x87, 0x0A]
    static let j2kSignature: [UInt8] = [0xFF, 0x4F, 0xFF, 0x51]
    static let jpegSignature: [UInt8] = [0xFF, 0xD8, 0xFF]

    static func mimeType(of data: [UInt8]) -> String {
        if data.starts(with: jpegSignature) { return "image/jpeg" }
        if data.starts(with: jp2Signature) || data.starts(with: j2kSignature) { return "image/jp2" }
        if data.starts(with: [0xFF, 0xA0]) { return "image/x-wsq" }
        return octetStream
    }

    /// Finds the first JPEG or JPEG 2000 signature in `bytes` and takes the image from there to the end.
    static func scanForImage(in bytes: [UInt8]) throws(TesseraError) -> LDSImage? {
        guard bytes.count >= 4 else { return nil }
        for i in 0..<(bytes.count - 3) {
            let b = bytes[i]
            guard b == 0xFF || b == 0x00 else { continue }
            let rest = bytes[i...]
            if rest.starts(with: jpegSignature) || rest.starts(with: jp2Signature) || rest.starts(with: j2kSignature) {
                let data = Array(rest)
                let mime = mimeType(of: data)
                let size = ImageHeader.dimensions(data, mime: mime)
                return LDSImage(mimeType: mime, data: data, width: size?.width, height: size?.height)
            }
        }
        return nil
    }

    /// ISO/IEC 39794-5: walks the BER tree (bounded depth) for a primitive value that is an image.
    static func scanForImage(inTLV tlv: TLV, depth: Int) throws(TesseraError) -> LDSImage? {
        guard depth < 12 else { throw TesseraError(.malformedData, "biometric data block nested too deeply") }
        if !tlv.isConstructed {
            let mime = mimeType(of: tlv.value)
            guard mime == "image/jpeg" || mime == "image/jp2" else { return nil }
            let size = ImageHeader.dimensions(tlv.value, mime: mime)
            return LDSImage(mimeType: mime, data: tlv.value, width: size?.width, height: size?.height)
        }
        var best: LDSImage?
        for c in try tlv.children() {
            if let img = try scanForImage(inTLV: c, depth: depth + 1), img.data.count > (best?.data.count ?? 0) {
                best = img
            }
        }
        return best
    }
}

/// Reads pixel dimensions from JPEG (SOFn) and JPEG 2000 (ihdr box or SIZ marker) headers.
enum ImageHeader {
    static func dimensions(_ d: [UInt8], mime: String) -> (width: Int, height: Int)? {
        switch mime {
        case "image/jpeg": return jpeg(d)
        case "image/jp2": return d.starts(with: LDSParsing.j2kSignature) ? siz(d, at: 0) : jp2(d)
        default: return nil
        }
    }

    static func jpeg(_ d: [UInt8]) -> (width: Int, height: Int)? {
        var i = 2
        var steps = 0
        while i + 3 < d.count, steps < 1000 {
            steps += 1
            guard d[i] == 0xFF else { return nil }
            let marker = d[i + 1]
            if marker == 0xFF { i += 1; continue }
            if marker == 0x01 || (0xD0...0xD9).contains(marker) { i += 2; continue }
            let len = Int(d[i + 2]) << 8 | Int(d[i + 3])
            guard len >= 2 else { return nil }
            if [0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF].contains(marker) {
                guard i + 8 < d.count else { return nil }
                let h = Int(d[i + 5]) << 8 | Int(d[i + 6])
                let w = Int(d[i + 7]) << 8 | Int(d[i + 8])
                return (w, h)
            }
            i += 2 + len
        }
        return nil
    }

    static func jp2(_ d: [UInt8]) -> (width: Int, height: Int)? {
        let ihdr = Array("ihdr".utf8)
        let limit = min(d.count, 4096)
        guard limit >= 12 else { return nil }
        for i in 0..<(limit - 12) where Array(d[i..<(i + 4)]) == ihdr {
            func u32(_ j: Int) -> Int { Int(d[j]) << 24 | Int(d[j + 1]) << 16 | Int(d[j + 2]) << 8 | Int(d[j + 3]) }
            return (u32(i + 8), u32(i + 4))
        }
        if let j = (0..<(limit - 4)).first(where: {
            d[$0] == 0xFF && d[$0 + 1] == 0x4F && d[$0 + 2] == 0xFF && d[$0 + 3] == 0x51
        }) {
            return siz(d, at: j)
        }
        return nil
    }

    static func siz(_ d: [UInt8], at j: Int) -> (width: Int, height: Int)? {
        guard j + 24 <= d.count else { return nil }
        func u32(_ k: Int) -> Int { Int(d[k]) << 24 | Int(d[k + 1]) << 16 | Int(d[k + 2]) << 8 | Int(d[k + 3]) }
        let base = j + 2 + 2 + 2
        let w = u32(base) - u32(base + 8), h = u32(base + 4) - u32(base + 12)
        return w > 0 && h > 0 ? (w, h) : nil
    }
}
