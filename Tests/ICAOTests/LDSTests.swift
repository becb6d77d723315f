import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import Testing
import X509Support

@testable import ICAO

#if canImport(Glibc)
    import Glibc
#endif

/// A 3×2 baseline JPEG written by Pillow 11 (`Image.new("RGB", (3, 2)).save(…, "JPEG", quality=50)`).
let ldsTestJPEG: [UInt8] = Hex.decode(
    """
    ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb0043011112121815182f1a1a2f634238426363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363ffc00011080002000303012200021101031101ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f00c7a28a2b84fa83ffd9
    """)!

/// The same 3×2 image as JPEG 2000 (JP2 container) written by Pillow 11 with OpenJPEG 2.5.4.
let ldsTestJP2: [UInt8] = Hex.decode(
    """
    0000000c6a5020200d0a870a00000014667479706a703220000000006a7032200000002d6a703268000000166968647200000002000000030003070700000000000f636f6c72010000000000100000009e6a703263ff4fff51002f000000000003000000020000000000000000000000030000000200000000000000000003070101070101070101ff52000c00000001000104040001ff5c00074040484850ff640025000143726561746564206279204f70656e4a5045472076657273696f6e20322e352e34ff90000a0000000000230001ff93cfb40c02659fcfb40c08857fcfb40c08857f808080ffd9
    """)!

/// TD3 specimen MRZ of Doc 9303 Part 4 Appendix A (Anna Maria Eriksson, Utopia).
let ldsSpecimenMRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<" + "L898902C36UTO7408122F1204159ZE184226B<<<<<10"

private func expectMalformed(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        try body()
        Issue.record("expected MALFORMED_DATA", sourceLocation: sourceLocation)
    } catch {
        #expect((error as? TesseraError)?.code == .malformedData, "\(error)", sourceLocation: sourceLocation)
    }
}

@Suite struct LDSTLVTests {
    @Test func hostileFilesAreMalformedData() {
        // Garbage files for every parser.
        for file in LDSFile.all {
            expectMalformed { _ = try LDSDataGroup.parse(file, [0x00]) }
            expectMalformed { _ = try LDSDataGroup.parse(file, [file.tag, 0x82, 0xFF]) }
        }
        expectMalformed { _ = try SecurityObject(parsing: [0x77, 0x03, 0x30, 0x01, 0x02]) }
    }

    @Test func deeplyNestedBiometricBlockIsRejected() {
        var inner = TLV(tag: 0x80, value: ldsTestJPEG).encoded
        for _ in 0..<40 { inner = TLV(tag: 0xA1, value: inner).encoded }
        let bdb = TLV(tag: 0x7F2E, value: inner).encoded
        let dg2 = TLV(
            tag: 0x75,
            value: TLV(
                tag: 0x7F61,
                value: [0x02, 0x01, 0x01]
                    + TLV(tag: 0x7F60, value: bdb).encoded
            ).encoded
        ).encoded
        expectMalformed { _ = try DG2(parsing: dg2) }
    }

    @Test func oidCoding() throws {
        #expect(try ASN1.decodeOID(ASN1.encodeOIDValue("2.23.136.1.1.1")) == "2.23.136.1.1.1")
        #expect(ASN1.encodeOIDValue("1.2.840.113549.1.7.2") == [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02])
        #expect(
            try ASN1.decodeOID([0x04, 0x00, 0x7F, 0x00, 0x07, 0x01, 0x01, 0x04, 0x01, 0x03])
                == "0.4.0.127.0.7.1.1.4.1.3")
        expectMalformed { _ = try ASN1.decodeOID([0x2A, 0x86]) }
    }
}

@Suite struct LDSFileTests {
    @Test func fileMapping() {
        let expected: [(LDSFile, UInt16, UInt8, UInt8)] = [
            (.com, 0x011E, 0x1E, 0x60), (.sod, 0x011D, 0x1D, 0x77), (.dataGroup(1), 0x0101, 0x01, 0x61),
            (.dataGroup(2), 0x0102, 0x02, 0x75), (.dataGroup(3), 0x0103, 0x03, 0x63),
            (.dataGroup(4), 0x0104, 0x04, 0x76),
            (.dataGroup(7), 0x0107, 0x07, 0x67), (.dataGroup(11), 0x010B, 0x0B, 0x6B),
            (.dataGroup(12), 0x010C, 0x0C, 0x6C),
            (.dataGroup(14), 0x010E, 0x0E, 0x6E), (.dataGroup(15), 0x010F, 0x0F, 0x6F),
            (.dataGroup(16), 0x0110, 0x10, 0x70),
        ]
        for (file, fid, sfi, tag) in expected {
            #expect(file.fileID == fid)
            #expect(file.sfi == sfi)
            #expect(file.tag == tag)
            #expect(LDSFile(fileID: fid) == file)
            #expect(LDSFile(sfi: sfi) == file)
            #expect(LDSFile(tag: tag) == file)
        }
        #expect(LDSFile.all.count == 18)
        #expect(LDSFile(dataGroup: 17) == nil)
        #expect(LDSFile(fileID: 0x011F) == nil)
        #expect(LDSFile.dataGroup(2).description == "DG2")
    }

    @Test func efCOM() throws {
        // 60 16 | 5F01 04 "0107" | 5F36 06 "040000" | 5C 04 61 75 6B 6F, assembled by hand.
        let bytes = Hex.decode("6016 5F0104 30313037 5F3606 303430303030 5C04 61756B6F")!
        let com = try EFCOM(parsing: bytes)
        #expect(com.ldsVersion == "1.7")
        #expect(com.unicodeVersion == "4.0.0")
        #expect(com.dataGroups == [1, 2, 11, 15])
        #expect(LDSBuilder.com(dataGroups: [1, 2, 11, 15]) == bytes)
        if case .com(let parsed) = try LDSDataGroup.parse(.com, bytes) {
            #expect(parsed == com)
        } else {
            Issue.record("not COM")
        }
    }

    @Test func dg1() throws {
        let bytes = try LDSBuilder.dg1(mrz: ldsSpecimenMRZ)
        #expect(Array(bytes.prefix(5)) == [0x61, 0x5B, 0x5F, 0x1F, 0x58])
        #expect(try DG1(parsing: bytes).mrz == ldsSpecimenMRZ)
        let parsed = try DG1(parsing: bytes).parsedMRZ()
        #expect(parsed.documentNumber == "L898902C3")
        #expect(parsed.issuingState == "UTO")
        // Chips may pad files; trailing bytes after the object are ignored.
        #expect(try DG1(parsing: bytes + [0x00, 0x00]).mrz == ldsSpecimenMRZ)
        #expect(throws: TesseraError.self) { try LDSBuilder.dg1(mrz: "P<UTO") }
    }
}

@Suite struct LDSDataGroupTests {
    @Test func dg2WithJPEG() throws {
        let bytes = try LDSBuilder.dg2(image: ldsTestJPEG, width: 3, height: 2)
        let dg2 = try DG2(parsing: bytes)
        #expect(dg2.faces.count == 1)
        let face = try #require(dg2.faces.first)
        #expect(face.encoding == .iso19794_5)
        #expect(face.image.mimeType == "image/jpeg")
        #expect(face.image.data == ldsTestJPEG)
        #expect(face.image.width == 3 && face.image.height == 2)
        // Independent view of the facial record: header lengths and the JPEG's own SOF0 dimensions.
        let record = try #require(try TLV.parse(bytes).child(0x7F61)?.child(0x7F60)?.child(0x5F2E)?.value)
        #expect(Array(record.prefix(8)) == Array("FAC\u{0}010\u{0}".utf8))
        let recordLength = record[8..<12].reduce(0) { $0 << 8 | Int($1) }
        #expect(recordLength == record.count)
        #expect(recordLength == 14 + 20 + 12 + ldsTestJPEG.count)
        #expect(ImageHeader.jpeg(ldsTestJPEG).map { [$0.width, $0.height] } == [3, 2])
    }

    @Test func dg2WithJPEG2000() throws {
        let dg2 = try DG2(parsing: try LDSBuilder.dg2(image: ldsTestJP2, width: 3, height: 2))
        let face = try #require(dg2.faces.first)
        #expect(face.image.mimeType == "image/jp2")
        #expect(face.image.data == ldsTestJP2)
        #expect(ImageHeader.jp2(ldsTestJP2).map { [$0.width, $0.height] } == [3, 2])
        #expect(throws: TesseraError.self) { try LDSBuilder.dg2(image: [1, 2, 3], width: 3, height: 2) }
    }

    @Test func dg2InISO39794Encoding() throws {
        // A 39794-5 style block: constructed 7F2E with context-tagged BER inside; the image sits in a primitive.
        let representation = TLV(
            tag: 0xA0,
            value: TLV(tag: 0x80, value: [0x01]).encoded
                + TLV(tag: 0xA1, value: TLV(tag: 0x80, value: ldsTestJP2).encoded).encoded
        ).encoded
        let bdb = TLV(
            tag: 0x7F2E, value: TLV(tag: 0xA1, value: TLV(tag: 0x80, value: [0x03]).encoded + representation).encoded)
        let bht = TLV(tag: 0xA1, value: Hex.decode("8702 0101 8802 0040")!).encoded
        let dg2Bytes = TLV(
            tag: 0x75,
            value: TLV(
                tag: 0x7F61,
                value: [0x02, 0x01, 0x01]
                    + TLV(tag: 0x7F60, value: bht + bdb.encoded).encoded
            ).encoded
        ).encoded
        let face = try #require(try DG2(parsing: dg2Bytes).faces.first)
        #expect(face.encoding == .iso39794_5)
        #expect(face.image.mimeType == "image/jp2")
        #expect(face.image.data == ldsTestJP2)
        #expect(face.image.width == 3 && face.image.height == 2)
    }

    @Test func dg2RejectsInconsistentRecordLength() throws {
        var bytes = try LDSBuilder.dg2(image: ldsTestJPEG, width: 3, height: 2)
        // The facial information block length sits 14 bytes into the record: make it point past the end.
        let record = try #require(try TLV.parse(bytes).child(0x7F61)?.child(0x7F60)?.child(0x5F2E))
        let start = try #require(bytes.firstRange(of: record.value)?.lowerBound)
        bytes[start + 14] = 0x7F
        expectMalformed { _ = try DG2(parsing: bytes) }
    }

    @Test func dg7() throws {
        let dg7 = try DG7(parsing: LDSBuilder.dg7(image: ldsTestJPEG))
        #expect(dg7.images.first?.mimeType == "image/jpeg")
        #expect(dg7.images.first?.data == ldsTestJPEG)
        #expect(dg7.images.first?.width == 3)
    }

    @Test func dg11HandBuilt() throws {
        // Hand-assembled per Doc 9303 Part 10 §4.7.11, with a BCD full date of birth and an other-names group.
        let fields =
            TLV(tag: 0x5F0E, value: Array("ERIKSSON<<ANNA<MARIA".utf8)).encoded
            + TLV(
                tag: 0xA0,
                value: [0x02, 0x01, 0x02] + TLV(tag: 0x5F0F, value: Array("ANNA<M".utf8)).encoded
                    + TLV(tag: 0x5F0F, value: Array("MARIA<E".utf8)).encoded
            ).encoded
            + TLV(tag: 0x5F10, value: Array("123456789".utf8)).encoded
            + TLV(tag: 0x5F2B, value: [0x19, 0x74, 0x08, 0x12]).encoded
            + TLV(tag: 0x5F11, value: Array("ZENITH,UTOPIA".utf8)).encoded
            + TLV(tag: 0x5F42, value: Array("123 MAPLE RD<ANYTOWN".utf8)).encoded
            + TLV(tag: 0x5F12, value: Array("1-555-555-1212".utf8)).encoded
            + TLV(tag: 0x5F13, value: Array("TRAVEL AGENT".utf8)).encoded
            + TLV(tag: 0x5F14, value: Array("MRS".utf8)).encoded
            + TLV(tag: 0x5F15, value: Array("HAPPY".utf8)).encoded
            + TLV(tag: 0x5F17, value: Array("Z1234567".utf8)).encoded
            + TLV(tag: 0x5F18, value: Array("NONE".utf8)).encoded
        let bytes = TLV(tag: 0x6B, value: TLV(tag: 0x5C, value: [0x5F, 0x0E]).encoded + fields).encoded
        let d = try DG11(parsing: bytes)
        #expect(d.fullName == "ERIKSSON<<ANNA<MARIA")
        #expect(d.otherNames == ["ANNA<M", "MARIA<E"])
        #expect(d.personalNumber == "123456789")
        #expect(d.fullDateOfBirth == "19740812")
        #expect(d.placeOfBirth == "ZENITH,UTOPIA")
        #expect(d.address == "123 MAPLE RD<ANYTOWN")
        #expect(d.telephone == "1-555-555-1212")
        #expect(d.profession == "TRAVEL AGENT")
        #expect(d.title == "MRS")
        #expect(d.personalSummary == "HAPPY")
        #expect(d.otherTravelDocumentNumbers == ["Z1234567"])
        #expect(d.custodyInformation == "NONE")
        // Round trip through the builder.
        #expect(try DG11(parsing: LDSBuilder.dg11(d)) == d)
    }

    @Test func dg12RoundTrip() throws {
        var d = DG12()
        d.issuingAuthority = "UTOPIA PASSPORT OFFICE"
        d.dateOfIssue = "20120415"
        d.otherPersons = ["ERIKSSON<<LARS"]
        d.endorsements = "NONE"
        d.personalizationTime = "20120415103000"
        d.personalizationDeviceSerial = "DEV-1"
        let bytes = LDSBuilder.dg12(d)
        #expect(bytes.first == 0x6C)
        #expect(try DG12(parsing: bytes) == d)
        // The tag list names the other-persons element 5F1A.
        #expect(try TLV.parse(bytes).child(0x5C)?.value.contains(0x1A) == true)
    }

    @Test func dg14AndDG15() throws {
        let infos = LDSBuilder.activeAuthenticationInfo(hash: .sha384)
        let dg14 = try DG14(parsing: LDSBuilder.dg14(securityInfos: infos))
        #expect(dg14.protocolOIDs == ["2.23.136.1.1.5"])
        #expect(dg14.activeAuthenticationHash == .sha384)
        #expect(dg14.securityInfos == infos)

        let ec = try Signatures.generateKey(.ec(curve: "brainpoolP256r1"))
        let dg15 = try DG15(parsing: LDSBuilder.dg15(publicKeyInfo: ec.publicKeyDER))
        #expect(dg15.key.kind == .ec && dg15.key.bits == 256 && dg15.key.curveName == "brainpoolP256r1")
        #expect(dg15.publicKeyInfo == ec.publicKeyDER)
        let rsa = try Signatures.generateKey(.rsa(bits: 1024))
        #expect(try DG15(parsing: LDSBuilder.dg15(publicKeyInfo: rsa.publicKeyDER)).key.kind == .rsa)
        expectMalformed { _ = try DG15(parsing: LDSBuilder.dg15(publicKeyInfo: [0x30, 0x03, 0x02, 0x01, 0x00])) }
    }

    @Test func unknownGroupsStayRaw() throws {
        let dg3 = TLV(tag: 0x63, value: [0x01, 0x02]).encoded
        #expect(try LDSDataGroup.parse(.dataGroup(3), dg3) == .raw(.dataGroup(3), dg3))
        expectMalformed { _ = try LDSDataGroup.parse(.dataGroup(3), TLV(tag: 0x61, value: []).encoded) }
    }
}
