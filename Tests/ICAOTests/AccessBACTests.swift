import APDU
import TesseraCore
import Testing

@testable import ICAO

/// ICAO Doc 9303 Part 11 (8th ed.) Appendix D: worked example of BAC and 3DES secure messaging
/// (document number L898902C<, date of birth 690806, date of expiry 940623).
@Suite struct AccessBACTests {
    static let mrzInformation = "L898902C<369080619406236"
    static let kEnc = ax("AB94FDECF2674FDFB9B391F85D7F76F2")
    static let kMac = ax("7962D9ECE03D1ACD4C76089DCE131543")
    static let rndIC = ax("4608F91988702212")
    static let rndIFD = ax("781723860C06C226")
    static let kIFD = ax("0B795240CB7049B01C19B33E32804F0B")
    static let kIC = ax("0B4F80323EB3191CB04970CB4052790B")
    static let commandData = ax("72C29C2371CC9BDB65B779B8E8D37B29ECC154AA56A8799FAE2F498F76ED92F25F1448EEA8AD90A7")
    static let responseData = ax("46B9342A41396CD7386BF5803104D7CEDC122B9132139BAF2EEDC94EE178534F2F2D235D074D7449")

    // Appendix D.2: K_seed, K_enc, K_mac.
    @Test func documentBasicAccessKeys() {
        #expect(
            AccessKeyDerivation.bacKeySeed(mrzInformation: Self.mrzInformation)
                == ax("239AB9CB282DAF66231DC5A4DF6BFBAE"))
        let keys = AccessKeyDerivation.bacKeys(mrzInformation: Self.mrzInformation)
        #expect(keys.encryption == Self.kEnc)
        #expect(keys.mac == Self.kMac)
    }

    // Appendix D.3: mutual authentication cryptograms, session keys and SSC.
    @Test func mutualAuthenticationValues() throws {
        let s = Self.rndIFD + Self.rndIC + Self.kIFD
        #expect(try BAC.cryptogram(plain: s, encryptionKey: Self.kEnc, macKey: Self.kMac) == Self.commandData)
        let r = Self.rndIC + Self.rndIFD + Self.kIC
        #expect(try BAC.cryptogram(plain: r, encryptionKey: Self.kEnc, macKey: Self.kMac) == Self.responseData)
        #expect(try BAC.openCryptogram(Self.responseData, encryptionKey: Self.kEnc, macKey: Self.kMac) == r)
        let session = try BAC.session(kIFD: Self.kIFD, kIC: Self.kIC, rndIC: Self.rndIC, rndIFD: Self.rndIFD)
        #expect(session.encryptionKey == ax("979EC13B1CBFE9DCD01AB0FED307EAE5"))
        #expect(session.macKey == ax("F1CB1F1FB5ADF208806B89DC579DC1F8"))
        #expect(session.ssc == ax("887022120C06C226"))
        var tampered = Self.responseData
        tampered[39] ^= 1
        #expect(throws: TesseraError.self) {
            try BAC.openCryptogram(tampered, encryptionKey: Self.kEnc, macKey: Self.kMac)
        }
    }

    // The reader side over a scripted chip that answers with the Appendix D.3 values.
    @Test func readerRunsAppendixD() async throws {
        let chip = AccessScriptedTransport([
            ("0084000008", "4608F91988702212 9000"),
            ("0082000028" + Hex.encode(Self.commandData) + "28", Hex.encode(Self.responseData) + "9000"),
        ])
        let session = try await BAC.perform(
            transport: chip, mrzInformation: Self.mrzInformation,
            rndIFD: Self.rndIFD, kIFD: Self.kIFD)
        #expect(session.encryptionKey == ax("979EC13B1CBFE9DCD01AB0FED307EAE5"))
        #expect(session.ssc == ax("887022120C06C226"))
        #expect(await chip.remaining == 0)
    }

    @Test func wrongMRZIsAccessDenied() async throws {
        let chip = AccessScriptedTransport([
            ("0084000008", "4608F91988702212 9000"),
            ("0082000028" + Hex.encode(Self.commandData) + "28", "6300"),
        ])
        do {
            _ = try await BAC.perform(
                transport: chip, mrzInformation: Self.mrzInformation, rndIFD: Self.rndIFD, kIFD: Self.kIFD)
            Issue.record("expected ACCESS_DENIED")
        } catch {
            #expect(error.code == .accessDenied)
            #expect(error.details["sw"] == .string("6300"))
        }
    }

    // The chip-side responder reproduces the Appendix D.3 response.
    @Test func chipResponderAppendixD() throws {
        var chip = BACChipResponder(mrzInformation: Self.mrzInformation, kIC: Self.kIC)
        #expect(try chip.challenge(fixed: Self.rndIC) == Self.rndIC)
        let result = try chip.externalAuthenticate(Self.commandData)
        #expect(result.response == Self.responseData)
        #expect(result.session.ssc == ax("887022120C06C226"))
        #expect(result.session.macKey == ax("F1CB1F1FB5ADF208806B89DC579DC1F8"))
        // The challenge is single-use; a wrong MRZ is rejected.
        #expect(throws: TesseraError.self) { try chip.externalAuthenticate(Self.commandData) }
        var other = BACChipResponder(mrzInformation: "L898902C<369080619406237")
        _ = try other.challenge(fixed: Self.rndIC)
        do {
            _ = try other.externalAuthenticate(Self.commandData)
            Issue.record("expected ACCESS_DENIED")
        } catch {
            #expect(error.code == .accessDenied)
        }
    }
}
