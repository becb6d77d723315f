import APDU
import Emulation
import FoundationEssentials
import ICAO
import MRZ
import TesseraCore
import Testing
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// ICAO Doc 9303 Part 3 TD3 specimen (Anna Maria Eriksson, Utopia): document L898902C3, born 740812, expires 120415.
let specimenMRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"
/// Its MRZ information (Doc 9303 Part 11 §9.7.2 worked example uses the same fields).
let specimenMRZInformation = "L898902C3674081221204159"

/// A profile in a fresh temporary directory; `cleanup()` removes it.
func makeProfile(
    access: AccessOptions = .init(), can: String? = nil, algorithm: TestKeyAlgorithm = .p256,
    activeAuthentication: Bool = false, photoPadding: Int? = nil
) throws -> DocumentProfile {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tessera-emu-\(UUID().uuidString)")
        .path
    return try DocumentProfile.make(
        directory: directory, mrz: specimenMRZ, can: can, access: access, algorithm: algorithm,
        activeAuthentication: activeAuthentication, photoPadding: photoPadding)
}

extension DocumentProfile {
    func cleanup() { try? FileManager.default.removeItem(atPath: directory) }
}

/// Reads EF.COM, every data group it lists and EF.SOD over an established channel.
func readAll(_ channel: SecureChannel, configuration: ElementaryFileReader.Configuration = .init())
    async throws -> (dataGroups: [Int: [UInt8]], sod: [UInt8], reader: ElementaryFileReader)
{
    let reader = ElementaryFileReader(transport: channel, configuration: configuration)
    let com = try EFCOM(parsing: try await reader.readFile(fid: LDSFile.com.fileID, sfi: LDSFile.com.sfi))
    var groups: [Int: [UInt8]] = [:]
    for n in com.dataGroups {
        let file = LDSFile(dataGroup: n)!
        groups[n] = try await reader.readFile(fid: file.fileID, sfi: file.sfi)
    }
    let sod = try await reader.readFile(fid: LDSFile.sod.fileID)
    return (groups, sod, reader)
}

func expectError(
    _ code: TesseraError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code.rawValue), got success", sourceLocation: sourceLocation)
    } catch let error as TesseraError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected TesseraError \(code.rawValue), got \(error)", sourceLocation: sourceLocation)
    }
}

/// The real reader code (establishAccess, SecureChannel, ElementaryFileReader, passive and active authentication)
/// against the emulated chip through an in-memory transport.
@Suite struct EmulatedPassportTests {
    @Test func specimenHasTheExpectedMRZInformation() throws {
        #expect(try MRZ.parse(specimenMRZ).mrzInformation == specimenMRZInformation)
    }

    @Test func bacReadsDG1() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        #expect(profile.cardAccess == nil)
        let card = EmulatedPassport(profile: profile)
        let transport = InProcessCardTransport(card: card)
        let (channel, used) = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        #expect(used == .bac)
        #expect(await card.establishedAccess == .bac)
        let dg1 = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01)
        #expect(dg1 == profile.dataGroup(1))
        #expect(try DG1(parsing: dg1).parsedMRZ().documentNumber == "L898902C3")
        #expect(await card.isSecureMessagingActive)
    }

    @Test(arguments: [
        "ecdh-gm-p256-aes128",
        "ecdh-gm-brainpoolp256r1-aes128",
        "ecdh-gm-brainpoolp512r1-aes256",
        "ecdh-gm-p521-aes256",
        "ecdh-gm-p384-aes192",
        "ecdh-gm-p256-3des",
        "dh-gm-1024-3des",
        "dh-gm-2048-256-aes128",
    ])
    func paceReadsDG1(option: String) async throws {
        let pace = try PACEOption(parsing: option)
        let profile = try makeProfile(access: AccessOptions(bac: true, pace: [pace]))
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let (channel, used) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        #expect(used == .pace)
        #expect(await card.establishedAccess == .pace)
        #expect(await channel.currentSession?.cipher == pace.cipher)
        let dg1 = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01)
        #expect(dg1 == profile.dataGroup(1))
    }

    @Test func paceWithCAN() async throws {
        let profile = try makeProfile(access: AccessOptions(bac: false, pace: [.default]), can: "123456")
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let transport = InProcessCardTransport(card: card)
        let (channel, used) = try await establishAccess(transport: transport, password: .can("123456"))
        #expect(used == .pace)
        #expect(
            try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01) == profile.dataGroup(1))
        await expectError(.accessDenied) {
            _ = try await establishAccess(transport: transport, password: .can("654321"))
        }
        // PACE-only: BAC is refused even with the right MRZ.
        await expectError(.accessDenied) {
            _ = try await establishAccess(
                transport: transport, password: .mrz(mrzInformation: specimenMRZInformation),
                preferPACE: false)
        }
    }

    @Test func canOnBACOnlyChipIsUnsupported() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        await expectError(.unsupportedProtocol) {
            _ = try await establishAccess(
                transport: InProcessCardTransport(card: EmulatedPassport(profile: profile)),
                password: .can("123456"))
        }
    }

    @Test func wrongMRZIsAccessDenied() async throws {
        let wrong = "L898902C3674081221204160"  // expiry 120416 with its check digit 0
        for access in [AccessOptions(), AccessOptions(bac: true, pace: [.default])] {
            let profile = try makeProfile(access: access)
            defer { profile.cleanup() }
            await expectError(.accessDenied) {
                _ = try await establishAccess(
                    transport: InProcessCardTransport(card: EmulatedPassport(profile: profile)),
                    password: .mrz(mrzInformation: wrong))
            }
        }
    }

    @Test func passiveAuthenticationValid() async throws {
        let profile = try makeProfile(access: AccessOptions(bac: true, pace: [.default]))
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        let (groups, sod, _) = try await readAll(channel)
        #expect(groups.keys.sorted() == [1, 2, 11, 12, 14])
        #expect(sod == profile.sod)
        let face = try DG2(parsing: try #require(groups[2])).faces.first
        #expect(face?.image.data == FacePhoto.builtIn)
        #expect(face?.image.mimeType == "image/jpeg")
        #expect(face?.image.width == 24 && face?.image.height == 32)
        let result = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: try profile.trustStore())
        #expect(result.status == .valid, "\(result.reason ?? "")")
        #expect(result.signature == .valid)
        #expect(result.certificateChain == .valid)
        #expect(groups.keys.allSatisfy { result.dataGroupHashes[$0] == .valid })
        // DG14 carries the same PACEInfo as EF.CardAccess.
        let dg14 = try DG14(parsing: try #require(groups[14]))
        #expect(try SecurityInfos(encoded: dg14.securityInfos).paceInfos == [PACEOption.default.paceInfo])
    }

    @Test func tamperedDataGroupFailsItsHash() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile, misbehaviour: Misbehaviour(tamperedDataGroup: 1))
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        let (groups, sod, _) = try await readAll(channel)
        let dg1 = try #require(groups[1])
        #expect(dg1 != profile.dataGroup(1))
        #expect(try DG1(parsing: dg1).parsedMRZ().primaryIdentifier == "XRIKSSON")
        let result = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: try profile.trustStore())
        #expect(result.status == .invalid)
        #expect(result.signature == .valid)
        #expect(result.dataGroupHashes[1] == .invalid)
        #expect(result.dataGroupHashes[2] == .valid)
    }

    @Test func withoutTrustAnchorIsUnverified() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: EmulatedPassport(profile: profile)),
            password: .mrz(mrzInformation: specimenMRZInformation))
        let (groups, sod, _) = try await readAll(channel)
        let result = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: nil)
        #expect(result.status == .unverified)
        #expect(result.signature == .valid)
        #expect(groups.keys.allSatisfy { result.dataGroupHashes[$0] == .valid })
        // Another document's CSCA does not anchor this one either.
        let other = try makeProfile()
        defer { other.cleanup() }
        #expect(
            PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: try other.trustStore()).status
                != .valid)
    }

    /// Chips with small buffers: 6700 or 6Cxx above 0x80 bytes, or no extended length at all. The reader steps
    /// down and still reads a 20 KB DG2 completely, in the same SM session.
    @Test(arguments: [
        Misbehaviour(maxShortLe: 0x80),
        Misbehaviour(maxShortLe: 0x80, answerCorrectLength: true),
        Misbehaviour(rejectExtendedLength: true),
    ])
    func stepDownStillReadsEverything(misbehaviour: Misbehaviour) async throws {
        let profile = try makeProfile(access: AccessOptions(bac: true, pace: [.default]), photoPadding: 20_000)
        defer { profile.cleanup() }
        #expect(try #require(profile.dataGroup(2)).count > 20_000)
        let card = EmulatedPassport(profile: profile, misbehaviour: misbehaviour)
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card, supportsExtendedLength: true),
            password: .mrz(mrzInformation: specimenMRZInformation))
        var configuration = ElementaryFileReader.Configuration()
        configuration.extendedChunkSize = 0x1000
        let (groups, sod, reader) = try await readAll(channel, configuration: configuration)
        #expect(groups[2] == profile.dataGroup(2))
        #expect(groups[1] == profile.dataGroup(1))
        #expect(sod == profile.sod)
        #expect(await card.rejectedLengthCount >= 1)
        if misbehaviour.answerCorrectLength {
            // 6Cxx is followed per command by the transport (`send`), without changing the chunk size.
            #expect(await card.rejectedLengthCount > 20)
        } else {
            #expect(await reader.currentChunkSize <= (misbehaviour.maxShortLe ?? 0xDF))
            #expect(await reader.statistics.stepDowns >= 1)
        }
        #expect(await card.isSecureMessagingActive)
        #expect(
            PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: try profile.trustStore()).status
                == .valid)
    }

    /// Without misbehaviour the chip serves extended-length READ BINARY (odd INS B1 beyond offset 32767 too).
    @Test func extendedLengthAndOddINS() async throws {
        let profile = try makeProfile(access: AccessOptions(bac: true, pace: [.default]), photoPadding: 40_000)
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        var configuration = ElementaryFileReader.Configuration()
        configuration.extendedChunkSize = 0x2000
        let reader = ElementaryFileReader(transport: channel, configuration: configuration)
        #expect(try await reader.readFile(fid: 0x0102, sfi: 0x02) == profile.dataGroup(2))
        let stats = await reader.statistics
        #expect(stats.stepDowns == 0)
        #expect(stats.apduCount < 10)
    }

    @Test func corruptMACIsSecureMessagingError() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        // BAC: SELECT is plain, so the first protected response is DG1's only chunk, the second DG2's first.
        let card = EmulatedPassport(profile: profile, misbehaviour: Misbehaviour(corruptMACAfter: 2))
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        let reader = ElementaryFileReader(transport: channel)
        #expect(try await reader.readFile(fid: 0x0101, sfi: 0x01) == profile.dataGroup(1))
        await expectError(.secureMessagingError) { _ = try await reader.readFile(fid: 0x0102, sfi: 0x02) }
        #expect(await channel.isOpen == false)
        await expectError(.secureMessagingError) { _ = try await reader.readFile(fid: 0x0101, sfi: 0x01) }
    }

    @Test(arguments: [TestKeyAlgorithm.p256, .brainpoolP384r1, .rsa2048])
    func activeAuthenticationValid(algorithm: TestKeyAlgorithm) async throws {
        let profile = try makeProfile(
            access: AccessOptions(bac: true, pace: [.default]), algorithm: algorithm,
            activeAuthentication: true)
        defer { profile.cleanup() }
        #expect(profile.activeAuthentication)
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: EmulatedPassport(profile: profile)),
            password: .mrz(mrzInformation: specimenMRZInformation))
        let (groups, sod, _) = try await readAll(channel)
        #expect(groups.keys.sorted() == [1, 2, 11, 12, 14, 15])
        let dg15 = try DG15(parsing: try #require(groups[15]))
        let dg14 = try DG14(parsing: try #require(groups[14]))
        let result = try await ActiveAuthentication.perform(over: channel, dg15: dg15, dg14: dg14)
        #expect(result.status == .valid, "\(result.reason ?? "")")
        #expect(result.hash == profile.activeAuthenticationHash)
        #expect(
            PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: try profile.trustStore()).status
                == .valid)
    }

    @Test func activeAuthenticationAbsentOrBeforeAccess() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let transport = InProcessCardTransport(card: EmulatedPassport(profile: profile))
        let (channel, _) = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        let response = try await channel.send(
            CommandAPDU(ins: 0x88, p1: 0, p2: 0, data: [1, 2, 3, 4, 5, 6, 7, 8], ne: 256))
        #expect(response.sw == .insNotSupported)

        let withAA = try makeProfile(activeAuthentication: true)
        defer { withAA.cleanup() }
        let plain = try await InProcessCardTransport(card: EmulatedPassport(profile: withAA))
            .send(CommandAPDU(ins: 0x88, p1: 0, p2: 0, data: [1, 2, 3, 4, 5, 6, 7, 8], ne: 256))
        #expect(plain.sw == .securityStatusNotSatisfied)
    }

    @Test func filesBeforeAccess() async throws {
        let profile = try makeProfile(
            access: AccessOptions(bac: true, pace: [.default, try PACEOption(parsing: "dh-gm-2048-aes128")]))
        defer { profile.cleanup() }
        let transport = InProcessCardTransport(card: EmulatedPassport(profile: profile))
        // EF.CardAccess is free to read and lists the offered PACE configurations.
        let cardAccess = try #require(try await readCardAccess(transport: transport))
        #expect(cardAccess == profile.cardAccess)
        #expect(Set(try SecurityInfos(encoded: cardAccess).paceInfos) == Set(profile.access.pace.map(\.paceInfo)))
        // Data groups are not.
        #expect(
            try await transport.send(CommandAPDU(ins: 0xA4, p1: 0x04, p2: 0x0C, data: eMRTDApplicationID)).sw
                == .success)
        await expectError(.accessDenied) {
            _ = try await ElementaryFileReader(transport: transport).readFile(fid: 0x0101, sfi: 0x01)
        }
        await expectError(.accessDenied) {
            _ = try await ElementaryFileReader(transport: transport).readFile(fid: 0x011E)
        }
        // SELECT variants: FCP with the file size, path from the MF, absent files.
        let fcp = try await transport.send(CommandAPDU(ins: 0xA4, p1: 0x02, p2: 0x04, data: [0x01, 0x01], ne: 256))
        #expect(fcp.sw == .success)
        let size = try #require(profile.dataGroup(1)).count
        #expect(fcp.data.starts(with: [0x62]) && fcp.data.contains(UInt8(size)))
        #expect(
            try await transport.send(CommandAPDU(ins: 0xA4, p1: 0x02, p2: 0x0C, data: [0x01, 0x07])).sw == .fileNotFound
        )
        #expect(
            try await transport.send(CommandAPDU(ins: 0xA4, p1: 0x08, p2: 0x0C, data: [0x01, 0x1C])).sw == .success)
        let first = try await transport.send(CommandAPDU(ins: 0xB0, p1: 0, p2: 0, ne: 4))
        #expect(first.sw == .success && first.data == Array(cardAccess.prefix(4)))
    }

    @Test func plainCommandOrResetDropsTheSession() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let transport = InProcessCardTransport(card: card)
        let (channel, _) = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        // A plain READ BINARY aborts SM and is refused.
        #expect(
            try await transport.send(CommandAPDU(ins: 0xB0, p1: 0x81, p2: 0, ne: 4)).sw == .securityStatusNotSatisfied)
        #expect(await card.isSecureMessagingActive == false)
        await expectError(.secureMessagingError) {
            _ = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101)
        }

        // Re-establish, then reset.
        let (again, _) = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        #expect(
            try await ElementaryFileReader(transport: again).readFile(fid: 0x0101, sfi: 0x01) == profile.dataGroup(1))
        await card.reset()
        #expect(await card.establishedAccess == nil)
        await expectError(.secureMessagingError) {
            _ = try await ElementaryFileReader(transport: again).readFile(fid: 0x0101)
        }
    }

    @Test func commandHookCountsExchanges() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let seen = LockedCounter()
        let card = EmulatedPassport(profile: profile, onCommand: { index, _ in seen.set(index) })
        let (channel, _) = try await establishAccess(
            transport: InProcessCardTransport(card: card),
            password: .mrz(mrzInformation: specimenMRZInformation))
        _ = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01)
        let count = await card.commandCount
        #expect(count >= 4)
        #expect(seen.get() == count)
        #expect(await card.protectedResponseCount >= 1)
    }

    @Test func atrIsContactlessPCSCStyle() async throws {
        let profile = try makeProfile()
        defer { profile.cleanup() }
        let atr = EmulatedPassport(profile: profile).atr
        #expect(Array(atr.prefix(4)) == [0x3B, 0x85, 0x80, 0x01])
        #expect(atr.dropFirst().reduce(0, ^) == 0)  // TCK
        #expect(atr[8] & 0x40 != 0)
        #expect(
            EmulatedPassport(profile: profile, misbehaviour: Misbehaviour(rejectExtendedLength: true)).atr[8] & 0x40
                == 0)
    }
}

final class LockedCounter: Sendable {
    private let value = Locked(0)
    func set(_ v: Int) { value.withLock { $0 = v } }
    func get() -> Int { value.current }
}
