import APDU
import CryptoPrimitives
import FoundationEssentials
import ICAO
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Deliberate deviations of an emulated chip, for exercising reader error paths.
public struct Misbehaviour: Sendable, Codable, Hashable {
    /// Serve this data group with one content byte changed, so its hash no longer matches EF.SOD
    /// (for DG1 a letter of the holder's name changes, keeping the MRZ parseable).
    public var tamperedDataGroup: Int?
    /// Corrupt the MAC (DO'8E') of the Nth secure-messaging-protected response, counted from 1 over the
    /// card's lifetime (resets do not restart the count).
    public var corruptMACAfter: Int?
    /// Refuse READ BINARY commands asking for more than this many bytes (Ne), like chips with small buffers:
    /// with 6700, or with 6Cxx (xx = this limit) when `answerCorrectLength` is set.
    public var maxShortLe: Int?
    /// Answer 6Cxx instead of 6700 when `maxShortLe` is exceeded.
    public var answerCorrectLength: Bool
    /// Answer 6700 to every extended-length APDU (and do not announce extended length in the ATR).
    public var rejectExtendedLength: Bool
    /// PACE-CAM: flip a bit in the first block of the encrypted chip authentication data A_IC.
    public var tamperedChipAuthenticationData: Bool
    /// PACE-CAM and Chip Authentication: prove a fresh key instead of the chip authentication key listed in DG14.
    public var wrongChipAuthenticationKey: Bool
    /// Clone: EF.COM does not list these data groups (the files stay readable unless `missingDataGroups`).
    public var dataGroupsHiddenFromCOM: [Int]
    /// Clone: these data groups answer 6A82 (file not found).
    public var missingDataGroups: [Int]
    /// Clone: the chip has no active authentication private key (INTERNAL AUTHENTICATE answers 6D00).
    public var withoutActiveAuthenticationKey: Bool
    /// Clone: INTERNAL AUTHENTICATE is answered with a fresh key, not the one in DG15.
    public var wrongActiveAuthenticationKey: Bool
    /// Clone: EF.CardAccess offers no PACE-CAM (DG14 still announces it) and the chip refuses it, having no
    /// chip authentication key.
    public var hiddenChipAuthenticationMapping: Bool
    /// EF.CardSecurity is served with the last byte of its signature changed.
    public var tamperedCardSecurity = false

    public init(
        tamperedDataGroup: Int? = nil, corruptMACAfter: Int? = nil, maxShortLe: Int? = nil,
        answerCorrectLength: Bool = false, rejectExtendedLength: Bool = false,
        tamperedChipAuthenticationData: Bool = false, wrongChipAuthenticationKey: Bool = false,
        dataGroupsHiddenFromCOM: [Int] = [], missingDataGroups: [Int] = [],
        withoutActiveAuthenticationKey: Bool = false, wrongActiveAuthenticationKey: Bool = false,
        hiddenChipAuthenticationMapping: Bool = false
    ) {
        self.tamperedDataGroup = tamperedDataGroup
        self.corruptMACAfter = corruptMACAfter
        self.maxShortLe = maxShortLe
        self.answerCorrectLength = answerCorrectLength
        self.rejectExtendedLength = rejectExtendedLength
        self.tamperedChipAuthenticationData = tamperedChipAuthenticationData
        self.wrongChipAuthenticationKey = wrongChipAuthenticationKey
        self.dataGroupsHiddenFromCOM = dataGroupsHiddenFromCOM
        self.missingDataGroups = missingDataGroups
        self.withoutActiveAuthenticationKey = withoutActiveAuthenticationKey
        self.wrongActiveAuthenticationKey = wrongActiveAuthenticationKey
        self.hiddenChipAuthenticationMapping = hiddenChipAuthenticationMapping
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        tamperedDataGroup = try c.decodeIfPresent(Int.self, forKey: .tamperedDataGroup)
        corruptMACAfter = try c.decodeIfPresent(Int.self, forKey: .corruptMACAfter)
        maxShortLe = try c.decodeIfPresent(Int.self, forKey: .maxShortLe)
        answerCorrectLength = try c.decodeIfPresent(Bool.self, forKey: .answerCorrectLength) ?? false
        rejectExtendedLength = try c.decodeIfPresent(Bool.self, forKey: .rejectExtendedLength) ?? false
        tamperedChipAuthenticationData =
            try c.decodeIfPresent(Bool.self, forKey: .tamperedChipAuthenticationData) ?? false
        wrongChipAuthenticationKey = try c.decodeIfPresent(Bool.self, forKey: .wrongChipAuthenticationKey) ?? false
        dataGroupsHiddenFromCOM = try c.decodeIfPresent([Int].self, forKey: .dataGroupsHiddenFromCOM) ?? []
        missingDataGroups = try c.decodeIfPresent([Int].self, forKey: .missingDataGroups) ?? []
        withoutActiveAuthenticationKey =
            try c.decodeIfPresent(Bool.self, forKey: .withoutActiveAuthenticationKey) ?? false
        wrongActiveAuthenticationKey = try c.decodeIfPresent(Bool.self, forKey: .wrongActiveAuthenticationKey) ?? false
        hiddenChipAuthenticationMapping =
            try c.decodeIfPresent(Bool.self, forKey: .hiddenChipAuthenticationMapping) ?? false
        tamperedCardSecurity = try c.decodeIfPresent(Bool.self, forKey: .tamperedCardSecurity) ?? false
    }
}

/// An ICAO 9303 eMRTD chip emulated from a `DocumentProfile`, for the in-process tests and the lab (through
/// `VirtualCardLink` to pcscd's vpcd, or the libnfc reader emulator).
///
/// Files: the master file holds EF.CardAccess (011C, SFI 1C; readable without access) and, for PACE-CAM
/// profiles, EF.CardSecurity (011D, SFI 1D); the eMRTD application
/// (AID A0000002471001) holds EF.COM (011E), EF.SOD (011D) and the data groups (01nn, SFI n), readable only
/// after BAC or PACE (6982 before). Commands: SELECT (P1 00/02/03/04/08/09, P2 0C or FCP/FCI with Le),
/// READ BINARY B0 (offset, or SFI in P1) and B1 (offset in DO'54', data in DO'53'), short and extended Le;
/// GET CHALLENGE + EXTERNAL AUTHENTICATE (BAC, in the application); MSE:Set AT + chained GENERAL
/// AUTHENTICATE (PACE generic or chip authentication mapping, CLA 10 for all but the last step); INTERNAL AUTHENTICATE (active
/// authentication, under SM); MSE:Set KAT, or MSE:Set AT + GENERAL AUTHENTICATE, for Chip Authentication v1
/// (under SM, when the profile offers it; see EmulatedPassport+ChipAuthentication.swift).
///
/// Secure messaging: after access every command must carry SM; a plain command aborts SM (Doc 9303 Part 11
/// §9.8) and is then executed without access. A wrong MAC aborts SM with a plain 6988. Successful responses,
/// responses with data and warnings (62xx/63xx) are protected; other errors are answered as a plain status
/// word without advancing the SSC for the response, as `SecureMessagingSession` expects. Reset and power-off
/// drop the session.
public actor EmulatedPassport: VirtualCard {
    /// Called for every command APDU before it is processed, with its 1-based number and bytes.
    public typealias CommandHook = @Sendable (_ index: Int, _ command: [UInt8]) -> Void

    public nonisolated let profile: DocumentProfile
    public nonisolated let misbehaviour: Misbehaviour
    /// Real-chip deviations this chip reproduces.
    public nonisolated let quirks: ChipQuirks
    /// PC/SC part 3 ATR of an ISO/IEC 14443-4 type A card: 3B 85 80 01, historical bytes 80 73 00 00 C0
    /// (card capabilities: command chaining, and extended length unless `rejectExtendedLength`), TCK.
    public nonisolated let atr: [UInt8]

    private enum DedicatedFile { case master, application }

    private let files: [UInt16: [UInt8]]
    private let cardAccess: [UInt8]?
    private let cardSecurity: [UInt8]?
    private let activeAuthenticationKey: [UInt8]?
    private var df = DedicatedFile.master
    private var currentFile: UInt16?
    private var sm: SecureMessagingSession?
    private var bac: BACChipResponder
    private var pace: PACEChip?
    private var paceStep = 0
    private var onCommand: CommandHook?
    /// Chip Authentication v1 (EmulatedPassport+ChipAuthentication.swift): the chip's keys, the run in progress,
    /// and the session that takes over after the current response.
    let chipAuthenticationTemplate: ChipAuthenticationChip?
    var chipAuthenticationState: ChipAuthenticationChip?
    var nextSession: SecureMessagingSession?
    /// Chip Authentication runs that switched secure messaging to new keys, over the card's lifetime.
    public internal(set) var chipAuthenticationCount = 0

    /// Command APDUs received over the card's lifetime.
    public private(set) var commandCount = 0
    /// Responses sent with secure messaging over the card's lifetime.
    public private(set) var protectedResponseCount = 0
    /// READ BINARY and extended-length commands refused because of `maxShortLe` or `rejectExtendedLength`.
    public private(set) var rejectedLengthCount = 0
    /// The access protocol of the current session, nil without one.
    public private(set) var establishedAccess: AccessProtocol?

    public init(
        profile: DocumentProfile, misbehaviour: Misbehaviour = .init(), quirks: ChipQuirks = .init(),
        onCommand: CommandHook? = nil
    ) {
        self.profile = profile
        self.misbehaviour = misbehaviour
        self.quirks = quirks
        self.onCommand = onCommand
        bac = BACChipResponder(mrzInformation: profile.mrzInformation)
        var files = profile.applicationFiles
        if let n = misbehaviour.tamperedDataGroup, let file = LDSFile(dataGroup: n), let bytes = files[file.fileID] {
            files[file.fileID] = Self.tamper(bytes, dataGroup: n)
        }
        if !misbehaviour.dataGroupsHiddenFromCOM.isEmpty, let com = files[LDSFile.com.fileID],
            let listed = try? EFCOM(parsing: com)
        {
            files[LDSFile.com.fileID] = LDSBuilder.com(
                dataGroups: listed.dataGroups.filter { !misbehaviour.dataGroupsHiddenFromCOM.contains($0) })
        }
        for n in misbehaviour.missingDataGroups { if let file = LDSFile(dataGroup: n) { files[file.fileID] = nil } }
        self.files = files
        cardAccess =
            misbehaviour.hiddenChipAuthenticationMapping
            ? DocumentProfile.cardAccess(offering: profile.access.pace.filter { $0.mapping != .chipAuthentication })
            : profile.cardAccess
        var cardSecurity = profile.cardSecurity
        if misbehaviour.tamperedCardSecurity, let last = cardSecurity?.indices.last { cardSecurity?[last] ^= 0x01 }
        self.cardSecurity = cardSecurity
        if misbehaviour.withoutActiveAuthenticationKey {
            activeAuthenticationKey = nil
        } else if misbehaviour.wrongActiveAuthenticationKey, let key = profile.activeAuthenticationKey {
            activeAuthenticationKey = Self.freshKey(like: key)
        } else {
            activeAuthenticationKey = profile.activeAuthenticationKey
        }
        let historical: [UInt8] = [0x80, 0x73, 0x00, 0x00, misbehaviour.rejectExtendedLength ? 0x80 : 0xC0]
        var atr: [UInt8] = [0x3B, 0x80 | UInt8(historical.count), 0x80, 0x01] + historical
        atr.append(atr.dropFirst().reduce(0, ^))
        self.atr = atr
        chipAuthenticationTemplate = Self.chipAuthenticationChip(profile: profile, misbehaviour: misbehaviour)
    }

    /// Installs (or removes) the per-command hook, e.g. for a lab harness that pulls the card after N APDUs.
    public func setCommandHook(_ hook: CommandHook?) { onCommand = hook }

    /// Whether a secure-messaging session is active.
    public var isSecureMessagingActive: Bool { sm != nil }

    public func powerOn() { resetState() }
    public func powerOff() { resetState() }
    public func reset() { resetState() }

    private func resetState() {
        df = .master
        currentFile = nil
        dropSession()
        bac = BACChipResponder(mrzInformation: profile.mrzInformation)
    }

    private func dropSession() {
        sm = nil
        pace = nil
        chipAuthenticationState = nil
        nextSession = nil
        paceStep = 0
        establishedAccess = nil
    }

    // MARK: APDU processing

    public func process(_ bytes: [UInt8]) -> [UInt8] {
        commandCount += 1
        onCommand?(commandCount, bytes)
        guard let command = try? CommandAPDU(parsing: bytes) else { return StatusWord.wrongLength.bytes }
        guard command.cla & 0x80 == 0 else { return StatusWord.claNotSupported.bytes }
        let secured = command.cla & 0x0C == 0x0C
        guard secured else {
            if sm != nil { dropSession() }  // a plain command aborts secure messaging
            if misbehaviour.rejectExtendedLength && command.forceExtended {
                rejectedLengthCount += 1
                return StatusWord.wrongLength.bytes
            }
            return handle(command, accessGranted: false).encoded
        }
        guard var state = sm else { return StatusWord.smDataObjectsIncorrect.bytes }
        let plain: CommandAPDU
        do { plain = try state.unprotectCommand(command) } catch {
            dropSession()
            return StatusWord.smDataObjectsIncorrect.bytes
        }
        sm = state
        if misbehaviour.rejectExtendedLength && command.forceExtended {
            rejectedLengthCount += 1
            return StatusWord.wrongLength.bytes
        }
        let response = handle(plain, accessGranted: true)
        let sw = response.sw
        guard var current = sm, !response.data.isEmpty || sw.isSuccess || sw.sw1 == 0x62 || sw.sw1 == 0x63 else {
            return response.encoded
        }
        var wrapped: ResponseAPDU
        do { wrapped = try current.protectResponse(response, oddINS: plain.ins & 1 == 1) } catch {
            dropSession()
            return StatusWord.unknown.bytes
        }
        sm = current
        if let next = nextSession {
            sm = next
            nextSession = nil
        }
        protectedResponseCount += 1
        if protectedResponseCount == misbehaviour.corruptMACAfter, let last = wrapped.data.indices.last {
            wrapped.data[last] ^= 0x01  // DO'8E' comes last
        }
        return wrapped.encoded
    }

    private func handle(_ c: CommandAPDU, accessGranted: Bool) -> ResponseAPDU {
        if c.cla & 0x10 != 0 && c.ins != 0x86 { return ResponseAPDU(sw: StatusWord(0x6884)) }
        if let refused = quirks.refusal(of: c) { return ResponseAPDU(sw: refused) }
        switch c.ins {
        case CommandAPDU.Instruction.select: return select(c)
        case CommandAPDU.Instruction.readBinary, CommandAPDU.Instruction.readBinaryOffsetDataObject:
            return readBinary(c, accessGranted: accessGranted)
        case 0x84: return getChallenge(c)
        case 0x82: return externalAuthenticate(c)
        case 0x22:
            return c.p1 == 0x41
                ? chipAuthenticationSetup(c, accessGranted: accessGranted) : manageSecurityEnvironment(c)
        case 0x86:
            return chipAuthenticationState?.isPending == true
                ? chipAuthenticationGeneralAuthenticate(c, accessGranted: accessGranted) : generalAuthenticate(c)
        case 0x88: return internalAuthenticate(c, accessGranted: accessGranted)
        default: return ResponseAPDU(sw: .insNotSupported)
        }
    }

    // MARK: SELECT

    private func select(_ c: CommandAPDU) -> ResponseAPDU {
        switch c.p1 {
        case 0x04:
            guard c.data == eMRTDApplicationID else { return ResponseAPDU(sw: .fileNotFound) }
            df = .application
            currentFile = nil
            if c.ne != nil && c.p2 & 0x0C != 0x0C {
                let fci = TLV.encode(tag: 0x6F, value: TLV.encode(tag: 0x84, value: eMRTDApplicationID))
                return ResponseAPDU(data: fci, sw: .success)
            }
            return ResponseAPDU(sw: .success)
        case 0x00 where c.data.isEmpty || c.data == [0x3F, 0x00], 0x03:
            df = .master
            currentFile = nil
            return ResponseAPDU(sw: .success)
        case 0x00, 0x02, 0x09:
            guard c.data.count == 2 else { return ResponseAPDU(sw: .incorrectData) }
            return selectEF(fid(c.data), in: df, c)
        case 0x08:
            var path = c.data
            if path.starts(with: [0x3F, 0x00]) { path.removeFirst(2) }
            guard path.count == 2 else { return ResponseAPDU(sw: .fileNotFound) }
            return selectEF(fid(path), in: .master, c)
        case 0x01:
            return ResponseAPDU(sw: .fileNotFound)
        default:
            return ResponseAPDU(sw: .wrongP1P2)
        }
    }

    private func selectEF(_ fid: UInt16, in dedicated: DedicatedFile, _ c: CommandAPDU) -> ResponseAPDU {
        guard let file = file(fid, in: dedicated) else { return ResponseAPDU(sw: .fileNotFound) }
        df = dedicated
        currentFile = fid
        guard c.ne != nil, c.p2 & 0x0C != 0x0C else { return ResponseAPDU(sw: .success) }
        // FCP: file size, descriptor (transparent working EF), file identifier.
        let fcp =
            TLV.encode(tag: 0x80, value: [UInt8(file.count >> 8 & 0xFF), UInt8(file.count & 0xFF)])
            + TLV.encode(tag: 0x82, value: [0x01]) + TLV.encode(tag: 0x83, value: [UInt8(fid >> 8), UInt8(fid & 0xFF)])
        return ResponseAPDU(data: TLV.encode(tag: 0x62, value: fcp), sw: .success)
    }

    private func file(_ fid: UInt16, in dedicated: DedicatedFile) -> [UInt8]? {
        switch dedicated {
        case .master: fid == 0x011C ? cardAccess : fid == CardSecurity.fileID ? cardSecurity : nil
        case .application: files[fid]
        }
    }

    private func fid(_ bytes: [UInt8]) -> UInt16 { UInt16(bytes[0]) << 8 | UInt16(bytes[1]) }

    private func fid(sfi: UInt8) -> UInt16? {
        switch df {
        case .master: sfi == 0x1C ? 0x011C : sfi == CardSecurity.shortFileID ? CardSecurity.fileID : nil
        case .application: LDSFile(sfi: sfi)?.fileID
        }
    }

    // MARK: READ BINARY

    private func readBinary(_ c: CommandAPDU, accessGranted: Bool) -> ResponseAPDU {
        let offset: Int
        if c.ins == CommandAPDU.Instruction.readBinary {
            if c.p1 & 0x80 != 0 {
                guard c.p1 & 0x60 == 0 else { return ResponseAPDU(sw: .wrongP1P2) }
                guard let fid = fid(sfi: c.p1 & 0x1F), file(fid, in: df) != nil else {
                    return ResponseAPDU(sw: .fileNotFound)
                }
                currentFile = fid
                offset = Int(c.p2)
            } else {
                offset = Int(c.p1) << 8 | Int(c.p2)
            }
        } else {
            if c.p1 == 0 && c.p2 != 0 && c.p2 <= 0x1F {
                guard let fid = fid(sfi: c.p2), file(fid, in: df) != nil else { return ResponseAPDU(sw: .fileNotFound) }
                currentFile = fid
            } else if c.p1 != 0 || c.p2 != 0 {
                let fid = UInt16(c.p1) << 8 | UInt16(c.p2)
                guard file(fid, in: df) != nil else { return ResponseAPDU(sw: .fileNotFound) }
                currentFile = fid
            }
            guard let object = try? TLV.parse(c.data, options: []), object.tag == 0x54,
                (1...3).contains(object.value.count)
            else { return ResponseAPDU(sw: .incorrectData) }
            offset = object.value.reduce(0) { $0 << 8 | Int($1) }
        }
        guard let fid = currentFile, let file = file(fid, in: df) else {
            return ResponseAPDU(sw: StatusWord(0x6986))  // no current EF
        }
        if df == .application && !accessGranted { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        let ne = c.ne ?? 256
        if let limit = misbehaviour.maxShortLe, ne > limit {
            rejectedLengthCount += 1
            return ResponseAPDU(
                sw: misbehaviour.answerCorrectLength
                    ? StatusWord(sw1: 0x6C, sw2: UInt8(limit & 0xFF))
                    : .wrongLength)
        }
        guard offset < file.count else { return ResponseAPDU(sw: .wrongP1P2Offset) }
        let remaining = file.count - offset
        let asMuchAsAvailable = ne == 256 || ne == 65536
        if c.ins == CommandAPDU.Instruction.readBinary {
            let count = min(ne, remaining)
            let sw: StatusWord = count < ne && !asMuchAsAvailable ? .endOfFileWarning : .success
            let (data, status) = quirks.readBinary(
                Array(file[offset..<(offset + count)]), sw: sw, toEnd: count == remaining)
            return ResponseAPDU(data: data, sw: status)
        }
        var count = min(remaining, ne - 2)
        while count > 0 && 1 + TLV.encodeLength(count).count + count > ne { count -= 1 }
        guard count > 0 else { return ResponseAPDU(sw: .wrongLength) }
        let data = TLV.encode(tag: 0x53, value: Array(file[offset..<(offset + count)]))
        return ResponseAPDU(data: data, sw: .success)
    }

    // MARK: BAC

    private func getChallenge(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.ne == nil || c.ne == 8 || c.ne == 256 else { return ResponseAPDU(sw: .wrongLength) }
        guard let challenge = try? bac.challenge() else { return ResponseAPDU(sw: .unknown) }
        return ResponseAPDU(data: challenge, sw: .success)
    }

    private func externalAuthenticate(_ c: CommandAPDU) -> ResponseAPDU {
        guard profile.access.bac, df == .application else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
        do {
            let result = try bac.externalAuthenticate(c.data)
            sm = result.session
            establishedAccess = .bac
            return ResponseAPDU(data: result.response, sw: .success)
        } catch {
            return ResponseAPDU(sw: error.code == .accessDenied ? StatusWord(0x6300) : .conditionsNotSatisfied)
        }
    }

    // MARK: PACE

    private func manageSecurityEnvironment(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0xC1, c.p2 == 0xA4 else { return ResponseAPDU(sw: .wrongP1P2) }
        pace = nil
        paceStep = 0
        guard let setAT = try? PACECrypto.parseSetATData(c.data) else { return ResponseAPDU(sw: .incorrectData) }
        // DO'84' may be left out when the OID leaves one set of domain parameters (Doc 9303 Part 11 §4.4.4.1).
        let sameOID = profile.access.pace.filter { $0.algorithm.oid == setAT.oid }
        guard
            let option = sameOID.first(where: { $0.parameterId == setAT.parameterId })
                ?? (setAT.parameterId == nil && sameOID.count == 1 ? sameOID.first : nil),
            !(misbehaviour.hiddenChipAuthenticationMapping && option.mapping == .chipAuthentication)
        else { return ResponseAPDU(sw: .incorrectData) }
        do {
            var caKey: [UInt8]?
            if option.mapping == .chipAuthentication {
                caKey = profile.chipAuthenticationKeys[option.parameterId]
                if misbehaviour.wrongChipAuthenticationKey, case .ec(let curve) = option.domain {
                    caKey = try curve.generateKeyPair().privateKey
                }
            }
            let setATData =
                setAT.parameterId == nil ? c.data + TLV.encode(tag: 0x84, value: [UInt8(option.parameterId)]) : c.data
            pace = try PACEChip(
                setATData: setATData, mrzInformation: profile.mrzInformation, can: profile.can,
                chipAuthenticationKey: caKey)
            return ResponseAPDU(sw: .success)
        } catch {
            return ResponseAPDU(sw: error.code == .accessDenied ? .referenceNotFound : .incorrectData)
        }
    }

    private func generalAuthenticate(_ c: CommandAPDU) -> ResponseAPDU {
        guard var chip = pace else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
        if quirks.brokenPACE && paceStep == 1 {
            pace = nil
            return ResponseAPDU(sw: .conditionsNotSatisfied)
        }
        // TR-03110 Part 3 §B.1: steps 1–3 are chained (CLA 10), mutual authentication ends the chain.
        guard (c.cla & 0x10 != 0) == (paceStep < 3) else {
            pace = nil
            return ResponseAPDU(sw: .incorrectData)
        }
        do {
            var out = try chip.generalAuthenticate(c.data)
            paceStep += 1
            if chip.session != nil, misbehaviour.tamperedChipAuthenticationData {
                out = Self.tamperChipAuthenticationData(out)
            }
            if let session = chip.session {
                pace = nil
                sm = session
                establishedAccess = .pace
            } else {
                pace = chip
            }
            return ResponseAPDU(data: out, sw: .success)
        } catch {
            pace = nil
            return ResponseAPDU(sw: error.code == .accessDenied ? StatusWord(0x6300) : .incorrectData)
        }
    }

    /// 7C { …, 8A A_IC } with the low bit of A_IC's first byte flipped.
    static func tamperChipAuthenticationData(_ response: [UInt8]) -> [UInt8] {
        guard let outer = try? TLV.parse(response), let inner = try? TLV.parseAll(outer.value, options: []) else {
            return response
        }
        let changed = inner.map { object -> [UInt8] in
            guard object.tag == 0x8A, !object.value.isEmpty else { return object.encoded }
            var value = object.value
            value[0] ^= 0x01
            return TLV.encode(tag: 0x8A, value: value)
        }
        return TLV.encode(tag: 0x7C, value: changed.flatMap { $0 })
    }

    // MARK: Active authentication

    private func internalAuthenticate(_ c: CommandAPDU, accessGranted: Bool) -> ResponseAPDU {
        guard let key = activeAuthenticationKey else { return ResponseAPDU(sw: .insNotSupported) }
        guard accessGranted else { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        guard c.data.count == 8 else { return ResponseAPDU(sw: .incorrectData) }
        guard
            let signature = try? ActiveAuthentication.sign(
                challenge: c.data, privateKey: key,
                hash: profile.activeAuthenticationHash)
        else { return ResponseAPDU(sw: .unknown) }
        return ResponseAPDU(data: signature, sw: .success)
    }

    // MARK: Tampering

    /// A new private key of the same kind (curve or RSA size) as `key` (PKCS#8 DER); nil when it cannot be made.
    static func freshKey(like key: [UInt8]) -> [UInt8]? {
        guard let spki = try? Signatures.publicKey(ofPrivateKey: key),
            let description = try? Signatures.describe(publicKey: spki)
        else { return nil }
        let spec: SignatureKeySpec
        switch description.kind {
        case .ec:
            guard let curve = description.curveName else { return nil }
            spec = .ec(curve: curve)
        case .rsa, .rsaPSS: spec = .rsa(bits: description.bits)
        }
        return try? Signatures.generateKey(spec).privateKeyDER
    }

    /// One content byte changed: a letter of the name in DG1's MRZ, otherwise the low bit of a byte near the end.
    static func tamper(_ bytes: [UInt8], dataGroup: Int) -> [UInt8] {
        var out = bytes
        if dataGroup == 1, let mrzStart = out.firstIndex(of: 0x1F).map({ $0 + 2 }), mrzStart < out.count {
            // DG1 = 61 L 5F1F L MRZ: the name starts at 5 (TD3/TD2) or at 60 (TD1, third line).
            let length = out.count - mrzStart
            let nameIndex = mrzStart + (length == 90 ? 60 : 5)
            if nameIndex < out.count {
                out[nameIndex] = out[nameIndex] == UInt8(ascii: "X") ? UInt8(ascii: "Y") : UInt8(ascii: "X")
                return out
            }
        }
        let i = max(0, out.count - 3)
        if !out.isEmpty { out[i] ^= 0x01 }
        return out
    }
}

/// An `APDUTransport` that hands commands straight to an in-process `VirtualCard` (no pcscd), e.g. the reader
/// code against an `EmulatedPassport` in tests.
public struct InProcessCardTransport: APDUTransport {
    public let card: any VirtualCard
    public let supportsExtendedLength: Bool

    public init(card: any VirtualCard, supportsExtendedLength: Bool = true) {
        self.card = card
        self.supportsExtendedLength = supportsExtendedLength
    }

    public func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        await card.process(command)
    }
}

extension StatusWord {
    fileprivate var bytes: [UInt8] { [sw1, sw2] }
}
