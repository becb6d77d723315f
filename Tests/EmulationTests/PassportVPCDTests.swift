import APDU
import Emulation
import ICAO
import PCSC
import TesseraCore
import TesseraTestSupport
import Testing
import VPCD

/// The emulated passport through a real private pcscd and its vpcd reader, read with the PC/SC reader code.
@Suite(.timeLimit(.minutes(2)))
struct PassportVPCDTests {
    @Test func readDG1ThroughPCSC() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let made = try makeProfile(access: AccessOptions(bac: true, pace: [.default]))
        defer { made.cleanup() }
        let profile = try DocumentProfile.load(directory: made.directory)
        let passport = EmulatedPassport(profile: profile)
        let link = VirtualCardLink(card: passport, port: Int(daemon.port))
        try await link.start()

        let context = PCSCContext()
        var card: PCSCCard?
        for _ in 0..<100 {
            if let c = try? await context.connect(reader: daemon.readerName) { card = c; break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let connected = try #require(card, "could not connect to \(daemon.readerName): \(daemon.log())")
        #expect(connected.atr == passport.atr)
        #expect(connected.supportsExtendedLength)

        let (channel, used) = try await establishAccess(
            transport: connected, password: .mrz(mrzInformation: specimenMRZInformation))
        #expect(used == .pace)
        let dg1 = try await ElementaryFileReader(transport: channel).readFile(fid: 0x0101, sfi: 0x01)
        #expect(dg1 == profile.dataGroup(1))
        #expect(try DG1(parsing: dg1).parsedMRZ().mrzInformation == specimenMRZInformation)
        #expect(await passport.establishedAccess == .pace)

        await connected.disconnect()
        await link.remove()
    }
}
