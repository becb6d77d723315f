import TesseraCore

// The interindustry commands every reader in Tessera sends (ISO/IEC 7816-4:2005, clause 7), built in one place so
// that no caller spells their instruction or parameter bytes.

extension CommandAPDU {
    /// Interindustry instruction bytes (ISO/IEC 7816-4:2005 §5.1.2, Table 4), for building and for emulated cards
    /// that dispatch on `ins`.
    public enum Instruction {
        /// SELECT (§7.1.1).
        public static let select: UInt8 = 0xA4
        /// READ BINARY with the offset in P1-P2 or a short EF identifier in P1 (§7.2.3).
        public static let readBinary: UInt8 = 0xB0
        /// READ BINARY, odd INS: the offset travels in an offset data object '54', the data comes back in a
        /// discretionary data object '53' (§7.2.2, §7.2.3).
        public static let readBinaryOffsetDataObject: UInt8 = 0xB1
        /// GET RESPONSE (§7.6.1).
        public static let getResponse: UInt8 = 0xC0
    }

    /// What a SELECT asks the card to return: P2 bits b4-b3 (ISO/IEC 7816-4:2005 §7.1.1), first or only occurrence
    /// (b2-b1 = 00).
    public enum SelectResponse: UInt8, Sendable {
        /// Return the FCI template (P2 = '00').
        case fci = 0x00
        /// Return the FCP template (P2 = '04').
        case fcp = 0x04
        /// Return the FMD template (P2 = '08').
        case fmd = 0x08
        /// No response data (P2 = '0C').
        case nothing = 0x0C
    }

    /// How a SELECT by file identifier is meant: P1 (ISO/IEC 7816-4:2005 §7.1.1).
    public enum FileSelection: UInt8, Sendable {
        /// Select the MF, a DF or an EF by its identifier (P1 = '00'; '3F00' is the MF).
        case anyFile = 0x00
        /// Select an EF under the current DF (P1 = '02').
        case elementaryFileUnderCurrentDF = 0x02
    }

    /// SELECT by DF name, that is by application identifier (P1 = '04'; ISO/IEC 7816-4:2005 §7.1.1).
    public static func select(aid: [UInt8], returning response: SelectResponse = .nothing, ne: Int? = nil)
        -> CommandAPDU
    {
        CommandAPDU(ins: Instruction.select, p1: 0x04, p2: response.rawValue, data: aid, ne: ne)
    }

    /// SELECT by the two-byte file identifier, sent big-endian in the data field (ISO/IEC 7816-4:2005 §7.1.1).
    public static func select(
        fileID: UInt16, _ selection: FileSelection = .anyFile, returning response: SelectResponse = .nothing,
        ne: Int? = nil
    ) -> CommandAPDU {
        CommandAPDU(
            ins: Instruction.select, p1: selection.rawValue, p2: response.rawValue,
            data: [UInt8(fileID >> 8), UInt8(fileID & 0xFF)], ne: ne)
    }

    /// READ BINARY of the current EF from `offset` (0 to 7FFF: P1 b8 = 0, b7-b1 and P2 hold the 15-bit offset;
    /// ISO/IEC 7816-4:2005 §7.2.3). Throws INVALID_INPUT for a larger offset: such offsets need
    /// `readBinary(offsetDataObject:ne:)`.
    public static func readBinary(offset: Int, ne: Int) throws(TesseraError) -> CommandAPDU {
        guard (0...0x7FFF).contains(offset) else {
            throw .invalidInput("READ BINARY offset \(offset) does not fit in P1-P2")
        }
        return CommandAPDU(ins: Instruction.readBinary, p1: UInt8(offset >> 8), p2: UInt8(offset & 0xFF), ne: ne)
    }

    /// READ BINARY of the EF with short identifier `shortFileID` (1 to 30: P1 = '80' | SFI) from `offset` (0 to 255,
    /// in P2), which also makes that EF current (ISO/IEC 7816-4:2005 §7.2.3). Throws INVALID_INPUT for an SFI
    /// outside 1...30.
    public static func readBinary(shortFileID: UInt8, offset: UInt8, ne: Int) throws(TesseraError) -> CommandAPDU {
        guard (1...30).contains(shortFileID) else { throw .invalidInput("SFI \(shortFileID) out of range") }
        return CommandAPDU(ins: Instruction.readBinary, p1: 0x80 | shortFileID, p2: offset, ne: ne)
    }

    /// READ BINARY with odd INS ('B1') of the current EF (P1-P2 = '0000'): the offset is an offset data object '54'
    /// holding the offset big-endian in as few bytes as it needs (ISO/IEC 7816-4:2005 §7.2.2), for offsets past
    /// 7FFF. The card answers with a discretionary data object '53' around the content, so `ne` counts that
    /// object's header too. Throws INVALID_INPUT for an offset outside 0...FFFFFFFF.
    public static func readBinary(offsetDataObject offset: Int, ne: Int) throws(TesseraError) -> CommandAPDU {
        guard (0...0xFFFF_FFFF).contains(offset) else {
            throw .invalidInput("READ BINARY offset \(offset) out of range")
        }
        var bytes: [UInt8] = []
        var rest = offset
        repeat {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        } while rest > 0
        return CommandAPDU(
            ins: Instruction.readBinaryOffsetDataObject, p1: 0x00, p2: 0x00, data: TLV.encode(tag: 0x54, value: bytes),
            ne: ne)
    }

    /// GET RESPONSE for the `ne` bytes a 61xx status announced (P1-P2 = '0000'; ISO/IEC 7816-4:2005 §7.6.1).
    public static func getResponse(ne: Int, cla: UInt8 = 0x00) -> CommandAPDU {
        CommandAPDU(cla: cla, ins: Instruction.getResponse, p1: 0x00, p2: 0x00, ne: ne)
    }
}
