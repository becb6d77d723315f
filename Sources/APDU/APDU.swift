import TesseraCore

/// An ISO/IEC 7816-4 command APDU. `ne` is the expected response length: nil = no Le field,
/// 256 (short) or 65536 (extended) = "as much as available" (encoded as 00 / 0000).
public struct CommandAPDU: Sendable, Equatable, CustomStringConvertible {
    public var cla: UInt8
    public var ins: UInt8
    public var p1: UInt8
    public var p2: UInt8
    public var data: [UInt8]
    public var ne: Int?
    /// Forces extended-length encoding even when short would do.
    public var forceExtended: Bool

    public init(
        cla: UInt8 = 0x00, ins: UInt8, p1: UInt8, p2: UInt8, data: [UInt8] = [], ne: Int? = nil,
        forceExtended: Bool = false
    ) {
        self.cla = cla; self.ins = ins; self.p1 = p1; self.p2 = p2; self.data = data; self.ne = ne
        self.forceExtended = forceExtended
    }

    /// Whether this command needs extended length fields (Lc > 255 or Ne > 256).
    public var isExtended: Bool { forceExtended || data.count > 255 || (ne ?? 0) > 256 }

    /// Encodes into the wire form (cases 1, 2S/E, 3S/E, 4S/E). Throws INVALID_INPUT on impossible lengths.
    public func encoded() throws(TesseraError) -> [UInt8] {
        guard data.count <= 65535 else { throw .invalidInput("APDU data longer than 65535 bytes") }
        if let ne, ne < 0 || ne > 65536 { throw .invalidInput("APDU Ne out of range") }
        var out: [UInt8] = [cla, ins, p1, p2]
        let ext = isExtended
        if !data.isEmpty {
            if ext {
                out += [0x00, UInt8(data.count >> 8), UInt8(data.count & 0xFF)]
            } else {
                out.append(UInt8(data.count))
            }
            out += data
        }
        if let ne {
            if ext {
                if data.isEmpty { out.append(0x00) }
                let v = ne == 65536 ? 0 : ne
                out += [UInt8(v >> 8), UInt8(v & 0xFF)]
            } else {
                out.append(ne == 256 ? 0x00 : UInt8(ne))
            }
        }
        return out
    }

    /// Parses a wire-form command APDU (as an emulated card receives it).
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        guard bytes.count >= 4 else { throw TesseraError(.malformedData, "command APDU shorter than 4 bytes") }
        cla = bytes[0]; ins = bytes[1]; p1 = bytes[2]; p2 = bytes[3]
        data = []; ne = nil; forceExtended = false
        let body = Array(bytes[4...])
        if body.isEmpty { return }
        if body.count == 1 { ne = body[0] == 0 ? 256 : Int(body[0]); return }
        if body[0] == 0 && body.count >= 3 {
            // Extended length.
            forceExtended = true
            let len = Int(body[1]) << 8 | Int(body[2])
            if body.count == 3 { ne = len == 0 ? 65536 : len; return }
            guard len > 0, body.count >= 3 + len else { throw TesseraError(.malformedData, "bad extended Lc") }
            data = Array(body[3..<(3 + len)])
            let rest = body.count - 3 - len
            if rest == 0 { return }
            guard rest == 2 else { throw TesseraError(.malformedData, "bad extended Le") }
            let le = Int(body[3 + len]) << 8 | Int(body[4 + len])
            ne = le == 0 ? 65536 : le
            return
        }
        let lc = Int(body[0])
        guard lc > 0, body.count >= 1 + lc else { throw TesseraError(.malformedData, "bad Lc") }
        data = Array(body[1..<(1 + lc)])
        let rest = body.count - 1 - lc
        if rest == 0 { return }
        guard rest == 1 else { throw TesseraError(.malformedData, "bad Le") }
        ne = body[1 + lc] == 0 ? 256 : Int(body[1 + lc])
    }

    public var description: String {
        "APDU(\(Hex.encode([cla, ins, p1, p2])) Lc=\(data.count) Ne=\(ne.map(String.init) ?? "-"))"
    }
}

/// A response APDU: data followed by the two status bytes.
public struct ResponseAPDU: Sendable, Equatable {
    public var data: [UInt8]
    public var sw: StatusWord

    public init(data: [UInt8] = [], sw: StatusWord) { self.data = data; self.sw = sw }

    /// Splits wire bytes into data + SW. Throws MALFORMED_DATA when fewer than two bytes arrive.
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        guard bytes.count >= 2 else { throw TesseraError(.malformedData, "response APDU shorter than 2 bytes") }
        data = Array(bytes[..<(bytes.count - 2)])
        sw = StatusWord(sw1: bytes[bytes.count - 2], sw2: bytes[bytes.count - 1])
    }

    public var encoded: [UInt8] { data + [sw.sw1, sw.sw2] }
}

/// ISO 7816-4 status word.
public struct StatusWord: Sendable, Hashable, CustomStringConvertible {
    public var value: UInt16
    public init(_ value: UInt16) { self.value = value }
    public init(sw1: UInt8, sw2: UInt8) { value = UInt16(sw1) << 8 | UInt16(sw2) }
    public var sw1: UInt8 { UInt8(value >> 8) }
    public var sw2: UInt8 { UInt8(value & 0xFF) }

    public static let success = StatusWord(0x9000)
    public static let wrongLength = StatusWord(0x6700)
    public static let securityStatusNotSatisfied = StatusWord(0x6982)
    public static let authenticationBlocked = StatusWord(0x6983)
    public static let conditionsNotSatisfied = StatusWord(0x6985)
    public static let smDataObjectsIncorrect = StatusWord(0x6988)
    public static let smDataMissing = StatusWord(0x6987)
    public static let incorrectData = StatusWord(0x6A80)
    public static let fileNotFound = StatusWord(0x6A82)
    public static let wrongP1P2 = StatusWord(0x6A86)
    public static let referenceNotFound = StatusWord(0x6A88)
    public static let wrongP1P2Offset = StatusWord(0x6B00)
    public static let insNotSupported = StatusWord(0x6D00)
    public static let claNotSupported = StatusWord(0x6E00)
    public static let unknown = StatusWord(0x6F00)
    public static let endOfFileWarning = StatusWord(0x6282)

    public var isSuccess: Bool { value == 0x9000 }
    /// 61xx: more data available via GET RESPONSE.
    public var moreDataAvailable: Int? { sw1 == 0x61 ? (sw2 == 0 ? 256 : Int(sw2)) : nil }
    /// 6Cxx: wrong Le; re-issue with Le = xx.
    public var correctLength: Int? { sw1 == 0x6C ? (sw2 == 0 ? 256 : Int(sw2)) : nil }
    /// 63Cx: verification failed, x retries left.
    public var retriesLeft: Int? { (value & 0xFFF0) == 0x63C0 ? Int(value & 0x000F) : nil }

    public var description: String { Hex.encode([sw1, sw2]).uppercased() }
}

/// The seam between protocols and devices: send one command APDU, get its response.
/// PC/SC cards, libnfc targets and in-process emulated chips implement it.
public protocol APDUTransport: Sendable {
    /// Transmits raw command bytes and returns the raw response (data + SW1SW2).
    /// Implementations throw CARD_REMOVED when the card left, NO_CARD / NO_READER as appropriate.
    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8]
    /// Whether the reader/card pair accepts extended-length APDUs (a hint; callers step down on 6700).
    var supportsExtendedLength: Bool { get }
}

extension APDUTransport {
    public var supportsExtendedLength: Bool { false }

    /// Sends a command and follows ISO 7816-4 transport rules: 61xx → GET RESPONSE (concatenated),
    /// 6Cxx → re-issue with the corrected Le. Returns the final response with its status word
    /// (a non-9000 status is returned, not thrown).
    public func send(_ command: CommandAPDU) async throws(TesseraError) -> ResponseAPDU {
        var cmd = command
        var response = try ResponseAPDU(parsing: await transmit(try cmd.encoded()))
        if let le = response.sw.correctLength, cmd.ne != nil {
            cmd.ne = le
            response = try ResponseAPDU(parsing: await transmit(try cmd.encoded()))
        }
        var data = response.data
        var guardCount = 0
        while let more = response.sw.moreDataAvailable {
            guardCount += 1
            guard guardCount < 512 else { throw TesseraError(.malformedData, "endless GET RESPONSE chain") }
            let get = CommandAPDU.getResponse(ne: more, cla: cmd.cla & 0x80 == 0 ? 0x00 : cmd.cla)
            response = try ResponseAPDU(parsing: await transmit(try get.encoded()))
            data += response.data
        }
        return ResponseAPDU(data: data, sw: response.sw)
    }
}
