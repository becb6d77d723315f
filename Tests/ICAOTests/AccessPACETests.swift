import APDU
import CryptoPrimitives
import TesseraCore
import Testing

@testable import ICAO

/// ICAO Doc 9303 Part 11 (8th ed.) Appendix G.1: PACE, ECDH generic mapping on brainpoolP256r1,
/// AES-128, MRZ password (document number T22000129, date of birth 640812, date of expiry 101031).
@Suite struct AccessPACETests {
    static let mrzInformation = "T22000129364081251010318"
    static let password = AccessPassword.mrz(mrzInformation: mrzInformation)
    static let cardAccess = ax("31143012060A04007F0007020204020202010202010D")
    static let z = "95A3A016522EE98D01E76CB6B98B42C3"
    static let s = ax("3F00C4D39D153F2B2A214A078D899B22")
    static let skMapIFD = ax("7F4EF07B9EA82FD78AD689B38D0BC78CF21F249D953BC46F4C6E19259C010F99")
    static let pkMapIFD =
        "047ACF3EFC982EC45565A4B155129EFBC74650DCBFA6362D896FC70262E0C2CC5E544552DCB6725218799115B55C9BAA6D9F6BC3A9618E70C25AF71777A9C4922D"
    static let skMapIC = ax("498FF49756F2DC1587840041839A85982BE7761D14715FB091EFA7BCE9058560")
    static let pkMapIC =
        "04824FBA91C9CBE26BEF53A0EBE7342A3BF178CEA9F45DE0B70AA601651FBA3F5730D8C879AAA9C9F73991E61B58F4D52EB87A0A0C709A49DC63719363CCD13C54"
    static let skIFD = ax("A73FB703AC1436A18E0CFA5ABB3F7BEC7A070E7A6788486BEE230C4A22762595")
    static let pkIFD =
        "042DB7A64C0355044EC9DF190514C625CBA2CEA48754887122F3A5EF0D5EDD301C3556F3B3B186DF10B857B58F6A7EB80F20BA5DC7BE1D43D9BF850149FBB36462"
    static let skIC = ax("107CF58696EF6155053340FD633392BA81909DF7B9706F226F32086C7AFF974A")
    static let pkIC =
        "049E880F842905B8B3181F7AF7CAA9F0EFB743847F44A306D2D28C1D9EC65DF6DB7764B22277A2EDDC3C265A9F018F9CB852E111B768B326904B59A0193776F094"
    static let tIFD = "C2B0BD78D94BA866"
    static let tIC = "3ABB9674BCE93C08"

    /// The Appendix G.1 APDU transcript (MSE:Set AT, four GENERAL AUTHENTICATE steps).
    static let transcript: [(String, String)] = [
        ("0022C1A412800A04007F0007020204020283010184010D", "9000"),
        ("10860000027C0000", "7C128010" + z + "9000"),
        ("10860000457C438141" + pkMapIFD + "00", "7C438241" + pkMapIC + "9000"),
        ("10860000457C438341" + pkIFD + "00", "7C438441" + pkIC + "9000"),
        ("008600000C7C0A8508" + tIFD + "00", "7C0A8608" + tIC + "9000"),
    ]

    @Test func cardAccessParses() throws {
        let infos = try SecurityInfos(encoded: Self.cardAccess)
        #expect(infos.paceInfos == [PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.2.2", version: 2, parameterId: 13)])
        let alg = try #require(infos.paceInfos.first?.algorithm)
        #expect(alg.mapping == .generic && alg.keyAgreement == .ecdh && alg.cipher == .aes128)
        #expect(alg.oidBytes == ax("04007F00070202040202"))
        #expect(PACE.preferred(infos.paceInfos) == infos.paceInfos.first)
        // Unknown infos are ignored; padding after the SET is tolerated.
        let withUnknown = ax("311D3012060A04007F0007020204020202010202010D3007060228010201FF") + [0x00, 0x00]
        let parsed = try SecurityInfos(encoded: withUnknown)
        #expect(parsed.all.count == 2 && parsed.paceInfos.count == 1)
        #expect(throws: TesseraError.self) { try SecurityInfos(encoded: ax("3003020101")) }
    }

    @Test func passwordKeyAndNonce() throws {
        #expect(AccessKeyDerivation.pacePasswordKey(Self.password) == ax("7E2D2A41C74EA0B38CD36F863939BFA8E9032AAD"))
        let kPi = AccessKeyDerivation.paceNonceKey(Self.password, cipher: .aes128)
        #expect(kPi == ax("89DED1B26624EC1E634C1989302849DD"))
        #expect(try PACECrypto.decryptNonce(ax(Self.z), key: kPi, cipher: .aes128) == Self.s)
        #expect(try PACECrypto.encryptNonce(Self.s, key: kPi, cipher: .aes128) == ax(Self.z))
        #expect(AccessKeyDerivation.pacePasswordKey(.can("123456")) == Array("123456".utf8))
    }

    @Test func mappingAgreementKeysAndTokens() throws {
        let domain = try #require(PACEDomain.standardized(13))
        let alg = PACEAlgorithm(mapping: .generic, keyAgreement: .ecdh, cipher: .aes128)
        let gTilde = try domain.mapGenerator(nonce: Self.s, privateKey: Self.skMapIFD, peerPublicKey: ax(Self.pkMapIC))
        #expect(
            gTilde
                == ax(
                    "048CED63C91426D4F0EB1435E7CB1D74A46723A0AF21C89634F65A9AE87A9265E28C879506743F8611AC33645C5B985C80B5F09A0B83407C1B6A4D857AE76FE522"
                ))
        #expect(
            try domain.mapGenerator(nonce: Self.s, privateKey: Self.skMapIC, peerPublicKey: ax(Self.pkMapIFD)) == gTilde
        )
        #expect(try domain.keyPair(generator: gTilde, privateKey: Self.skIC).publicKey == ax(Self.pkIC))
        let shared = try domain.sharedSecret(privateKey: Self.skIFD, peerPublicKey: ax(Self.pkIC))
        #expect(shared == ax("28768D20701247DAE81804C9E780EDE582A9996DB4A315020B2733197DB84925"))
        let keys = AccessKeyDerivation.sessionKeys(shared, cipher: .aes128)
        #expect(keys.encryption == ax("F5F0E35C0D7161EE6724EE513A0D9A7F"))
        #expect(keys.mac == ax("FE251C7858B356B24514B3BD5F4297D1"))
        #expect(
            PACECrypto.publicKeyDataObject(algorithm: alg, domain: domain, publicKey: ax(Self.pkIC))
                == ax("7F494F060A04007F000702020402028641" + Self.pkIC))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(Self.pkIC))
                == ax(Self.tIFD))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(Self.pkIFD))
                == ax(Self.tIC))
    }

    @Test func readerRunsAppendixG() async throws {
        let chip = AccessScriptedTransport(Self.transcript)
        let info = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.2.2", version: 2, parameterId: 13)
        let session = try await PACE.perform(
            transport: chip, password: Self.password, info: info,
            mappingPrivateKey: Self.skMapIFD, ephemeralPrivateKey: Self.skIFD)
        #expect(session.cipher == .aes128)
        #expect(session.encryptionKey == ax("F5F0E35C0D7161EE6724EE513A0D9A7F"))
        #expect(session.macKey == ax("FE251C7858B356B24514B3BD5F4297D1"))
        #expect(session.ssc == [UInt8](repeating: 0, count: 16))
        #expect(await chip.remaining == 0)
    }

    @Test func chipSideAppendixG() throws {
        var chip = try PACEChip(
            setATData: ax("800A04007F00070202040202830101 84010D"), mrzInformation: Self.mrzInformation,
            can: nil, fixedNonce: Self.s, fixedMappingKey: Self.skMapIC, fixedEphemeralKey: Self.skIC)
        #expect(try chip.generalAuthenticate(ax("7C00")) == ax("7C128010" + Self.z))
        #expect(try chip.generalAuthenticate(ax("7C438141" + Self.pkMapIFD)) == ax("7C438241" + Self.pkMapIC))
        #expect(try chip.generalAuthenticate(ax("7C438341" + Self.pkIFD)) == ax("7C438441" + Self.pkIC))
        #expect(try chip.generalAuthenticate(ax("7C0A8508" + Self.tIFD)) == ax("7C0A8608" + Self.tIC))
        #expect(chip.session?.macKey == ax("FE251C7858B356B24514B3BD5F4297D1"))
    }

    @Test func wrongTerminalTokenIsAccessDenied() throws {
        var chip = try PACEChip(
            setATData: ax("800A04007F00070202040202830101 84010D"), mrzInformation: Self.mrzInformation,
            can: nil, fixedNonce: Self.s, fixedMappingKey: Self.skMapIC, fixedEphemeralKey: Self.skIC)
        _ = try chip.generalAuthenticate(ax("7C00"))
        _ = try chip.generalAuthenticate(ax("7C438141" + Self.pkMapIFD))
        _ = try chip.generalAuthenticate(ax("7C438341" + Self.pkIFD))
        do {
            _ = try chip.generalAuthenticate(ax("7C0A8508C2B0BD78D94BA867"))
            Issue.record("expected ACCESS_DENIED")
        } catch { #expect(error.code == .accessDenied) }
        #expect(chip.session == nil)
    }

    @Test func readerMapsRejectedTokenToAccessDenied() async throws {
        var script = Array(Self.transcript.dropLast())
        script.append(("008600000C7C0A8508" + Self.tIFD + "00", "6300"))
        let chip = AccessScriptedTransport(script)
        let info = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.2.2", version: 2, parameterId: 13)
        do {
            _ = try await PACE.perform(
                transport: chip, password: Self.password, info: info,
                mappingPrivateKey: Self.skMapIFD, ephemeralPrivateKey: Self.skIFD)
            Issue.record("expected ACCESS_DENIED")
        } catch { #expect(error.code == .accessDenied) }
    }

    // MARK: DH generic mapping — Doc 9303 Part 11 worked example G.2 (Appendix H in older editions):
    // id-PACE-DH-GM-AES-CBC-CMAC-128, 1024-bit MODP group with 160-bit subgroup (RFC 5114, parameter id 0).
    enum DHExample {
        static let z = "854D8DF5827FA6852D1A4FA701CDDDCA"
        static let s = ax("FA5B7E3E49753A0DB9178B7B9BD898C8")
        static let skMapIFD = ax("5265030F751F4AD18B08AC565FC7AC952E41618D")
        static let pkMapIFD =
            "23FB3749EA030D2A25B278D2A562047ADE3F01B74F17A15402CB7352CA7D2B3EB71C343DB13D1DEBCE9A3666DBCFC920B49174A602CB47965CAA73DC702489A44D41DB914DE9613DC5E98C94160551C0DF86274B9359BC0490D01B03AD54022DCB4F57FAD6322497D7A1E28D46710F461AFE710FBBBC5F8BA166F4311975EC6C"
        static let skMapIC = ax("66DDAFEAC1609CB5B963BB0CB3FF8B3E047F336C")
        static let pkMapIC =
            "78879F57225AA8080D52ED0FC890A4B25336F699AA89A2D3A189654AF70729E623EA5738B26381E4DA19E004706FACE7B235C2DBF2F38748312F3C98C2DD4882A41947B324AA1259AC22579DB93F7085655AF30889DBB845D9E6783FE42C9F2449400306254C8AE8EE9DD812A804C0B66E8CAFC14F84D8258950A91B44126EE6"
        static let h =
            "5BABEBEF5B74E5BA94B5C063FDA15F1F1CDE94873EE0A5D3A2FCAB49F258D07F544F13CB66658C3AFEE9E727389BE3F6CBBBD32128A8C21DD6EEA3CF7091CDDFB08B8D007D40318DCCA4FFBF51208790FB4BD111E5A968ED6B6F08B26CA87C410B3CE0C310CE104EABD16629AA48620C1279270CB0750C0D37C57FFFE302AE7F"
        static let gTilde =
            "7C9CBFE98F9FBDDA8D143506FA7D9306F4CB17E3C71707AFF5E1C1A12370249684D64EE37AF44B8DBD9D45BF6023919CBAA027AB97ACC771666C8E98FF483301BFA4872DEDE9034EDFACB70814166B7F360676829B826BEA57291B5AD69FBC84EF1E779032A305803F74341793E869742D401325B37EE8565FFCDEE618342DC5"
        static let skIFD = ax("89CCD99B0E8D3B1F11E1296DCA68EC53411CF2CA")
        static let pkIFD =
            "907D89E2D425A178AA81AF4A7774EC8E388C115CAE67031E85EECE520BD911551B9AE4D04369F29A02626C86FBC6747CC7BC352645B6161A2A42D44EDA80A08FA8D61B76D3A154AD8A5A51786B0BC07147057871A922212C5F67F43173172236B7747D1671E6D692A3C7D40A0C3C5CE397545D015C175EB5130551EDBC2EE5D4"
        static let skIC = ax("A5B780126B7C980E9FCEA1D4539DA1D27C342DFA")
        static let pkIC =
            "075693D9AE941877573E634B6E644F8E60AF17A0076B8B123D9201074D36152BD8B3A213F53820C42ADC79AB5D0AEEC3AEFB91394DA476BD97B9B14D0A65C1FC71A0E019CB08AF55E1F729005FBA7E3FA5DC41899238A250767A6D46DB974064386CD456743585F8E5D90CC8B4004B1F6D866C79CE0584E49687FF61BC29AEA1"
        static let shared =
            "6BABC7B3A72BCD7EA385E4C62DB2625BD8613B24149E146A629311C4CA6698E38B834B6A9E9CD7184BA8834AFF5043D436950C4C1E7832367C10CB8C314D40E5990B0DF7013E64B4549E2270923D06F08CFF6BD3E977DDE6ABE4C31D55C0FA2E465E553E77BDF75E3193D3834FC26E8EB1EE2FA1E4FC97C18C3F6CFFFE2607FD"
        static let tIFD = "B46DD9BD4D98381F"
        static let tIC = "917F37B5C0E6D8D1"
    }

    @Test func dhGenericMappingWorkedExample() throws {
        typealias E = DHExample
        let kPi = AccessKeyDerivation.paceNonceKey(Self.password, cipher: .aes128)
        #expect(try PACECrypto.decryptNonce(ax(E.z), key: kPi, cipher: .aes128) == E.s)
        let domain = try #require(PACEDomain.standardized(0))
        let group = DHGroup.rfc5114_1024_160
        #expect(try domain.keyPair(privateKey: E.skMapIFD).publicKey == ax(E.pkMapIFD))
        #expect(try domain.keyPair(privateKey: E.skMapIC).publicKey == ax(E.pkMapIC))
        #expect(try group.sharedSecret(privateKey: E.skMapIFD, peerPublicKey: ax(E.pkMapIC)) == ax(E.h))
        let gTilde = try domain.mapGenerator(nonce: E.s, privateKey: E.skMapIFD, peerPublicKey: ax(E.pkMapIC))
        #expect(gTilde == ax(E.gTilde))
        #expect(try domain.mapGenerator(nonce: E.s, privateKey: E.skMapIC, peerPublicKey: ax(E.pkMapIFD)) == gTilde)
        #expect(try domain.keyPair(generator: gTilde, privateKey: E.skIFD).publicKey == ax(E.pkIFD))
        #expect(try domain.keyPair(generator: gTilde, privateKey: E.skIC).publicKey == ax(E.pkIC))
        let shared = try domain.sharedSecret(privateKey: E.skIFD, peerPublicKey: ax(E.pkIC))
        #expect(shared == ax(E.shared))
        let keys = AccessKeyDerivation.sessionKeys(shared, cipher: .aes128)
        #expect(keys.encryption == ax("2F7F46ADCC9E7E521B45D192FAFA9126"))
        #expect(keys.mac == ax("805A1D27D45A5116F73C54469462B7D8"))
        let alg = PACEAlgorithm(mapping: .generic, keyAgreement: .dh, cipher: .aes128)
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(E.pkIC)) == ax(E.tIFD))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(E.pkIFD)) == ax(E.tIC))
    }

    @Test func dhReaderAndChipRunWorkedExample() async throws {
        typealias E = DHExample
        let chip = AccessScriptedTransport([
            ("0022C1A412800A04007F0007020204010283010184010" + "0", "9000"),
            ("10860000027C0000", "7C128010" + E.z + "9000"),
            ("10860000867C8183818180" + E.pkMapIFD + "00", "7C8183828180" + E.pkMapIC + "9000"),
            ("10860000867C8183838180" + E.pkIFD + "00", "7C8183848180" + E.pkIC + "9000"),
            ("008600000C7C0A8508" + E.tIFD + "00", "7C1B8608" + E.tIC + "870F444554455354435643413030303033" + "9000"),
        ])
        let info = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.1.2", version: 2, parameterId: 0)
        let session = try await PACE.perform(
            transport: chip, password: Self.password, info: info,
            mappingPrivateKey: E.skMapIFD, ephemeralPrivateKey: E.skIFD)
        #expect(session.encryptionKey == ax("2F7F46ADCC9E7E521B45D192FAFA9126"))
        #expect(await chip.remaining == 0)

        var card = try PACEChip(
            setATData: ax("800A04007F00070202040102 830101 840100"), mrzInformation: Self.mrzInformation,
            can: nil, fixedNonce: E.s, fixedMappingKey: E.skMapIC, fixedEphemeralKey: E.skIC)
        #expect(try card.generalAuthenticate(ax("7C00")) == ax("7C128010" + E.z))
        #expect(try card.generalAuthenticate(ax("7C8183818180" + E.pkMapIFD)) == ax("7C8183828180" + E.pkMapIC))
        #expect(try card.generalAuthenticate(ax("7C8183838180" + E.pkIFD)) == ax("7C8183848180" + E.pkIC))
        #expect(try card.generalAuthenticate(ax("7C0A8508" + E.tIFD)) == ax("7C0A8608" + E.tIC))
        #expect(card.session?.macKey == ax("805A1D27D45A5116F73C54469462B7D8"))
    }
}
