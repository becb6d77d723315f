import CryptoPrimitives
import TesseraCore
import Testing

@Suite struct CryptoPrimitivesTests {
    // RFC 4493 §4 test vectors (AES-128 key 2b7e1516…).
    @Test func aesCMACRFC4493() throws {
        let key = ax("2b7e151628aed2a6abf7158809cf4f3c")
        let m = ax(
            """
            6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51
            30c81c46a35ce411e5fbc1191a0a52ef f69f2445df4f9b17ad2b417be66c3710
            """)
        #expect(try CMAC.aes(key: key, data: []) == ax("bb1d6929e95937287fa37d129b756746"))
        #expect(try CMAC.aes(key: key, data: Array(m[0..<16])) == ax("070a16b46b4d4144f79bdd9dd04a287c"))
        #expect(try CMAC.aes(key: key, data: Array(m[0..<40])) == ax("dfa66747de9ae63030ca32611497c827"))
        #expect(try CMAC.aes(key: key, data: m) == ax("51f0bebf7e3b9d92fc49741779363cfe"))
    }

    // NIST SP 800-38B Appendix D.4 (three-key TDEA) and D.3-style two-key examples.
    @Test func tripleDESCMAC() throws {
        let k3 = ax("8aa83bf8cbda10620bc1bf19fbb6cd58bc313d4a371ca8b5")
        #expect(try CMAC.tripleDES(key: k3, data: []) == ax("b7a688e122ffaf95"))
        #expect(try CMAC.tripleDES(key: k3, data: ax("6bc1bee22e409f96")) == ax("8e8f293136283797"))
        #expect(
            try CMAC.tripleDES(key: k3, data: ax("6bc1bee22e409f96e93d7e117393172aae2d8a57")) == ax("743ddbe0ce2dc2ed"))
        let k2 = ax("4cf15134a2850dd58a3d10ba80570d38")
        #expect(try CMAC.tripleDES(key: k2, data: []) == ax("bd2ebf9a3ba00361"))
        #expect(try CMAC.tripleDES(key: k2, data: ax("6bc1bee22e409f96")) == ax("4ff2ab813c53ce83"))
    }

    // ICAO Doc 9303 Part 11 Appendix D.3: E_IFD = 3DES-CBC(K_enc, S), M_IFD = MAC3(K_mac, pad(E_IFD)).
    @Test func tripleDESAndRetailMACAppendixD() throws {
        let kEnc = ax("AB94FDECF2674FDFB9B391F85D7F76F2")
        let kMac = ax("7962D9ECE03D1ACD4C76089DCE131543")
        let s = ax("781723860C06C2264608F919887022120B795240CB7049B01C19B33E32804F0B")
        let e = try TripleDESCipher.encryptCBC(key: kEnc, data: s)
        #expect(e == ax("72C29C2371CC9BDB65B779B8E8D37B29ECC154AA56A8799FAE2F498F76ED92F2"))
        #expect(try TripleDESCipher.decryptCBC(key: kEnc, data: e) == s)
        #expect(try RetailMAC.mac(key: kMac, data: e) == ax("5F1448EEA8AD90A7"))
        // 3-key form of the same 2-key cipher.
        #expect(try TripleDESCipher.encryptCBC(key: kEnc + Array(kEnc[0..<8]), data: s) == e)
    }

    @Test func paddingAndParity() {
        #expect(ISO9797Padding.pad([1, 2, 3], blockSize: 8) == [1, 2, 3, 0x80, 0, 0, 0, 0])
        #expect(ISO9797Padding.pad([UInt8](repeating: 7, count: 8), blockSize: 8).count == 16)
        #expect(ISO9797Padding.unpad([1, 2, 3, 0x80, 0, 0, 0, 0]) == [1, 2, 3])
        #expect(ISO9797Padding.unpad([1, 2, 3, 0, 0, 0, 0, 0]) == nil)
        // Part 11 Appendix D.1: Ka AB94FCEDF2664EDF → AB94FDECF2674FDF after parity adjustment.
        #expect(TripleDESCipher.adjustParity(ax("AB94FCEDF2664EDF")) == ax("AB94FDECF2674FDF"))
    }

    // ICAO Doc 9303 Part 11 Appendix G.1: AES-128 nonce decryption.
    @Test func aesNonceAppendixG() throws {
        let s = try AESCipher.decryptCBC(
            key: ax("89DED1B26624EC1E634C1989302849DD"), data: ax("95A3A016522EE98D01E76CB6B98B42C3"))
        #expect(s == ax("3F00C4D39D153F2B2A214A078D899B22"))
        #expect(
            try AESCipher.encryptECB(key: ax("89DED1B26624EC1E634C1989302849DD"), data: s)
                == ax("95A3A016522EE98D01E76CB6B98B42C3"))
    }

    // ICAO Doc 9303 Part 11 Appendix G.1 (ECDH generic mapping, brainpoolP256r1).
    @Test func brainpoolMappingAppendixG() throws {
        let curve = ECCurve.brainpoolP256r1
        let skMapIFD = ax("7F4EF07B9EA82FD78AD689B38D0BC78CF21F249D953BC46F4C6E19259C010F99")
        let pkMapIFD = ax(
            "04 7ACF3EFC982EC45565A4B155129EFBC74650DCBFA6362D896FC70262E0C2CC5E 544552DCB6725218799115B55C9BAA6D9F6BC3A9618E70C25AF71777A9C4922D"
        )
        let pkMapIC = ax(
            "04 824FBA91C9CBE26BEF53A0EBE7342A3BF178CEA9F45DE0B70AA601651FBA3F57 30D8C879AAA9C9F73991E61B58F4D52EB87A0A0C709A49DC63719363CCD13C54"
        )
        let skMapIC = ax("498FF49756F2DC1587840041839A85982BE7761D14715FB091EFA7BCE9058560")
        #expect(try curve.publicKey(privateKey: skMapIFD) == pkMapIFD)
        #expect(try curve.publicKey(privateKey: skMapIC) == pkMapIC)
        let h = try curve.multiply(point: pkMapIC, scalar: skMapIFD)
        #expect(
            h
                == ax(
                    "04 60332EF2450B5D247EF6D3868397D398852ED6E8CAF6FFEEF6BF85CA57057FD5 0840CA7415BAF3E43BD414D35AA4608B93A2CAF3A4E3EA4E82C9C13D03EB7181"
                ))
        #expect(try curve.multiply(point: pkMapIFD, scalar: skMapIC) == h)
        let gTilde = try curve.mapGenerator(nonce: ax("3F00C4D39D153F2B2A214A078D899B22"), sharedPoint: h)
        #expect(
            gTilde
                == ax(
                    "04 8CED63C91426D4F0EB1435E7CB1D74A46723A0AF21C89634F65A9AE87A9265E2 8C879506743F8611AC33645C5B985C80B5F09A0B83407C1B6A4D857AE76FE522"
                ))
        // s·G + H via the generic point operations gives the same point.
        let sG = try curve.publicKey(privateKey: ax("3F00C4D39D153F2B2A214A078D899B22"))
        #expect(try curve.add(sG, h) == gTilde)
        let skIFD = ax("A73FB703AC1436A18E0CFA5ABB3F7BEC7A070E7A6788486BEE230C4A22762595")
        #expect(
            try curve.publicKey(privateKey: skIFD, generator: gTilde)
                == ax(
                    "04 2DB7A64C0355044EC9DF190514C625CBA2CEA48754887122F3A5EF0D5EDD301C 3556F3B3B186DF10B857B58F6A7EB80F20BA5DC7BE1D43D9BF850149FBB36462"
                ))
        let pkIC = ax(
            "04 9E880F842905B8B3181F7AF7CAA9F0EFB743847F44A306D2D28C1D9EC65DF6DB 7764B22277A2EDDC3C265A9F018F9CB852E111B768B326904B59A0193776F094"
        )
        #expect(
            try curve.sharedSecret(privateKey: skIFD, peerPublicKey: pkIC)
                == ax("28768D20701247DAE81804C9E780EDE582A9996DB4A315020B2733197DB84925"))
    }

    @Test func ecRejectsInvalidPoints() throws {
        let curve = ECCurve.brainpoolP256r1
        var p = try curve.generator
        p[p.count - 1] ^= 1
        #expect(throws: TesseraError.self) { try curve.validate(point: p) }
        #expect(throws: TesseraError.self) { try curve.validate(point: [0x00]) }
    }

    @Test(arguments: ECCurve.known) func ecdhAgreesOnEveryCurve(curve: ECCurve) throws {
        let a = try curve.generateKeyPair(), b = try curve.generateKeyPair()
        let s1 = try curve.sharedSecret(privateKey: a.privateKey, peerPublicKey: b.publicKey)
        #expect(s1 == (try curve.sharedSecret(privateKey: b.privateKey, peerPublicKey: a.publicKey)))
        #expect(s1.count == (try curve.fieldSize))
    }

    // RFC 5114 groups: g generates the order-q subgroup (g^q ≡ 1 mod p) and DH agrees.
    @Test(arguments: [DHGroup.rfc5114_1024_160, .rfc5114_2048_224, .rfc5114_2048_256])
    func dhGroups(group: DHGroup) throws {
        try group.validate(publicKey: group.g)
        #expect(
            group.primeSize == [DHGroup.rfc5114_1024_160: 128, .rfc5114_2048_224: 256, .rfc5114_2048_256: 256][group])
        let a = try group.generateKeyPair(), b = try group.generateKeyPair()
        #expect(
            try group.sharedSecret(privateKey: a.privateKey, peerPublicKey: b.publicKey)
                == group.sharedSecret(privateKey: b.privateKey, peerPublicKey: a.publicKey))
        #expect(throws: TesseraError.self) { try group.validate(publicKey: [1]) }
    }

    @Test func digestsAndRandom() throws {
        #expect(MessageDigest.sha1(Array("abc".utf8)) == ax("a9993e364706816aba3e25717850c26c9cd0d89d"))
        #expect(
            MessageDigest.sha256(Array("abc".utf8))
                == ax("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        #expect(
            try MessageDigest.sha224(Array("abc".utf8))
                == ax("23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7"))
        let r1 = SecureRandom.bytes(32), r2 = SecureRandom.bytes(32)
        #expect(r1.count == 32 && r1 != r2)
    }
}
