import APDU
import CryptoPrimitives
import TesseraCore
import Testing
import X509Support

@testable import ICAO

/// PACE with chip authentication mapping (Doc 9303 Part 11 §4.4.3.5, BSI TR-03110 Part 2 §3.4.2).
///
/// Doc 9303 Part 11 has no worked example for PACE-CAM, so the reader is pinned to a published transcript of a
/// real German identity card (PACE-ECDH-CAM-AES-128, brainpoolP256r1, MRZ password C4KHNY1PF / 780214 / 330315)
/// from the gmrtd project's test suite (github.com/gmrtd/gmrtd, pace/pace_test.go, TestDoPace_CAM_ECDH_DE).
/// The card's EF.CardSecurity SecurityInfos below were recovered from the same transcript's secure-messaging
/// READ BINARY responses with the session keys it establishes.
@Suite struct AccessPACECAMTests {
    static let mrzInformation = "C4KHNY1PF5" + "7802144" + "3303159"
    static let info = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.6.2", version: 2, parameterId: 13)
    static let skMapIFD = ax("01FD26013F5BC41FAD8BB09811E435F16FBE2EB3C2E1D999B0F63DA8C3D58BB5")
    static let skIFD = ax("1FCD3D8AC4FAE3960A14FEA2925D75ADD335F13B248EBA192358DDED93A89552")
    static let pkMapIC =
        "0476DC295C4FB14237D87318D70967E25EC45F74D6FD4AFF588C90EFB3D868F05B450BA6B64967227C2246DBE2905522C8086DAC7F3BBE5CF3B192F0A0C2D97EE5"
    static let aIC = "B3AE8830311B1D5605777F47CB4ED028346CD00105D32859DE127DA3D8398865358F26F08EBE410864EAF6E39F33F3F5"
    /// CA_IC = D(KS_Enc, A_IC) with IV = E(KS_Enc, −1), padding method 2 removed.
    static let caIC = ax("61FDE6BC2006EB41CA6C5DE2490C0A5AFFE629C7A696701A22B249099F8C5B90")
    static let ksEnc = ax("A8E85E938514EC67AE33CDA3D43D3C48")
    static let ksMAC = ax("27F1ADEB705A049A305B0C619B14B9B3")
    static let transcript: [(String, String)] = [
        // The card's own MSE:Set AT had no parameter id (84); Tessera always sends it.
        ("0022C1A412800A04007F0007020204060283010184010D", "9000"),
        ("10860000027C0000", "7C1280109BFF93E6ED9F5F9764EC0D783D14FB039000"),
        (
            "10860000457C43814104303F340815EEA501772393E299A4A6F6694600189C249C63A8513FF3FEFA66E346D11970B5F76FB564C3B0E54B215528F647EC5A9AB209CDBE262E763D6119A100",
            "7C438241" + pkMapIC + "9000"
        ),
        (
            "10860000457C438341048442B191EF5346A6B6DACB6CD5728C4A72F0CA7AECDF7AFDFB3EF175E12A6F7C74F509AF768B8DBE2CF42D16C1F00714691D78A19CDF1B493390D1173785F2B700",
            "7C438441042315AE8143F21DE15B35F083CFA148C5FCBD9F2EB9DCDC4519BCF337443E79E55B28A5E218FB919C30880D263E469645FF114C46ED29918910BE3453527D21649000"
        ),
        ("008600000C7C0A8508FEE088A4D7BE1B7F00", "7C3C860819A2B9192E11512A8A30" + aIC + "9000"),
    ]
    /// EF.CardSecurity SecurityInfos of the card: PACE GM and CAM infos, CA info (keyId 0x48) and two
    /// id-PK-ECDH keys on standardized parameters 13 (keyIds 13 and 0x48); the card proves the keyId-13 key.
    static let cardSecurityInfos = ax(
        """
        31820131300D060804007F00070202020201023012060A04007F000702020302020201020201483012060A04007F0007020204020202\
        010202010D3012060A04007F0007020204060202010202010D301C060904007F000702020302300C060704007F0007010202010D0201\
        483062060904007F0007020201023052300C060704007F0007010202010D03420004614CD88B00821A887869D0060B44A9D18789353E\
        8CF7DFBC3F29F79327DE30B97B1B2DDA0BE77F24AD415C327C7B7AB2E9C10B0258F5BCBF90C01825FBDFDEF702010D3062060904007F\
        0007020201023052300C060704007F0007010202010D034200048488A2DC34B6B36D6C01A8DFBD70A874610C53B32893A1DE3B1C4BBF\
        477EEF3761AA51DFD6B52DA43587E95386FC34FFE178D90086A7D646047C82BEBC27DA3E020148
        """)

    @Test func chipAuthenticationDataDecryptsWithTheSpecifiedIV() throws {
        #expect(try ChipAuthenticationMapping.decrypt(ax(Self.aIC), encryptionKey: Self.ksEnc) == Self.caIC)
        #expect(try ChipAuthenticationMapping.encrypt(Self.caIC, encryptionKey: Self.ksEnc) == ax(Self.aIC))
        // A zero IV (as for the nonce) garbles the first block; a wrong key breaks the padding.
        let zeroIV = try AESCipher.decryptCBC(key: Self.ksEnc, data: ax(Self.aIC))
        #expect(Array(zeroIV.prefix(32)) != Self.caIC)
        #expect(throws: TesseraError.self) {
            try ChipAuthenticationMapping.decrypt(ax(Self.aIC), encryptionKey: Self.ksMAC)
        }
        #expect(throws: TesseraError.self) {
            try ChipAuthenticationMapping.decrypt([0x01, 0x02], encryptionKey: Self.ksEnc)
        }
    }

    @Test func readerRunsTheGermanCardTranscript() async throws {
        let chip = AccessScriptedTransport(Self.transcript)
        let outcome = try await PACE.establish(
            transport: chip, password: .mrz(mrzInformation: Self.mrzInformation),
            info: Self.info, mappingPrivateKey: Self.skMapIFD,
            ephemeralPrivateKey: Self.skIFD)
        #expect(await chip.remaining == 0)
        #expect(outcome.algorithm.mapping == .chipAuthentication && outcome.algorithm.cipher == .aes128)
        #expect(
            outcome.session
                == (try SecureMessagingSession(cipher: .aes128, encryptionKey: Self.ksEnc, macKey: Self.ksMAC)))
        let cam = try #require(outcome.chipAuthentication)
        #expect(cam.chipMappingPublicKey == ax(Self.pkMapIC))
        #expect(cam.chipAuthenticationData == Self.caIC)

        let infos = try SecurityInfos(encoded: Self.cardSecurityInfos)
        #expect(infos.chipAuthenticationPublicKeyInfos.count == 2)
        let result = ChipAuthenticationMapping.verify(cam, securityInfos: infos)
        #expect(result.status == .valid, "\(result.reason ?? "")")
        #expect(result.keyId == 13)
    }

    @Test func wrongDataOrKeyIsInvalid() throws {
        let domain = try #require(PACEDomain.standardized(13))
        let infos = try SecurityInfos(encoded: Self.cardSecurityInfos)
        var changed = Self.caIC
        changed[31] ^= 0x01
        let tampered = PACEChipAuthenticationData(
            domain: domain, chipMappingPublicKey: ax(Self.pkMapIC), chipAuthenticationData: changed)
        #expect(ChipAuthenticationMapping.verify(tampered, securityInfos: infos).status == .invalid)
        let undecryptable = PACEChipAuthenticationData(
            domain: domain, chipMappingPublicKey: ax(Self.pkMapIC),
            chipAuthenticationData: nil, problem: "bad padding")
        #expect(
            ChipAuthenticationMapping.verify(undecryptable, securityInfos: infos)
                == .init(status: .invalid, reason: "bad padding"))
        // Only the keyId-0x48 key (not the one the card proves) left: CA_IC · PK_IC ≠ PK_Map,IC.
        let good = PACEChipAuthenticationData(
            domain: domain, chipMappingPublicKey: ax(Self.pkMapIC), chipAuthenticationData: Self.caIC)
        let key48 = try #require(
            infos.all.first {
                $0.protocolOID == ChipAuthenticationMapping.idPKECDH && $0.optionalData == [0x02, 0x01, 0x48]
            })
        let onlyKey48 = try SecurityInfos(encoded: TLV.encode(tag: 0x31, value: key48.encoded))
        let result = ChipAuthenticationMapping.verify(good, securityInfos: onlyKey48)
        #expect(result.status == .invalid)
        #expect(result.reason?.contains("CA_IC") == true)
        // No chip authentication key at all: nothing to check against.
        let none = try SecurityInfos(encoded: ax("31143012060A04007F0007020204060202010202010D"))
        #expect(ChipAuthenticationMapping.verify(good, securityInfos: none).status == .notChecked)
    }

    @Test func namedCurveKeysAreAcceptedAndCurveMismatchesRejected() throws {
        let curve = ECCurve.secp256r1
        let sk = try curve.generateKeyPair()
        let skMap = try curve.generateKeyPair()
        let caIC = try ChipAuthenticationMapping.chipAuthenticationData(
            curve: curve, mappingPrivateKey: skMap.privateKey,
            staticPrivateKey: sk.privateKey)
        // CA_IC · PK_IC = SK_Map · SK_IC⁻¹ · SK_IC · G = PK_Map.
        #expect(try curve.multiply(point: sk.publicKey, scalar: caIC) == skMap.publicKey)
        let data = PACEChipAuthenticationData(
            domain: .ec(curve), chipMappingPublicKey: skMap.publicKey, chipAuthenticationData: caIC)
        // An id-ecPublicKey SubjectPublicKeyInfo with a named curve (what OpenSSL writes), keyId absent.
        let spkiHeader = ax("3059301306072A8648CE3D020106082A8648CE3D030107034200")
        let namedInfo = TLV.encode(
            tag: 0x30,
            value: TLV.encode(tag: 0x06, value: ASN1.encodeOIDContent(ChipAuthenticationMapping.idPKECDH))
                + spkiHeader + sk.publicKey)
        let named = try SecurityInfos(encoded: TLV.encode(tag: 0x31, value: namedInfo))
        #expect(ChipAuthenticationMapping.verify(data, securityInfos: named) == .init(status: .valid))
        // The same run claimed on brainpoolP256r1 does not fit a P-256 key.
        let mismatch = PACEChipAuthenticationData(
            domain: .ec(.brainpoolP256r1), chipMappingPublicKey: skMap.publicKey,
            chipAuthenticationData: caIC)
        #expect(ChipAuthenticationMapping.verify(mismatch, securityInfos: named).status == .invalid)
        // LDSBuilder's standardized-parameter form round-trips.
        let built = try SecurityInfos(
            encoded: TLV.encode(
                tag: 0x31,
                value: LDSBuilder.chipAuthenticationPublicKeyInfo(
                    parameterId: 12, publicKey: sk.publicKey, keyId: 7)))
        #expect(ChipAuthenticationMapping.verify(data, securityInfos: built) == .init(status: .valid, keyId: 7))
    }

    @Test func preferenceAndSupport() {
        let gm = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.2.4", parameterId: 12)
        let cam = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.6.2", parameterId: 12)
        let im = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.4.2", parameterId: 12)
        let camOnDH = PACEInfo(protocolOID: "0.4.0.127.0.7.2.2.4.6.2", parameterId: 2)
        #expect(PACE.isSupported(cam) && PACE.isSupported(im) && !PACE.isSupported(camOnDH))
        #expect(PACE.preferred([gm, cam]) == cam)
        #expect(PACE.preferred([cam, gm]) == cam)
        #expect(PACE.preferred([gm, im]) == gm && PACE.preferred([im, gm]) == gm)
        #expect(PACE.preferred([im]) == im)
    }

    @Test func loopbackReaderAgainstChip() async throws {
        let curve = ECCurve.brainpoolP256r1
        let ca = try curve.generateKeyPair()
        let mrz = AccessLoopbackTests.mrz
        let cardAccess = AccessLoopbackTests.cardAccess(oid: "0.4.0.127.0.7.2.2.4.6.4", parameterId: 13)
        let dg14Infos = try SecurityInfos(
            encoded: TLV.encode(
                tag: 0x31,
                value: LDSBuilder.chipAuthenticationPublicKeyInfo(
                    parameterId: 13, publicKey: ca.publicKey, keyId: 1)))

        let chip = AccessLoopbackChip(
            mrzInformation: mrz, cardAccess: cardAccess, appFiles: [0x0101: AccessLoopbackTests.dg1],
            chipAuthenticationKey: ca.privateKey)
        let access = try await establishSecureAccess(transport: chip, password: .mrz(mrzInformation: mrz))
        #expect(access.protocolUsed == .pace && access.paceAlgorithm?.mapping == .chipAuthentication)
        #expect(await access.channel.currentSession?.cipher == .aes256)
        #expect(
            try await ElementaryFileReader(transport: access.channel).readFile(fid: 0x0101, sfi: 0x01)
                == AccessLoopbackTests.dg1)
        let cam = try #require(access.chipAuthentication)
        #expect(ChipAuthenticationMapping.verify(cam, securityInfos: dg14Infos) == .init(status: .valid, keyId: 1))

        // A chip proving another key than DG14 lists.
        let impostor = AccessLoopbackChip(
            mrzInformation: mrz, cardAccess: cardAccess, appFiles: [:],
            chipAuthenticationKey: try curve.generateKeyPair().privateKey)
        let other = try await establishSecureAccess(transport: impostor, password: .mrz(mrzInformation: mrz))
        #expect(
            ChipAuthenticationMapping.verify(try #require(other.chipAuthentication), securityInfos: dg14Infos).status
                == .invalid)

        // A CAM chip without a key refuses MSE:Set AT; GM chips report no chip authentication data.
        #expect(throws: TesseraError.self) {
            try PACEChip(
                setATData: PACECrypto.setATData(
                    algorithm: PACEAlgorithm(oid: "0.4.0.127.0.7.2.2.4.6.4")!,
                    password: .can("123456"), parameterId: 13),
                mrzInformation: mrz, can: nil)
        }
        let gmChip = AccessLoopbackChip(
            mrzInformation: mrz,
            cardAccess: AccessLoopbackTests.cardAccess(oid: "0.4.0.127.0.7.2.2.4.2.2", parameterId: 13),
            appFiles: [:])
        let gm = try await establishSecureAccess(transport: gmChip, password: .mrz(mrzInformation: mrz))
        #expect(gm.paceAlgorithm?.mapping == .generic && gm.chipAuthentication == nil)
    }
}
