import APDU
import CryptoPrimitives
import TesseraCore
import Testing

@testable import ICAO

/// ICAO Doc 9303 Part 11 (8th ed.) Appendix H: worked examples of PACE Integrated Mapping, AES-128:
/// H.1 ECDH on brainpoolP256r1, H.2 DH on the RFC 5114 1024-bit group. The appendix gives K_π directly
/// (591468CD…), so the encrypted nonce is checked with that key and the APDU transcripts use the nonce
/// encrypted under the test password (every other value is the appendix's).
@Suite struct AccessPACEIMTests {
    static let kPi = ax("591468CDA83D65219CCCB8560233600F")
    static let mrzInformation = AccessPACETests.mrzInformation
    static let password = AccessPACETests.password

    enum H1 {
        static let s = ax("2923BE84E16CD6AE529049F1F1BBE9EB")
        static let z = ax("143DC40C08C8E891FBED7DEDB92B64AD")
        static let t = ax("5DD4CBFC96F5453B130D890A1CDBAE32")
        static let r = ax(
            "E4447E2DFB3586BAC05DDB00156B57FBB2179A3949294C97254189800C517BAA8DA0FF397ED8C445D3E421E4FEB57322")
        static let rp = ax("A2F8FF2DF50E52C6599F386ADCB595D229F6A167ADE2BE5F2C3296ADD5B7430E")
        static let generator =
            "04" + "8E82D31559ED0FDE92A4D0498ADD3C23BABA94FB77691E31E90AEA77FB17D427"
            + "4C1AE14BD0C3DBAC0C871B7F3608169364437CA30AC243A089D3F266C1E60FAD"
        static let skIC = ax("107CF58696EF6155053340FD633392BA81909DF7B9706F226F32086C7AFF974A")
        static let pkIC =
            "04" + "67F78E5F7F7686082B293E8D087E056916D0F74BC01A5F8957D0DE45691E51E8"
            + "932B69A962B52A0985AD2C0A271EE6A13A8ADDDCD1A3A994B9DED257F4D22753"
        static let skIFD = ax("A73FB703AC1436A18E0CFA5ABB3F7BEC7A070E7A6788486BEE230C4A22762595")
        static let pkIFD =
            "04" + "89CBA23FFE96AA18D824627C3E934E54A9FD0B87A95D1471DC1C0ABFDCD640D4"
            + "6755DE9B7B778280B6BEBD57439ADFEB0E21FD4ED6DF42578C13418A59B34C37"
        static let k = ax("4F150FDE1D4F0E38E95017B891BAE17133A0DF45B0D3E18B60BA7BEAFDC2C713")
        static let kEnc = ax("0D3FEB33251A6370893D62AE8DAAF51B")
        static let kMAC = ax("B01E89E3D9E8719E586B50B4A7506E0B")
        static let tIC = "75D4D96E8D5B0308"
        static let tIFD = "450F02B86F6A0909"
        static let oid = "0.4.0.127.0.7.2.2.4.4.2"  // id-PACE-ECDH-IM-AES-CBC-CMAC-128
    }

    enum H2 {
        static let s = ax("FA5B7E3E49753A0DB9178B7B9BD898C8")
        static let z = ax("9ABB8864CA0FF1551E620D1EF4E13510")
        static let t = ax("B3A6DB3C870C3E99245E0D1C06B747DE")
        static let r = ax(
            """
            EAB98D13E09052952AA729907C3C946184DEA0FE74AD2B3AF506F0A83018459C38099CD1F7FF4EA0A078DB1FAC136550
            5E3DC85500EF95E20B4EEF2E88489233BEE0546B472F994B618D168702406791DEEF3CB4810932EC278F3533FDB860EB
            4835C36FA4F1BF3FA0B828A718C96BDE88FBA38A3E6C35AAA10959251EB5FC710FC187258995944C0F926E249373F485
            """)
        static let generator = """
            1D7D767F11E333BCD6DBAEF40E799E7A926B96973550656FF3C830726D118D61C276CDCC61D475CF03A98E0C0E79CAEB
            A5BE25578BD4551D0B10903236F0B0F976852FA78EEA14EA0ACA87D1E91F688FE0DFF897BBE35A472621D343564B262F
            34223AE8FC59B664BFEDFA2BFE7516CA5510A6BBB633D517EC25D4E0BBAA16C2
            """
        static let skIC = ax(
            """
            020F018C7284B047FA7721A337EFB7ACB1440BB30C5252BD41C97C30C994BB78E9F0C5B32744D84017D21FFA6878396A
            6469CA283EF5C000DAF7D261A39AB8860ED4610AB5343390897AAB5A7787E4FAEFA0649C6A94FDF82D991E8E3FC332F5
            142729E7040A3F7D5A4D3CD75CBEE1F043C1CAD2DD484FEB4ED22B597D36688E
            """)
        static let pkIC = """
            928D9A0F9DBA450F13FC859C6F290D1D36E42431138A4378500BEB4E0401854CFF111F71CB6DC1D0335807A11388CC8E
            AA87B07907AAD9FBA6B169AF6D8C26AF8DDDC39ADC3AD2E3FF882B84D23E9768E95A80E4746FB07A9767679FE92133B4
            D379935C771BD7FBED6C7BB4B1708B275EA75679524CDC9C6A91370CC662A2F3
            """
        static let skIFD = ax(
            """
            4BD0E54740F9A028E6A515BFDAF967848C4F5F5FFF65AA0915947FFD1A0DF2FA6981271BC905F3551457B7E03AC3B806
            6DE4AA406C1171FB43DD939C4BA16175103BA3DEE16419AA248118F90CC36A3D6F4C373652E0C3CCE7F0F1D0C5425B36
            00F0F0D6A67F004C8BBA33F2B4733C7252445C1DFC4F1107203F71D2EFB28161
            """)
        static let pkIFD = """
            0F0CC62945A8029251FB7EF3C094E12EC68E4EF07F27CB9D9CD04C5C4250FAE0E4F8A951557E929AEB48E5C6DD47F2F5
            CD7C351A9BD2CD722C07EDE166770F08FFCB370262CF308DD7B07F2E0DA9CAAA1492344C852906919538C98A4BA4187E
            76CE9D87832386D319CE2E043C3343AEAE6EDBA1A9894DC5094D22F7FE1351D5
            """
        static let k = ax(
            """
            419410D6C0A17A4C07C54872CE1CBCEB0A2705C1A434C8A89A4CFE41F1D78124CA7EC52BDE7615E5345E48AB1ABB6E7D
            1D59A57F3174084D3CA4570397C1F62228BDFDB2DA191EA2239E2C060DBE3BBC23C2FCD0AF12E0F9E0B99FCF91FF1959
            011D5798B2FCBC1F14FCC24E441F4C8F9B08D977E9498560E63E7FFAB3134EA7
            """)
        static let kEnc = ax("01AFC10CF87BE36D8179E87370171F07")
        static let kMAC = ax("23F0FBD05FD6C7B8B88F4C8309669061")
        static let tIC = "C2F04230187E1525"
        static let tIFD = "55D61977CBF5307E"
        static let oid = "0.4.0.127.0.7.2.2.4.3.2"  // id-PACE-DH-IM-AES-CBC-CMAC-128
    }

    @Test func ecdhWorkedExampleStepByStep() throws {
        #expect(try PACECrypto.encryptNonce(H1.s, key: Self.kPi, cipher: .aes128) == H1.z)
        #expect(
            try PACEIntegratedMapping.pseudoRandom(
                chipNonce: H1.s, terminalNonce: H1.t, cipher: .aes128, primeBits: 256) == H1.r)
        let curve = ECCurve.brainpoolP256r1
        #expect(try curve.fieldBits == 256)
        #expect(try curve.encodeToPoint(fieldElement: H1.r) == ax(H1.generator))
        #expect(try curve.encodeToPoint(fieldElement: H1.rp) == ax(H1.generator))  // int(R) mod p = Rp
        let domain = try #require(PACEDomain.standardized(13))
        let generator = try domain.integratedMapGenerator(chipNonce: H1.s, terminalNonce: H1.t, cipher: .aes128)
        #expect(generator == ax(H1.generator))
        #expect(try domain.keyPair(generator: generator, privateKey: H1.skIC).publicKey == ax(H1.pkIC))
        #expect(try domain.keyPair(generator: generator, privateKey: H1.skIFD).publicKey == ax(H1.pkIFD))
        let shared = try domain.sharedSecret(privateKey: H1.skIFD, peerPublicKey: ax(H1.pkIC))
        #expect(shared == H1.k)
        let keys = AccessKeyDerivation.sessionKeys(shared, cipher: .aes128)
        #expect(keys.encryption == H1.kEnc && keys.mac == H1.kMAC)
        let alg = try #require(PACEAlgorithm(oid: H1.oid))
        #expect(alg.mapping == .integrated && alg.keyAgreement == .ecdh)
        #expect(
            PACECrypto.publicKeyDataObject(algorithm: alg, domain: domain, publicKey: ax(H1.pkIFD))
                == ax("7F494F060A04007F000702020404028641" + H1.pkIFD))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(H1.pkIFD)) == ax(H1.tIC))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(H1.pkIC)) == ax(H1.tIFD))
    }

    @Test func dhWorkedExampleStepByStep() throws {
        #expect(try PACECrypto.encryptNonce(H2.s, key: Self.kPi, cipher: .aes128) == H2.z)
        let group = DHGroup.rfc5114_1024_160
        #expect(group.primeBits == 1024)
        #expect(
            try PACEIntegratedMapping.pseudoRandom(
                chipNonce: H2.s, terminalNonce: H2.t, cipher: .aes128, primeBits: 1024) == H2.r)
        let domain = try #require(PACEDomain.standardized(0))
        let generator = try domain.integratedMapGenerator(chipNonce: H2.s, terminalNonce: H2.t, cipher: .aes128)
        #expect(generator == ax(H2.generator))
        #expect(try domain.keyPair(generator: generator, privateKey: H2.skIC).publicKey == ax(H2.pkIC))
        #expect(try domain.keyPair(generator: generator, privateKey: H2.skIFD).publicKey == ax(H2.pkIFD))
        let shared = try domain.sharedSecret(privateKey: H2.skIC, peerPublicKey: ax(H2.pkIFD))
        #expect(shared == H2.k)
        let keys = AccessKeyDerivation.sessionKeys(shared, cipher: .aes128)
        #expect(keys.encryption == H2.kEnc && keys.mac == H2.kMAC)
        let alg = try #require(PACEAlgorithm(oid: H2.oid))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(H2.pkIFD)) == ax(H2.tIC))
        #expect(
            try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: ax(H2.pkIC)) == ax(H2.tIFD))
    }

    /// The reader's APDUs for H.1: t in clear in step 2 (empty answer), then the appendix's keys and tokens.
    @Test func readerRunsAppendixH1() async throws {
        let kPi = AccessKeyDerivation.paceNonceKey(Self.password, cipher: .aes128)
        let z = Hex.encode(try PACECrypto.encryptNonce(H1.s, key: kPi, cipher: .aes128))
        let chip = AccessScriptedTransport([
            ("0022C1A412800A04007F0007020204040283010184010D", "9000"),
            ("10860000027C0000", "7C128010" + z + "9000"),
            ("10860000147C128110" + Hex.encode(H1.t) + "00", "7C009000"),
            ("10860000457C438341" + H1.pkIFD + "00", "7C438441" + H1.pkIC + "9000"),
            ("008600000C7C0A8508" + H1.tIFD + "00", "7C0A8608" + H1.tIC + "9000"),
        ])
        let info = PACEInfo(protocolOID: H1.oid, version: 2, parameterId: 13)
        #expect(PACE.isSupported(info))
        let session = try await PACE.perform(
            transport: chip, password: Self.password, info: info,
            ephemeralPrivateKey: H1.skIFD, terminalNonce: H1.t)
        #expect(session.encryptionKey == H1.kEnc && session.macKey == H1.kMAC)
        #expect(await chip.remaining == 0)
    }

    @Test func chipSideAppendixH1AndH2() throws {
        var ec = try PACEChip(
            setATData: ax("800A04007F00070202040402 830101 84010D"), mrzInformation: Self.mrzInformation,
            can: nil, fixedNonce: H1.s, fixedEphemeralKey: H1.skIC)
        let kPi = AccessKeyDerivation.paceNonceKey(Self.password, cipher: .aes128)
        let z = try PACECrypto.encryptNonce(H1.s, key: kPi, cipher: .aes128)
        #expect(try ec.generalAuthenticate(ax("7C00")) == ax("7C128010") + z)
        #expect(try ec.generalAuthenticate(ax("7C128110") + H1.t) == ax("7C00"))
        #expect(try ec.generalAuthenticate(ax("7C438341" + H1.pkIFD)) == ax("7C438441" + H1.pkIC))
        #expect(try ec.generalAuthenticate(ax("7C0A8508" + H1.tIFD)) == ax("7C0A8608" + H1.tIC))
        #expect(ec.session?.macKey == H1.kMAC)

        var dh = try PACEChip(
            setATData: ax("800A04007F00070202040302 830101 840100"), mrzInformation: Self.mrzInformation,
            can: nil, fixedNonce: H2.s, fixedEphemeralKey: H2.skIC)
        _ = try dh.generalAuthenticate(ax("7C00"))
        #expect(try dh.generalAuthenticate(ax("7C128110") + H2.t) == ax("7C00"))
        #expect(try dh.generalAuthenticate(ax("7C8183838180" + H2.pkIFD)) == ax("7C8183848180" + H2.pkIC))
        #expect(try dh.generalAuthenticate(ax("7C0A8508" + H2.tIFD)) == ax("7C0A8608" + H2.tIC))
        #expect(dh.session?.encryptionKey == H2.kEnc)
    }

    /// Reader against the emulated chip side with random values, for every cipher (nonce lengths differ:
    /// 16/16, 32/24 and 32/32 bytes for s/t), on a NIST and a Brainpool curve and DH.
    @Test(arguments: [(13, SessionCipher.aes128), (12, .tripleDES), (12, .aes192), (17, .aes256), (2, .aes128)])
    func loopbackEveryCipher(parameterId: Int, cipher: SessionCipher) async throws {
        let domain = try #require(PACEDomain.standardized(parameterId))
        let alg = PACEAlgorithm(mapping: .integrated, keyAgreement: domain.keyAgreement, cipher: cipher)
        let info = PACEInfo(protocolOID: alg.oid, version: 2, parameterId: parameterId)
        let chip = IMLoopbackChip(mrzInformation: Self.mrzInformation)
        let session = try await PACE.perform(transport: chip, password: Self.password, info: info)
        let chipSession = try #require(await chip.session)
        #expect(session.encryptionKey == chipSession.encryptionKey && session.macKey == chipSession.macKey)
    }

    @Test func p224HasNoIntegratedMapping() throws {
        let domain = try #require(PACEDomain.standardized(10))
        #expect(!domain.supportsIntegratedMapping)
        let alg = PACEAlgorithm(mapping: .integrated, keyAgreement: .ecdh, cipher: .aes128)
        #expect(!PACE.isSupported(PACEInfo(protocolOID: alg.oid, version: 2, parameterId: 10)))
        #expect(PACE.isSupported(PACEInfo(protocolOID: alg.oid, version: 2, parameterId: 12)))
        #expect(throws: TesseraError.self) { try ECCurve.secp224r1.encodeToPoint(fieldElement: H1.r) }
        // A wrong-length t is refused, not silently used as a key.
        #expect(throws: TesseraError.self) {
            try PACEIntegratedMapping.pseudoRandom(
                chipNonce: H1.s, terminalNonce: Array(H1.t.prefix(8)), cipher: .aes128, primeBits: 256)
        }
    }
}

/// A `PACEChip` behind an `APDUTransport` (MSE:Set AT and GENERAL AUTHENTICATE only). With
/// `refusingKeyReference` it answers 6A80 to MSE:Set AT carrying DO'84' and uses that parameter id otherwise.
actor IMLoopbackChip: APDUTransport {
    let mrzInformation: String
    let refusingKeyReference: Int?
    private var chip: PACEChip?
    private(set) var session: SecureMessagingSession?
    private(set) var refusedSetAT = 0

    init(mrzInformation: String, refusingKeyReference: Int? = nil) {
        self.mrzInformation = mrzInformation
        self.refusingKeyReference = refusingKeyReference
    }

    func transmit(_ bytes: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let command = try CommandAPDU(parsing: bytes)
        if command.ins == 0x22 {
            var data = command.data
            if let id = refusingKeyReference {
                guard try TLV.parseAll(data, options: []).first(tag: 0x84) == nil else {
                    refusedSetAT += 1
                    return [0x6A, 0x80]
                }
                data += TLV.encode(tag: 0x84, value: [UInt8(id)])
            }
            chip = try PACEChip(setATData: data, mrzInformation: mrzInformation, can: nil)
            return [0x90, 0x00]
        }
        guard var current = chip else { return [0x69, 0x85] }
        let out = try current.generalAuthenticate(command.data)
        chip = current
        session = current.session
        return out + [0x90, 0x00]
    }
}
