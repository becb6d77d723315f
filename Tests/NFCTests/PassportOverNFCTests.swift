import APDU
import Emulation
import FoundationEssentials
import ICAO
import NFC
import PN532Emulator
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// ICAO Doc 9303 Part 3 TD3 specimen (document L898902C3, born 740812, expires 120415).
private let specimenMRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"

/// Full document reads through libnfc → software PN532 → EmulatedPassport, with ICAO's establishAccess.
@Suite("e-passport reads through libnfc", .serialized)
struct PassportOverNFCTests {
    func read(access: AccessOptions, expected: AccessProtocol, password: (DocumentProfile) -> AccessPassword)
        async throws
    {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let profile = try DocumentProfile.make(
            directory: directory + "/profile", mrz: specimenMRZ, can: "123456",
            access: access)
        let emulator = try PN532Emulator(card: EmulatedPassport(profile: profile))
        emulator.start()
        defer { emulator.stop() }
        let device = try await NFCDevice.open(emulator.connstring, context: try NFCContext.shared())
        let target = try #require(try await device.selectTarget())
        let (channel, used) = try await establishAccess(transport: target, password: password(profile))
        #expect(used == expected)
        let reader = ElementaryFileReader(transport: channel)
        let dg1 = try await reader.readFile(fid: LDSFile.dataGroup(1).fileID)
        let sod = try await reader.readFile(fid: LDSFile.sod.fileID)
        #expect(dg1 == profile.applicationFiles[LDSFile.dataGroup(1).fileID])
        #expect(sod == profile.sod)
        let dg2 = try await reader.readFile(fid: LDSFile.dataGroup(2).fileID)
        #expect(dg2 == profile.applicationFiles[LDSFile.dataGroup(2).fileID])
        await target.release()
        await device.close()
    }

    @Test("BAC, then DG1, DG2 and EF.SOD byte-identical to the issued profile")
    func bac() async throws {
        try await read(access: .init(bac: true), expected: .bac) { .mrz(mrzInformation: $0.mrzInformation) }
    }

    @Test("PACE (ECDH GM P-256, AES-128) with the CAN, then DG1, DG2 and EF.SOD")
    func pace() async throws {
        try await read(
            access: .init(bac: false, pace: [try PACEOption(parsing: "ecdh-gm-p256-aes128")]),
            expected: .pace
        ) { _ in .can("123456") }
    }
}
