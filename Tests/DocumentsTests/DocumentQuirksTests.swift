import Emulation
import ICAO
import TesseraCore
import Testing

@testable import Documents

/// documents.read against in-process chips with real-chip quirks (`ChipQuirks`).
@Suite struct DocumentQuirksTests {
    static func read(_ profile: DocumentProfile, _ names: [String]) async throws -> DocumentReadResult {
        var quirks = ChipQuirks()
        for name in names { try quirks.enable(name) }
        let chosen = quirks
        let source = MemoryReaderSource(slots: [
            (
                "reader 1",
                {
                    EmulatedSession(
                        card: EmulatedPassport(profile: profile, quirks: chosen), supportsExtendedLength: false,
                        removeAfter: nil)
                }
            )
        ])
        let service = DocumentService(sources: [source], trustStore: try profile.trustStore())
        return try await service.read(DocumentReadRequest(key: DocumentServiceTests.key))
    }

    @Test func paceFailureFallsBackToBACWhereTheChipHasIt() async throws {
        let both = try makeProfile(bac: true, pace: ["ecdh-gm-p256-aes128"])
        let fallback = try await Self.read(both, ["pace-fails"])
        #expect(fallback.accessProtocol == .bac && fallback.passiveAuthentication?.status == .valid)
        #expect(fallback.paceFailure?.contains("6985") == true)
        #expect(fallback.json["paceFallback"] == true)
        #expect(fallback.workarounds.contains { $0.contains("fell back to BAC") })
        let normal = try await Self.read(both, [])
        #expect(normal.accessProtocol == .pace && normal.paceFailure == nil && normal.json["paceFallback"] == nil)

        let paceOnly = try makeProfile(bac: false, pace: ["ecdh-gm-p256-aes128"])
        do {
            _ = try await Self.read(paceOnly, ["pace-fails"])
            Issue.record("a PACE-only chip cannot fall back")
        } catch { #expect((error as? TesseraError)?.code == .cardError) }
    }

    @Test(arguments: ["no-le", "no-key-reference", "mf-6a82", "mf-6a87", "short-responses", "eof-6282"])
    func quirkIsHandled(_ name: String) async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-im-brainpoolp256r1-aes128"])
        let result = try await Self.read(doc, [name])
        #expect(result.accessProtocol == .pace && result.paceMapping == .integrated)
        #expect(result.passiveAuthentication?.status == .valid)
        #expect(result.files[.dataGroup(2)] == doc.dataGroup(2))
        #expect(result.workarounds.isEmpty == (name != "no-key-reference"))
    }
}
