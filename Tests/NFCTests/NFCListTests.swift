import FoundationEssentials
import PN532Emulator
import Testing

@Suite("nfc-list against the software PN532")
struct NFCListTests {
    @Test("libnfc's nfc-list finds the ISO 14443-A target with its UID, SAK and ATS")
    func nfcListFindsTarget() async throws {
        let dir = temporaryDirectory()
        let emulator = try PN532Emulator(card: EchoCard(), link: dir + "/pn532")
        emulator.start()
        defer { emulator.stop() }
        let result = try await run(
            "/usr/bin/nfc-list", ["-v"],
            environment: ["LIBNFC_DEFAULT_DEVICE": emulator.connstring, "LIBNFC_LOG_LEVEL": "3"])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("1 ISO14443A passive target(s) found"), "\(result.output)")
        #expect(result.output.contains("08  54  53  52"), "\(result.output)")
        #expect(result.output.contains("SAK (SEL_RES): 20"), "\(result.output)")
        #expect(result.output.contains("ATS: 78  80  70  02"), "\(result.output)")
    }
}
