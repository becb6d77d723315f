import APDU
import TesseraCore

/// Known behaviours of real eMRTD chips that deviate from the letter of ISO 7816-4 / Doc 9303, reproduced by an
/// emulated chip so the reader's handling of each one is tested end to end (`tessera lab emulate-passport --quirk`).
public struct ChipQuirks: Sendable, Codable, Hashable {
    /// SELECT and MSE commands that carry Le are refused with 6700 (the chip wants case 3 APDUs).
    public var rejectLeOnSelectAndMSE = false
    /// MSE:Set AT with the domain parameter reference (DO'84') is refused with 6A80.
    public var rejectKeyReference = false
    /// SELECT of the master file (3F00, or P1 00 without data) answers this status word, e.g. 0x6A82 or 0x6A87.
    public var masterFileSelectStatus: UInt16?
    /// PACE breaks half way: the mapping step of GENERAL AUTHENTICATE answers 6985 (BAC still works).
    public var brokenPACE = false
    /// READ BINARY returns at most this many bytes with 9000, whatever Le asked for.
    public var maxResponseLength: Int?
    /// The READ BINARY that delivers the last byte of a file answers 6282 (end of file) instead of 9000.
    public var endOfFileWarning = false

    public init() {}

    /// The names `--quirk` accepts, with what each does.
    public static let names: [(name: String, help: String)] = [
        ("no-le", "SELECT and MSE with Le are refused (6700)"),
        ("no-key-reference", "MSE:Set AT with the 0x84 domain parameter reference is refused (6A80)"),
        ("mf-6a82", "SELECT of the master file answers 6A82"),
        ("mf-6a87", "SELECT of the master file answers 6A87"),
        ("pace-fails", "PACE fails at the mapping step (6985); BAC still works when the profile offers it"),
        ("short-responses", "READ BINARY returns at most 64 bytes with 9000, whatever Le asks"),
        ("eof-6282", "the READ BINARY reaching the end of a file answers 6282"),
    ]

    /// Applies one `--quirk` name; INVALID_INPUT for an unknown one.
    public mutating func enable(_ name: String) throws(TesseraError) {
        switch name.lowercased() {
        case "no-le": rejectLeOnSelectAndMSE = true
        case "no-key-reference": rejectKeyReference = true
        case "mf-6a82": masterFileSelectStatus = 0x6A82
        case "mf-6a87": masterFileSelectStatus = 0x6A87
        case "pace-fails": brokenPACE = true
        case "short-responses": maxResponseLength = 64
        case "eof-6282": endOfFileWarning = true
        default:
            throw .invalidInput("unknown quirk '\(name)'; one of \(Self.names.map(\.name).joined(separator: ", "))")
        }
    }

    /// The status word to answer instead of processing `command`, when a quirk refuses it up front.
    func refusal(of command: CommandAPDU) -> StatusWord? {
        if rejectLeOnSelectAndMSE, command.ins == CommandAPDU.Instruction.select || command.ins == 0x22,
            command.ne != nil
        {
            return .wrongLength
        }
        if let status = masterFileSelectStatus, command.ins == CommandAPDU.Instruction.select, command.p1 == 0x00,
            command.data.isEmpty || command.data == [0x3F, 0x00]
        {
            return StatusWord(status)
        }
        if rejectKeyReference, command.ins == 0x22, command.p1 == 0xC1, command.p2 == 0xA4,
            let objects = try? TLV.parseAll(command.data, options: []), objects.first(tag: 0x84) != nil
        {
            return .incorrectData
        }
        return nil
    }

    /// READ BINARY data and status after the length quirks; `toEnd` tells whether `data` reaches the file's end.
    func readBinary(_ data: [UInt8], sw: StatusWord, toEnd: Bool) -> ([UInt8], StatusWord) {
        var out = data, status = sw
        if let limit = maxResponseLength, out.count > limit {
            out = Array(out.prefix(limit))
            return (out, .success)
        }
        if endOfFileWarning, toEnd, status.isSuccess { status = .endOfFileWarning }
        return (out, status)
    }
}
