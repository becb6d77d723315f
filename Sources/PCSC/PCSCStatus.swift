internal import CPCSCLite
import TesseraCore

// pcsc-lite return codes. The header defines them as `((LONG)0x8010xxxx)` casts, which Swift does not
// import reliably, so they are restated here. LONG is `long` (Int) on Linux.
enum SCardRV {
    static let success = 0x0000_0000
    static let cancelled = 0x8010_0002
    static let invalidHandle = 0x8010_0003
    static let insufficientBuffer = 0x8010_0008
    static let unknownReader = 0x8010_0009
    static let timeout = 0x8010_000A
    static let sharingViolation = 0x8010_000B
    static let noSmartcard = 0x8010_000C
    static let protoMismatch = 0x8010_000F
    static let notReady = 0x8010_0010
    static let notTransacted = 0x8010_0016
    static let readerUnavailable = 0x8010_0017
    static let noService = 0x8010_001D
    static let serviceStopped = 0x8010_001E
    static let noReadersAvailable = 0x8010_002E
    static let commDataLost = 0x8010_002F
    static let unsupportedCard = 0x8010_0065
    static let unresponsiveCard = 0x8010_0066
    static let unpoweredCard = 0x8010_0067
    static let resetCard = 0x8010_0068
    static let removedCard = 0x8010_0069
}

// pcsclite.h constants restated for the same reason (DWORD is `unsigned long`, UInt, on Linux).
enum SCardConst {
    static let scopeSystem: DWORD = 0x0002
    static let protocolT0: DWORD = 0x0001
    static let protocolT1: DWORD = 0x0002
    static let protocolRaw: DWORD = 0x0004
    static let shareExclusive: DWORD = 0x0001
    static let shareShared: DWORD = 0x0002
    static let shareDirect: DWORD = 0x0003
    static let leaveCard: DWORD = 0x0000
    static let resetCard: DWORD = 0x0001
    static let unpowerCard: DWORD = 0x0002
    static let stateUnaware: DWORD = 0x0000
    static let stateChanged: DWORD = 0x0002
    static let stateUnknown: DWORD = 0x0004
    static let stateUnavailable: DWORD = 0x0008
    static let stateEmpty: DWORD = 0x0010
    static let statePresent: DWORD = 0x0020
    static let stateExclusive: DWORD = 0x0080
    static let stateInUse: DWORD = 0x0100
    static let stateMute: DWORD = 0x0200
    static let stateUnpowered: DWORD = 0x0400
    static let cardAbsent: DWORD = 0x0002
    static let cardPresent: DWORD = 0x0004
    static let infinite: DWORD = 0xFFFF_FFFF
    static let maxATRSize = 33
    static let maxReaderName = 128
    /// MAX_BUFFER_SIZE_EXTENDED: 64 KiB + header, Lc, Le and SW.
    static let maxBufferExtended = 4 + 3 + (1 << 16) + 3 + 2
    static let pnpReaderName = "\\\\?PnP?\\Notification"
}

/// Where a PC/SC failure happened: decides between NO_CARD/NO_READER (before a session) and CARD_REMOVED (during one).
enum SCardPhase {
    case context
    case connect
    case session
}

/// What to do when pcscd cannot be reached (the PCSC_UNAVAILABLE message carries it).
let pcscdAdvice =
    "is pcscd running? Start it (sudo systemctl start pcscd.socket; sudo apt install pcscd), or point PCSCLITE_CSOCK_NAME at a private pcscd's socket; tessera doctor checks the set-up"

func pcscErrorText(_ rv: Int) -> String {
    guard let text = pcsc_stringify_error(LONG(rv)) else { return "unknown" }
    return String(cString: text)
}

/// Maps a pcsc-lite return code to a TesseraError.
func pcscError(_ rv: Int, _ operation: String, phase: SCardPhase) -> TesseraError {
    let hex = "0x" + String(UInt32(truncatingIfNeeded: rv), radix: 16, uppercase: true)
    let text = "\(operation): \(pcscErrorText(rv)) (\(hex))"
    let details: [String: JSONValue] = ["pcscCode": .string(hex)]
    switch rv {
    case SCardRV.noService, SCardRV.serviceStopped:
        return TesseraError(.pcscUnavailable, text + " — " + pcscdAdvice, details: details)
    case SCardRV.removedCard, SCardRV.noSmartcard:
        return TesseraError(phase == .session ? .cardRemoved : .noCard, text, details: details)
    case SCardRV.resetCard:
        return TesseraError(.cardReset, text, details: details)
    case SCardRV.readerUnavailable, SCardRV.unknownReader:
        return TesseraError(phase == .session ? .cardRemoved : .noReader, text, details: details)
    case SCardRV.noReadersAvailable:
        return TesseraError(.noReader, text, details: details)
    case SCardRV.sharingViolation:
        return TesseraError(.cardInUse, text, retryable: true, details: details)
    case SCardRV.cancelled:
        return TesseraError(.cancelled, text, details: details)
    case SCardRV.invalidHandle where phase == .session:
        // The handle died with its context, e.g. after pcscd restarted: the session is gone.
        return TesseraError(.cardRemoved, text, details: details)
    default:
        return TesseraError(.cardError, text, details: details)
    }
}

func isServiceGone(_ rv: Int) -> Bool {
    rv == SCardRV.noService || rv == SCardRV.serviceStopped
}
