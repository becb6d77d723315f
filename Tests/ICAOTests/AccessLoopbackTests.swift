import APDU
import FoundationEssentials
import TesseraCore
import Testing
import X509Support

@testable import ICAO

/// A tiny in-memory eMRTD chip built from the side-neutral Access functions (BAC responder, PACEChip,
/// card-side secure messaging). It answers READ BINARY with Le above `maxLe` with a plain 6700, and
/// absent files with a plain 6A82 (neither advances its SSC), like many real chips.
actor AccessLoopbackChip: APDUTransport {
    nonisolated let supportsExtendedLength: Bool
    let mrzInformation: String
    let can: String
    let cardAccess: [UInt8]?
    let appFiles: [UInt16: [UInt8]]
    let maxLe: Int
    let chipAuthenticationKey: [UInt8]?
    private var inApp = false
    private var current: [UInt8]?
    private var sm: SecureMessagingSession?
    private var bac: BACChipResponder
    private var pace: PACEChip?
    private(set) var commandCount = 0
    private(set) var rejectedLengths = 0

    init(
        mrzInformation: String, can: String = "123456", cardAccess: [UInt8]?, appFiles: [UInt16: [UInt8]],
        maxLe: Int = 0xDF, extended: Bool = false, chipAuthenticationKey: [UInt8]? = nil
    ) {
        self.mrzInformation = mrzInformation; self.can = can; self.cardAccess = cardAccess
        self.appFiles = appFiles; self.maxLe = maxLe; supportsExtendedLength = extended
        self.chipAuthenticationKey = chipAuthenticationKey
        bac = BACChipResponder(mrzInformation: mrzInformation)
    }

    var session: SecureMessagingSession? { sm }

    func transmit(_ bytes: [UInt8]) async throws(TesseraError) -> [UInt8] {
        commandCount += 1
        var command = try CommandAPDU(parsing: bytes)
        let protected = command.cla & 0x0C == 0x0C
        if protected {
            guard var state = sm else { return [0x69, 0x88] }
            do { command = try state.unprotectCommand(command) } catch { sm = nil; pace = nil; return [0x69, 0x88] }
            sm = state
        } else if sm != nil, command.ins != 0x22, command.ins != 0x86, command.ins != 0x84 {
            // Plain command while SM is active: abort SM (Part 11 §9.8).
            sm = nil
            return [0x69, 0x87]
        }
        let response = process(command)
        guard protected, var state = sm,
            response.data.isEmpty == false || response.sw.isSuccess || response.sw == .endOfFileWarning
        else {
            return response.encoded
        }
        let wrapped = try state.protectResponse(response, oddINS: command.ins & 1 == 1)
        sm = state
        return wrapped.encoded
    }

    private func process(_ c: CommandAPDU) -> ResponseAPDU {
        switch c.ins {
        case 0xA4:
            if c.p1 == 0x04 {
                guard c.data == eMRTDApplicationID else { return ResponseAPDU(sw: .fileNotFound) }
                inApp = true; current = nil
                return ResponseAPDU(sw: .success)
            }
            if c.p1 == 0x00 { inApp = false; current = nil; return ResponseAPDU(sw: .success) }
            guard c.data.count == 2 else { return ResponseAPDU(sw: .wrongP1P2) }
            let fid = UInt16(c.data[0]) << 8 | UInt16(c.data[1])
            guard let file = file(fid) else { return ResponseAPDU(sw: .fileNotFound) }
            current = file
            return ResponseAPDU(sw: .success)
        case 0xB0, 0xB1:
            var offset: Int
            if c.ins == 0xB1 {
                guard c.data.count >= 3, c.data[0] == 0x54 else { return ResponseAPDU(sw: .incorrectData) }
                offset = c.data[2..<(2 + Int(c.data[1]))].reduce(0) { $0 << 8 | Int($1) }
            } else if c.p1 & 0x80 != 0 {
                let sfi = c.p1 & 0x1F
                let fid: UInt16 = sfi == 0x1C ? 0x011C : (inApp ? 0x0100 | UInt16(sfi) : 0xFFFF)
                guard let f = file(fid) else { return ResponseAPDU(sw: .fileNotFound) }
                current = f
                offset = Int(c.p2)
            } else {
                offset = Int(c.p1) << 8 | Int(c.p2)
            }
            guard let file = current else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
            let ne = c.ne ?? 256
            if ne > maxLe { rejectedLengths += 1; return ResponseAPDU(sw: .wrongLength) }
            guard offset < file.count else { return ResponseAPDU(sw: .wrongP1P2Offset) }
            let count = c.ins == 0xB1 ? min(ne - 4, file.count - offset) : min(ne, file.count - offset)
            var data = Array(file[offset..<(offset + count)])
            if c.ins == 0xB1 { data = [0x53, 0x82, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data }
            return ResponseAPDU(data: data, sw: count < ne && c.ins == 0xB0 ? .endOfFileWarning : .success)
        case 0x84:
            guard inApp, let r = try? bac.challenge() else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
            return ResponseAPDU(data: r, sw: .success)
        case 0x82:
            do {
                let result = try bac.externalAuthenticate(c.data)
                sm = result.session
                return ResponseAPDU(data: result.response, sw: .success)
            } catch { return ResponseAPDU(sw: StatusWord(0x6300)) }
        case 0x22:
            do {
                pace = try PACEChip(
                    setATData: c.data, mrzInformation: mrzInformation, can: can,
                    chipAuthenticationKey: chipAuthenticationKey)
                sm = nil
                return ResponseAPDU(sw: .success)
            } catch { return ResponseAPDU(sw: .referenceNotFound) }
        case 0x86:
            guard var p = pace else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
            do {
                let out = try p.generalAuthenticate(c.data)
                pace = p
                if let s = p.session { sm = s }
                return ResponseAPDU(data: out, sw: .success)
            } catch { pace = nil; return ResponseAPDU(sw: StatusWord(0x6300)) }
        default:
            return ResponseAPDU(sw: .insNotSupported)
        }
    }

    private func file(_ fid: UInt16) -> [UInt8]? {
        if fid == 0x011C { return inApp ? nil : cardAccess }
        return inApp ? appFiles[fid] : nil
    }
}

/// Loopback: reader code (establishAccess, SecureChannel, ElementaryFileReader) against the in-test chip.
@Suite struct AccessLoopbackTests {
    static let mrz = "L898902C<369080619406236"

    static func tlvFile(tag: UInt8, size: Int) -> [UInt8] {
        let body = (0..<size).map { UInt8(($0 * 7 + 3) & 0xFF) }
        return [tag] + TLV.encodeLength(size) + body
    }

    static let efCOM = ax("60145F0104303130365F36063034303030305C026175")
    static let dg1 = tlvFile(tag: 0x61, size: 93)
    static let dg2 = tlvFile(tag: 0x75, size: 3000)

    static func cardAccess(oid: String, parameterId: Int) -> [UInt8] {
        let oidContent = ASN1.encodeOIDContent(oid)
        let info = [0x06, UInt8(oidContent.count)] + oidContent + [0x02, 0x01, 0x02, 0x02, 0x01, UInt8(parameterId)]
        let seq = [0x30, UInt8(info.count)] + info
        return [0x31, UInt8(seq.count)] + seq
    }

    @Test func bacThenReadWithStepDown() async throws {
        let chip = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: nil,
            appFiles: [0x011E: Self.efCOM, 0x0102: Self.dg2], maxLe: 0x80)
        let (channel, used) = try await establishAccess(transport: chip, password: .mrz(mrzInformation: Self.mrz))
        #expect(used == .bac)
        let reader = ElementaryFileReader(transport: channel)
        #expect(try await reader.readFile(fid: 0x011E, sfi: 0x1E) == Self.efCOM)
        let progressLog = ProgressLog()
        let dg2 = try await reader.readFile(fid: 0x0102, sfi: 0x02) { done, total in progressLog.record(done, total) }
        #expect(dg2 == Self.dg2)
        let stats = await reader.statistics
        #expect(stats.stepDowns >= 1)
        #expect(stats.filesRead == 2)
        #expect(await reader.currentChunkSize <= 0x80)
        #expect(await chip.rejectedLengths >= 1)
        #expect(progressLog.last?.0 == 3004 && progressLog.last?.1 == 3004)
        // The SM session survived the plain 6700 answers: both sides agree on the SSC.
        #expect(await channel.currentSession?.ssc == (await chip.session?.ssc))
        // An absent file is a typed CARD_ERROR (plain 6A82), and the session continues afterwards.
        do {
            _ = try await reader.readFile(fid: 0x0103)
            Issue.record("expected file not found")
        } catch { #expect(error.isFileNotFound) }
        #expect(try await reader.readFile(fid: 0x011E) == Self.efCOM)
    }

    @Test(arguments: [
        ("0.4.0.127.0.7.2.2.4.2.2", 13),  // ECDH GM AES-128 brainpoolP256r1
        ("0.4.0.127.0.7.2.2.4.2.4", 18),  // ECDH GM AES-256 secp521r1
        ("0.4.0.127.0.7.2.2.4.2.1", 12),  // ECDH GM 3DES secp256r1
        ("0.4.0.127.0.7.2.2.4.1.2", 2),  // DH GM AES-128 2048/256
        ("0.4.0.127.0.7.2.2.4.1.3", 0),  // DH GM AES-192 1024/160
    ])
    func paceWithCANThenRead(oid: String, parameterId: Int) async throws {
        let chip = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: Self.cardAccess(oid: oid, parameterId: parameterId),
            appFiles: [0x0101: Self.dg1, 0x0102: Self.dg2], maxLe: 0xDF)
        let (channel, used) = try await establishAccess(transport: chip, password: .can("123456"))
        #expect(used == .pace)
        #expect(await channel.currentSession?.cipher == PACEAlgorithm(oid: oid)?.cipher)
        let reader = ElementaryFileReader(transport: channel)
        #expect(try await reader.readFile(fid: 0x0101, sfi: 0x01) == Self.dg1)
        #expect(try await reader.readFile(fid: 0x0102) == Self.dg2)
    }

    @Test func paceWithMRZ() async throws {
        let chip = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: Self.cardAccess(oid: "0.4.0.127.0.7.2.2.4.2.2", parameterId: 13),
            appFiles: [0x0101: Self.dg1])
        let (channel, used) = try await establishAccess(transport: chip, password: .mrz(mrzInformation: Self.mrz))
        #expect(used == .pace)
        #expect(try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01) == Self.dg1)
        // preferPACE: false uses BAC even though PACE is offered.
        let chip2 = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: Self.cardAccess(oid: "0.4.0.127.0.7.2.2.4.2.2", parameterId: 13),
            appFiles: [0x0101: Self.dg1])
        #expect(
            try await establishAccess(transport: chip2, password: .mrz(mrzInformation: Self.mrz), preferPACE: false)
                .protocolUsed == .bac)
    }

    @Test func wrongPasswordsAreAccessDenied() async throws {
        let paceChip = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: Self.cardAccess(oid: "0.4.0.127.0.7.2.2.4.2.2", parameterId: 13),
            appFiles: [:])
        do {
            _ = try await establishAccess(transport: paceChip, password: .can("654321"))
            Issue.record("expected ACCESS_DENIED")
        } catch { #expect(error.code == .accessDenied) }
        let bacChip = AccessLoopbackChip(mrzInformation: Self.mrz, cardAccess: nil, appFiles: [:])
        do {
            _ = try await establishAccess(
                transport: bacChip, password: .mrz(mrzInformation: "L898902C<369080619406237"))
            Issue.record("expected ACCESS_DENIED")
        } catch { #expect(error.code == .accessDenied) }
        do {
            _ = try await establishAccess(transport: bacChip, password: .can("123456"))
            Issue.record("expected UNSUPPORTED_PROTOCOL")
        } catch { #expect(error.code == .unsupportedProtocol) }
    }

    /// Files beyond offset 32767 are read with odd INS B1 (offset DO'54', data DO'53'), here with
    /// extended-length APDUs under AES secure messaging.
    @Test func largeFileWithOddINSAndExtendedLength() async throws {
        let big = Self.tlvFile(tag: 0x75, size: 40000)
        let chip = AccessLoopbackChip(
            mrzInformation: Self.mrz, cardAccess: Self.cardAccess(oid: "0.4.0.127.0.7.2.2.4.2.2", parameterId: 13),
            appFiles: [0x0102: big], maxLe: 4096, extended: true)
        let (channel, _) = try await establishAccess(transport: chip, password: .can("123456"))
        var config = ElementaryFileReader.Configuration()
        config.extendedChunkSize = 0x2000
        let reader = ElementaryFileReader(transport: channel, configuration: config)
        #expect(try await reader.readFile(fid: 0x0102, sfi: 0x02) == big)
        #expect(await reader.currentChunkSize <= 4096)
        #expect(await reader.statistics.bytesRead == big.count)
    }

    @Test func hostileLengthIsRejected() async throws {
        let hostile: [UInt8] = [0x75, 0x84, 0x7F, 0xFF, 0xFF, 0xFF] + [UInt8](repeating: 0, count: 32)
        let chip = AccessLoopbackChip(mrzInformation: Self.mrz, cardAccess: nil, appFiles: [0x0102: hostile])
        let (channel, _) = try await establishAccess(transport: chip, password: .mrz(mrzInformation: Self.mrz))
        do {
            _ = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0102, sfi: 0x02)
            Issue.record("expected MALFORMED_DATA")
        } catch { #expect(error.code == .malformedData) }
    }
}

/// Thread-safe progress recorder for the callback.
final class ProgressLog: Sendable {
    private let values = Locked<[(Int, Int)]>([])
    func record(_ done: Int, _ total: Int) { values.withLock { $0.append((done, total)) } }
    var last: (Int, Int)? { values.withLock { $0.last } }
}
