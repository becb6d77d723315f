import TesseraCore

/// One reader as PC/SC reports it.
public struct PCSCReaderState: Sendable, Hashable, CustomStringConvertible {
    /// The reader name as pcscd reports it (e.g. "Virtual PCD 00 00").
    public var name: String
    public var cardPresent: Bool
    /// The ATR of the card in the reader; empty when no card is present.
    public var atr: [UInt8]
    /// Another client holds the card exclusively.
    public var exclusive: Bool
    /// At least one client is connected to the card.
    public var inUse: Bool
    /// The card does not answer (no usable ATR).
    public var mute: Bool
    /// pcscd's per-reader event counter (16 bits): one step per insertion and per removal, so a quick
    /// remove+insert moves it by two.
    public var eventCount: Int

    public init(
        name: String, cardPresent: Bool = false, atr: [UInt8] = [], exclusive: Bool = false,
        inUse: Bool = false, mute: Bool = false, eventCount: Int = 0
    ) {
        self.name = name; self.cardPresent = cardPresent; self.atr = atr; self.exclusive = exclusive
        self.inUse = inUse; self.mute = mute; self.eventCount = eventCount
    }

    public var description: String {
        let card = cardPresent ? "card \(Hex.encode(atr))" : "empty"
        return
            "\(name): \(card)\(exclusive ? " exclusive" : "")\(inUse ? " in-use" : "")\(mute ? " mute" : "") #\(eventCount)"
    }
}

/// A reader or card change, as delivered by `PCSCContext.events()`.
public enum PCSCEvent: Sendable, Hashable {
    /// A reader appeared (at stream start, every existing reader is reported this way, card included).
    case readerAdded(PCSCReaderState)
    case readerRemoved(name: String)
    case cardInserted(PCSCReaderState)
    case cardRemoved(reader: String)
    /// pcscd stopped (or cannot be reached); every reader is gone until `serviceAvailable`.
    case serviceUnavailable
    case serviceAvailable
}

/// How the connection shares the card with other PC/SC clients.
public enum PCSCShareMode: Sendable, Hashable {
    case shared
    case exclusive
    /// Talks to the reader without a card (SCardControl use); no APDUs.
    case direct
}

/// Protocols acceptable for a connection.
public struct PCSCProtocols: OptionSet, Sendable, Hashable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let t0 = PCSCProtocols(rawValue: 0x1)
    public static let t1 = PCSCProtocols(rawValue: 0x2)
    public static let raw = PCSCProtocols(rawValue: 0x4)
    /// T=0 or T=1, whichever the reader negotiates.
    public static let any: PCSCProtocols = [.t0, .t1]
}

/// The protocol negotiated for a connection.
public enum PCSCProtocol: Sendable, Hashable {
    case t0, t1, raw, undefined

    init(dword: UInt) {
        switch dword {
        case 0x1: self = .t0
        case 0x2: self = .t1
        case 0x4: self = .raw
        default: self = .undefined
        }
    }
}

/// What an ATR says about the card (ISO/IEC 7816-3 §8, historical bytes per 7816-4 §8.1.1).
public struct ATRInfo: Sendable, Hashable {
    /// Protocols the ATR offers (T=0 when none is indicated).
    public var protocols: [Int]
    public var historicalBytes: [UInt8]
    /// Card capabilities (compact-TLV tag 7), third byte bit 7: extended Lc/Le supported.
    public var extendedLength: Bool
    /// Card capabilities, third byte bit 8: command chaining supported.
    public var commandChaining: Bool

    /// Parses an ATR; nil when it is truncated or malformed.
    public init?(_ atr: [UInt8]) {
        guard atr.count >= 2 else { return nil }
        let k = Int(atr[1] & 0x0F)
        var y = atr[1] >> 4
        var i = 2
        var protocols: [Int] = []
        while true {
            if y & 0x1 != 0 { i += 1 }
            if y & 0x2 != 0 { i += 1 }
            if y & 0x4 != 0 { i += 1 }
            guard y & 0x8 != 0 else { break }
            guard i < atr.count else { return nil }
            let td = atr[i]
            i += 1
            protocols.append(Int(td & 0x0F))
            y = td >> 4
        }
        guard i + k <= atr.count else { return nil }
        self.protocols = protocols.isEmpty ? [0] : Array(Set(protocols)).sorted()
        historicalBytes = Array(atr[i..<(i + k)])
        extendedLength = false
        commandChaining = false
        if let caps = Self.cardCapabilities(historicalBytes), caps.count >= 3 {
            extendedLength = caps[2] & 0x40 != 0
            commandChaining = caps[2] & 0x80 != 0
        }
    }

    /// The value of compact-TLV tag 7 in the historical bytes, if present.
    static func cardCapabilities(_ hist: [UInt8]) -> [UInt8]? {
        guard let category = hist.first else { return nil }
        var end: Int
        switch category {
        case 0x80: end = hist.count
        case 0x00: end = hist.count - 3
        default: return nil
        }
        var i = 1
        if end < i { end = i }
        while i < end {
            let tag = hist[i] >> 4
            let len = Int(hist[i] & 0x0F)
            guard i + 1 + len <= end else { return nil }
            if tag == 0x7 { return Array(hist[(i + 1)..<(i + 1 + len)]) }
            i += 1 + len
        }
        return nil
    }
}
