import APDU
import TesseraCore

extension TesseraError {
    /// Whether this is the CARD_ERROR raised for an absent file (SW 6A82), e.g. a data group the chip lacks.
    public var isFileNotFound: Bool {
        code == .cardError && details["sw"] == .string(StatusWord.fileNotFound.description)
    }
}

/// Reads transparent elementary files over any transport (plain or `SecureChannel`): SELECT by FID or
/// READ BINARY with SFI, then READ BINARY by offset (odd INS B1 beyond offset 32767). The total size comes
/// from the file's outer TLV length. On 6700, 6Cxx or short reads the chunk size steps down and the read
/// continues in the same session.
public actor ElementaryFileReader {
    public struct Configuration: Sendable {
        /// Bytes per READ BINARY in short APDUs; 0xDF leaves room for SM overhead.
        public var chunkSize: Int = 0xDF
        /// Bytes per READ BINARY when the transport supports extended length (0 disables extended length).
        public var extendedChunkSize: Int = 0
        /// Files announcing a larger total length are rejected (MALFORMED_DATA).
        public var maximumFileSize: Int = 1 << 20
        /// Smallest chunk size the step-down may reach before giving up.
        public var minimumChunkSize: Int = 8
        public init() {}
    }

    /// Counters over the reader's lifetime.
    public struct Statistics: Sendable, Equatable {
        /// Command APDUs sent (including SELECTs and retries).
        public var apduCount = 0
        /// File content bytes received.
        public var bytesRead = 0
        /// Number of chunk-size reductions.
        public var stepDowns = 0
        /// Files read completely.
        public var filesRead = 0
    }

    public nonisolated let transport: any APDUTransport
    public let configuration: Configuration
    public private(set) var statistics = Statistics()
    private var chunkSize: Int

    public init(transport: any APDUTransport, configuration: Configuration = Configuration()) {
        self.transport = transport
        self.configuration = configuration
        let useExtended = transport.supportsExtendedLength && configuration.extendedChunkSize > configuration.chunkSize
        chunkSize = useExtended ? min(configuration.extendedChunkSize, 65536) : min(configuration.chunkSize, 256)
    }

    /// The chunk size the next READ BINARY will use.
    public var currentChunkSize: Int { chunkSize }

    /// Selects an EF by file identifier under the current DF (SELECT P1=02 P2=0C).
    public func select(fid: UInt16) async throws(TesseraError) {
        let response = try await send(
            CommandAPDU.select(fileID: fid, .elementaryFileUnderCurrentDF))
        try Self.check(response.sw, context: "SELECT \(hex4(fid))")
    }

    /// Reads a whole file. With `sfi` the first chunk is read by short file identifier (no SELECT),
    /// otherwise the file is selected by `fid` first. `progress` receives (bytes read, total bytes).
    /// Throws CARD_ERROR with `details.sw` ("6A82" for an absent file; see `isFileNotFound`),
    /// ACCESS_DENIED on 6982, MALFORMED_DATA on an implausible length.
    public func readFile(
        fid: UInt16, sfi: UInt8? = nil,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(TesseraError) -> [UInt8] {
        var content: [UInt8] = []
        var total: Int?
        if let sfi {
            guard sfi >= 1, sfi <= 0x1E else { throw TesseraError.invalidInput("SFI out of range") }
            let first = try await readChunk(offset: 0, length: chunkSize, sfi: sfi, expectedRemaining: nil)
            content = first
        } else {
            try await select(fid: fid)
        }
        while true {
            if total == nil, let size = (try? TLV.totalLength(ofPrefix: content)) ?? nil {
                guard size <= configuration.maximumFileSize else {
                    throw TesseraError(
                        .malformedData, "file announces \(size) bytes, more than the allowed maximum",
                        details: ["announcedSize": .number(Double(size))])
                }
                total = size
            }
            if let total {
                progress?(min(content.count, total), total)
                if content.count >= total { break }
            } else if content.count >= 8 {
                throw TesseraError(.malformedData, "file does not start with a valid TLV header")
            }
            let remaining = total.map { $0 - content.count }
            let length = remaining.map { min(chunkSize, $0) } ?? min(chunkSize, 8)
            let chunk = try await readChunk(
                offset: content.count, length: length, sfi: nil, expectedRemaining: remaining)
            content += chunk
        }
        statistics.filesRead += 1
        return Array(content.prefix(total ?? content.count))
    }

    // MARK: Internals

    private func send(_ command: CommandAPDU) async throws(TesseraError) -> ResponseAPDU {
        statistics.apduCount += 1
        return try await transport.send(command)
    }

    private static func check(_ sw: StatusWord, context: String) throws(TesseraError) {
        if sw.isSuccess { return }
        let details: [String: JSONValue] = ["sw": .string(sw.description)]
        switch sw {
        case .fileNotFound:
            throw TesseraError(.cardError, "\(context): file not found", details: details)
        case .securityStatusNotSatisfied, .conditionsNotSatisfied:
            throw TesseraError(.accessDenied, "\(context): access denied (\(sw))", details: details)
        default:
            throw TesseraError(.cardError, "\(context) failed with \(sw)", details: details)
        }
    }

    private func stepDown(to proposed: Int? = nil) throws(TesseraError) {
        var next = chunkSize > configuration.chunkSize ? min(configuration.chunkSize, 256) : chunkSize / 2
        if let proposed, proposed < chunkSize { next = proposed }
        guard next >= configuration.minimumChunkSize, next < chunkSize else {
            throw TesseraError(.cardError, "READ BINARY keeps failing even with \(chunkSize)-byte chunks")
        }
        chunkSize = next
        statistics.stepDowns += 1
    }

    /// One READ BINARY with retries at smaller sizes. Returns at least one byte.
    private func readChunk(offset: Int, length: Int, sfi: UInt8?, expectedRemaining: Int?) async throws(TesseraError)
        -> [UInt8]
    {
        var want = length
        while true {
            let command: CommandAPDU
            if let sfi {
                command = try CommandAPDU.readBinary(shortFileID: sfi, offset: UInt8(offset & 0xFF), ne: want)
            } else if offset <= 0x7FFF {
                command = try CommandAPDU.readBinary(offset: offset, ne: want)
            } else {
                // Response carries DO'53' around the content; allow for its header.
                command = try CommandAPDU.readBinary(offsetDataObject: offset, ne: min(want + 4, 65536))
            }
            let response = try await send(command)
            let sw = response.sw
            if sw == .wrongLength || sw.sw1 == 0x6C {
                let proposed = sw.sw1 == 0x6C ? sw.correctLength : nil
                if let proposed, proposed < want, proposed > 0 {
                    // 6Cxx survived `send`'s retry: take the card's length for this chunk.
                    want = proposed
                    try stepDown(to: max(proposed, configuration.minimumChunkSize))
                    continue
                }
                try stepDown()
                want = min(want, chunkSize)
                continue
            }
            guard sw.isSuccess || sw == .endOfFileWarning else {
                try Self.check(sw, context: "READ BINARY at offset \(offset)")
                return []
            }
            var data = response.data
            if command.ins == CommandAPDU.Instruction.readBinaryOffsetDataObject {
                guard let wrapper = try? TLV.parse(data, allowTrailing: true, options: []), wrapper.tag == 0x53 else {
                    throw TesseraError(.malformedData, "READ BINARY (B1) response without DO'53'")
                }
                data = wrapper.value
            }
            if data.count > want {
                throw TesseraError(.malformedData, "card returned \(data.count) bytes for Le \(want)")
            }
            if data.isEmpty {
                throw TesseraError(
                    .malformedData, "card returned no data at offset \(offset)",
                    details: ["sw": .string(sw.description)])
            }
            if let expectedRemaining, data.count < min(want, expectedRemaining), !sw.isSuccess {
                throw TesseraError(.malformedData, "file ended before its announced length (\(sw))")
            }
            statistics.bytesRead += data.count
            return data
        }
    }
}

private func hex4(_ value: UInt16) -> String {
    let s = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - s.count)) + s
}
