import APDU
import TesseraCore
import Testing

@testable import ICAO

/// The reader against chips with known quirks (scripted or in-process); the end-to-end versions run against
/// `tessera lab emulate-passport --quirk` in Tests/e2e/test_pace_quirks.py.
@Suite struct AccessQuirksTests {
    static let cardAccess = "31143012060A04007F0007020204020202010202010D"

    /// No READ BINARY by SFI, and 6A82 to SELECT of the master file: EF.CardAccess is still selected and read.
    @Test func cardAccessDespiteMasterFileSelectError() async throws {
        let chip = AccessScriptedTransport([
            ("00B09C00DF", "6A86"),
            ("00A4000C023F00", "6A82"),
            ("00A4020C02011C", "9000"),
            ("00B0000008", "31143012060A0400" + "9000"),
            ("00B000080E", "7F0007020204020202010202010D" + "9000"),
        ])
        #expect(try await readCardAccess(transport: chip) == ax(Self.cardAccess))
        #expect(await chip.remaining == 0)
    }

    /// MSE:Set AT refused with DO'84' is sent again without it, and the run says so.
    @Test func setATWithoutKeyReference() async throws {
        let chip = IMLoopbackChip(mrzInformation: AccessPACETests.mrzInformation, refusingKeyReference: 12)
        let alg = PACEAlgorithm(mapping: .generic, keyAgreement: .ecdh, cipher: .aes128)
        let outcome = try await PACE.establish(
            transport: chip, password: AccessPACETests.password,
            info: PACEInfo(protocolOID: alg.oid, version: 2, parameterId: 12))
        #expect(await chip.refusedSetAT == 1)
        #expect(outcome.workarounds.count == 1 && outcome.workarounds[0].contains("domain parameter reference"))
        let chipSession = await chip.session
        #expect(outcome.session.macKey == chipSession?.macKey)
    }

    /// A chip accepting DO'84' gets exactly one MSE:Set AT and no workaround is reported.
    @Test func setATWithKeyReference() async throws {
        let chip = IMLoopbackChip(mrzInformation: AccessPACETests.mrzInformation)
        let alg = PACEAlgorithm(mapping: .generic, keyAgreement: .ecdh, cipher: .aes128)
        let outcome = try await PACE.establish(
            transport: chip, password: AccessPACETests.password,
            info: PACEInfo(protocolOID: alg.oid, version: 2, parameterId: 12))
        #expect(outcome.workarounds.isEmpty)
    }
}
