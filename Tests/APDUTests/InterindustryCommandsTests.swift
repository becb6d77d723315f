import APDU
import TesseraCore
import Testing

// Expected bytes are written out from ISO/IEC 7816-4:2005: CLA INS P1 P2, then Lc and data, then Le (§5.1, cases
// 1 to 4; Le '00' = 256 in short form, Lc/Le of three bytes '00 xx xx' with data or '00 xx xx' alone, '0000' =
// 65536, in extended form).
@Suite struct InterindustryCommandsTests {
    /// §7.1.1: INS 'A4', P1 '04' = select by DF name, P2 '0C' = first occurrence, no response data; case 3.
    @Test func selectByAIDWithoutResponseData() throws {
        let aid: [UInt8] = [0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01]
        #expect(
            try CommandAPDU.select(aid: aid).encoded() == [
                0x00, 0xA4, 0x04, 0x0C, 0x07, 0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01,
            ])
    }

    /// §7.1.1: P2 '00' = return the FCI; case 4 with Le '00' (256).
    @Test func selectByAIDReturningFCI() throws {
        let aid: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08]
        #expect(
            try CommandAPDU.select(aid: aid, returning: .fci, ne: 256).encoded() == [
                0x00, 0xA4, 0x04, 0x00, 0x05, 0xA0, 0x00, 0x00, 0x03, 0x08, 0x00,
            ])
    }

    /// §7.1.1: P1 '00' with '3F00' selects the MF.
    @Test func selectMasterFile() throws {
        #expect(try CommandAPDU.select(fileID: 0x3F00).encoded() == [0x00, 0xA4, 0x00, 0x0C, 0x02, 0x3F, 0x00])
    }

    /// §7.1.1: P1 '02' = EF under the current DF, P2 '0C'; EF.COM is '011E' (ICAO Doc 9303-10).
    @Test func selectElementaryFileUnderCurrentDF() throws {
        #expect(
            try CommandAPDU.select(fileID: 0x011E, .elementaryFileUnderCurrentDF).encoded() == [
                0x00, 0xA4, 0x02, 0x0C, 0x02, 0x01, 0x1E,
            ])
    }

    /// §7.1.1: P2 '04' = return the FCP, with Le.
    @Test func selectFileReturningFCP() throws {
        #expect(
            try CommandAPDU.select(fileID: 0x0101, .elementaryFileUnderCurrentDF, returning: .fcp, ne: 256).encoded()
                == [0x00, 0xA4, 0x02, 0x04, 0x02, 0x01, 0x01, 0x00])
    }

    /// §7.2.3: INS 'B0', P1 b8 = 0 so P1-P2 is a 15-bit offset; case 2 short.
    @Test func readBinaryAtOffset() throws {
        #expect(try CommandAPDU.readBinary(offset: 0, ne: 4).encoded() == [0x00, 0xB0, 0x00, 0x00, 0x04])
        #expect(try CommandAPDU.readBinary(offset: 0x0104, ne: 0xDF).encoded() == [0x00, 0xB0, 0x01, 0x04, 0xDF])
        #expect(try CommandAPDU.readBinary(offset: 0x7FFF, ne: 256).encoded() == [0x00, 0xB0, 0x7F, 0xFF, 0x00])
    }

    /// §5.1: Ne above 256 takes the extended Le field '00 xx xx' (no data, so one leading '00'); 65536 is '000000'.
    @Test func readBinaryWithExtendedLe() throws {
        #expect(
            try CommandAPDU.readBinary(offset: 0x1000, ne: 0x1000).encoded() == [
                0x00, 0xB0, 0x10, 0x00, 0x00, 0x10, 0x00,
            ])
        #expect(
            try CommandAPDU.readBinary(offset: 0, ne: 65536).encoded() == [0x00, 0xB0, 0x00, 0x00, 0x00, 0x00, 0x00])
    }

    /// §7.2.3: an offset past 7FFF would set P1 b8, which means "short EF identifier": refused.
    @Test(arguments: [-1, 0x8000, 0xFFFF])
    func readBinaryRefusesOffsetsPastP1P2(offset: Int) {
        #expect(throws: TesseraError.self) { try CommandAPDU.readBinary(offset: offset, ne: 1) }
    }

    /// §7.2.3: P1 = '80' | SFI (b8-b6 = 100, b5-b1 = SFI), P2 = offset; DG1's SFI is 01 (ICAO Doc 9303-10).
    @Test func readBinaryByShortFileIdentifier() throws {
        #expect(
            try CommandAPDU.readBinary(shortFileID: 0x01, offset: 0, ne: 256).encoded() == [
                0x00, 0xB0, 0x81, 0x00, 0x00,
            ])
        #expect(
            try CommandAPDU.readBinary(shortFileID: 0x1E, offset: 0x10, ne: 8).encoded() == [
                0x00, 0xB0, 0x9E, 0x10, 0x08,
            ])
    }

    @Test(arguments: [0, 31, 0x7F] as [UInt8])
    func readBinaryRefusesShortFileIdentifiersOutOfRange(sfi: UInt8) {
        #expect(throws: TesseraError.self) { try CommandAPDU.readBinary(shortFileID: sfi, offset: 0, ne: 1) }
    }

    /// §7.2.2: odd INS 'B1', P1-P2 '0000' (current EF), data = offset data object '54' with the offset big-endian.
    @Test func readBinaryWithOffsetDataObject() throws {
        #expect(
            try CommandAPDU.readBinary(offsetDataObject: 0x8000, ne: 0xDF + 4).encoded() == [
                0x00, 0xB1, 0x00, 0x00, 0x04, 0x54, 0x02, 0x80, 0x00, 0xE3,
            ])
        #expect(
            try CommandAPDU.readBinary(offsetDataObject: 0x01_2345, ne: 256).encoded() == [
                0x00, 0xB1, 0x00, 0x00, 0x05, 0x54, 0x03, 0x01, 0x23, 0x45, 0x00,
            ])
        // Case 4 extended: Lc '00 00 05', data, Le '10 04' (no second leading '00').
        #expect(
            try CommandAPDU.readBinary(offsetDataObject: 0x01_2345, ne: 0x1004).encoded() == [
                0x00, 0xB1, 0x00, 0x00, 0x00, 0x00, 0x05, 0x54, 0x03, 0x01, 0x23, 0x45, 0x10, 0x04,
            ])
    }

    /// §7.6.1: INS 'C0', P1-P2 '0000', Le = the xx of 61xx.
    @Test func getResponse() throws {
        #expect(try CommandAPDU.getResponse(ne: 0x10).encoded() == [0x00, 0xC0, 0x00, 0x00, 0x10])
        #expect(try CommandAPDU.getResponse(ne: 256, cla: 0x84).encoded() == [0x84, 0xC0, 0x00, 0x00, 0x00])
    }
}
