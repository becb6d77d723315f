import APDU
import Crypto
import CryptoPrimitives
import Emulation
import FoundationEssentials
import ICAO
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Chip Authentication v1 (Doc 9303 Part 11 §6.2): protocol OIDs and commands, key agreement and KDF checked
/// against an independent computation (swift-crypto), and the reader against the emulated chip.
///
/// Neither Doc 9303 nor BSI TR-03110 publishes a worked example for Chip Authentication v1, so the key
/// agreement and the session keys are cross-checked with swift-crypto (ECDH on P-256, SHA-1/SHA-256).
@Suite struct ChipAuthenticationTests {
    @Test func protocolOIDsDecodeAndEncode() throws {
        // TR-03110 Part 3 §A.1.1.2: id-CA-DH = 0.4.0.127.0.7.2.2.3.1, id-CA-ECDH = …3.2; ciphers 1 3DES … 4 AES-256.
        let aes = try #require(ChipAuthenticationAlgorithm(oid: "0.4.0.127.0.7.2.2.3.2.2"))
        #expect(aes.keyAgreement == .ecdh && aes.cipher == .aes128)
        #expect(aes.oidBytes == [0x04, 0x00, 0x7F, 0x00, 0x07, 0x02, 0x02, 0x03, 0x02, 0x02])
        let des = try #require(ChipAuthenticationAlgorithm(oid: "0.4.0.127.0.7.2.2.3.1.1"))
        #expect(des.keyAgreement == .dh && des.cipher == .tripleDES)
        #expect(ChipAuthenticationAlgorithm(keyAgreement: .ecdh, cipher: .aes256).oid == "0.4.0.127.0.7.2.2.3.2.4")
        #expect(ChipAuthenticationAlgorithm(oid: "0.4.0.127.0.7.2.2.3.3.1") == nil)
        #expect(ChipAuthenticationAlgorithm(oid: "0.4.0.127.0.7.2.2.4.2.2") == nil)
    }

    @Test func commandsFollowDoc9303() {
        let key: [UInt8] = [0x04] + [UInt8](repeating: 0xAB, count: 64)
        // 3DES: MSE:Set KAT, 0022 41A6, 91 ephemeral key, 84 key id.
        let kat = ChipAuthentication.commands(
            algorithm: .init(keyAgreement: .ecdh, cipher: .tripleDES), keyId: 13, ephemeralPublicKey: key)
        #expect(kat.count == 1)
        #expect([kat[0].cla, kat[0].ins, kat[0].p1, kat[0].p2] == [0x00, 0x22, 0x41, 0xA6])
        #expect(kat[0].data == [0x91, 0x41] + key + [0x84, 0x01, 0x0D])
        // AES: MSE:Set AT, 0022 41A4, 80 OID (84 key id when known), then GENERAL AUTHENTICATE 7C { 80 key }.
        let at = ChipAuthentication.commands(
            algorithm: .init(keyAgreement: .ecdh, cipher: .aes128), keyId: nil, ephemeralPublicKey: key)
        #expect(at.count == 2)
        #expect([at[0].ins, at[0].p1, at[0].p2] == [0x22, 0x41, 0xA4])
        #expect(at[0].data == [0x80, 0x0A, 0x04, 0x00, 0x7F, 0x00, 0x07, 0x02, 0x02, 0x03, 0x02, 0x02])
        #expect([at[1].cla, at[1].ins, at[1].p1, at[1].p2] == [0x00, 0x86, 0x00, 0x00])
        #expect(at[1].data == [0x7C, 0x43, 0x80, 0x41] + key)
    }

    @Test func keyAgreementAndSessionKeysMatchSwiftCrypto() throws {
        let chip = P256.KeyAgreement.PrivateKey(), terminal = P256.KeyAgreement.PrivateKey()
        let expectedK = try terminal.sharedSecretFromKeyAgreement(with: chip.publicKey).withUnsafeBytes { [UInt8]($0) }
        let domain = PACEDomain.ec(.secp256r1)
        let k = try domain.sharedSecret(
            privateKey: [UInt8](terminal.rawRepresentation),
            peerPublicKey: [UInt8](chip.publicKey.x963Representation))
        #expect(k == expectedK)
        // KDF(K, c) = H(K ‖ c) (Doc 9303 Part 11 §9.7.1): SHA-1 for AES-128 (and 3DES, parity adjusted), SHA-256 above.
        let aes = AccessKeyDerivation.sessionKeys(k, cipher: .aes128)
        #expect(aes.encryption == Array(Insecure.SHA1.hash(data: k + [0, 0, 0, 1])).prefix(16).map { $0 })
        #expect(aes.mac == Array(Insecure.SHA1.hash(data: k + [0, 0, 0, 2])).prefix(16).map { $0 })
        let aes256 = AccessKeyDerivation.sessionKeys(k, cipher: .aes256)
        #expect(aes256.encryption == Array(SHA256.hash(data: k + [0, 0, 0, 1])))
        let des = AccessKeyDerivation.sessionKeys(k, cipher: .tripleDES)
        let raw = Array(Insecure.SHA1.hash(data: k + [0, 0, 0, 1])).prefix(16)
        #expect(des.encryption == raw.map { b in b & 0xFE | UInt8((b >> 1).nonzeroBitCount % 2 == 0 ? 1 : 0) })
        // The session starts with SSC = 0 of the block size.
        #expect(
            try ChipAuthentication.session(sharedSecret: k, cipher: .tripleDES).ssc == [UInt8](repeating: 0, count: 8))
        #expect(
            try ChipAuthentication.session(sharedSecret: k, cipher: .aes128).ssc == [UInt8](repeating: 0, count: 16))
    }

    @Test func optionsParseAndTheProfileCarriesTheKeys() throws {
        #expect(
            try ChipAuthenticationOption(parsing: "ECDH-brainpoolP256r1-3DES").description
                == "ecdh-brainpoolp256r1-3des")
        #expect(try ChipAuthenticationOption(parsing: "dh-2048-aes128").parameterId == 2)
        for bad in ["ecdh-p256", "ecdh-2048-aes128", "xx-p256-aes128", "ecdh-p256-aes512"] {
            #expect(throws: TesseraError.self) { try ChipAuthenticationOption(parsing: bad) }
        }
        let profile = try makeProfile(
            access: AccessOptions(chipAuthentication: [
                try .init(parsing: "ecdh-p256-aes128"), try .init(parsing: "ecdh-p256-3des"),
                try .init(parsing: "dh-1024-3des"),
            ]))
        defer { profile.cleanup() }
        let infos = try SecurityInfos(encoded: try DG14(parsing: try #require(profile.dataGroup(14))).securityInfos)
        #expect(Set(infos.chipAuthenticationInfos.compactMap(\.keyId)) == [0, 12])
        #expect(infos.chipAuthenticationInfos.count == 3 && infos.chipAuthenticationPublicKeyInfos.count == 2)
        let candidates = ChipAuthentication.candidates(in: infos)
        #expect(candidates.problems.isEmpty)
        // ECDH before DH, AES before 3DES.
        #expect(
            candidates.candidates.map(\.algorithm.description) == ["CA-ECDH-AES-128", "CA-ECDH-3DES", "CA-DH-3DES"])
        let dh = try #require(candidates.candidates.last)
        #expect(
            dh.publicKey
                == (try DHGroup.rfc5114_1024_160.publicKey(privateKey: try #require(profile.chipAuthenticationKeys[0])))
        )
        let reloaded = try DocumentProfile.load(directory: profile.directory)
        #expect(reloaded.access.chipAuthentication == profile.access.chipAuthentication)
        #expect(reloaded.chipAuthenticationKeys == profile.chipAuthenticationKeys)
    }

    @Test func keysWithoutChipAuthenticationInfoMean3DES() throws {
        // Doc 9303 Part 11 §9.2.6: a DG14 with a key but no ChipAuthenticationInfo implies 3DES.
        let pair = try ECCurve.secp256r1.generateKeyPair()
        let dg14 = [UInt8](
            ASN1SetOf([
                LDSBuilder.chipAuthenticationPublicKeyInfo(
                    standardizedParameterId: 12, publicKey: pair.publicKey, keyId: nil)
            ]))
        let infos = try SecurityInfos(encoded: dg14)
        #expect(ChipAuthentication.isAnnounced(in: infos))
        let candidate = try #require(ChipAuthentication.candidates(in: infos).candidates.first)
        #expect(
            candidate.algorithm.cipher == .tripleDES && candidate.keyId == nil && candidate.publicKey == pair.publicKey)
    }

    /// `SET { items }` (a SecurityInfos with one element).
    func ASN1SetOf(_ items: [[UInt8]]) -> [UInt8] { TLV.encode(tag: 0x31, value: items.flatMap { $0 }) }

    @Test(arguments: [
        "ecdh-p256-aes128", "ecdh-brainpoolp256r1-3des", "ecdh-p256-aes256", "dh-2048-aes128", "dh-1024-3des",
    ])
    func readerAndEmulatedChipSwitchKeys(option: String) async throws {
        let profile = try makeProfile(access: AccessOptions(chipAuthentication: [try .init(parsing: option)]))
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let transport = InProcessCardTransport(card: card)
        let access = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        let dg14 = try await ElementaryFileReader(transport: access.channel).readFile(fid: 0x010E, sfi: 0x0E)
        let infos = try SecurityInfos(encoded: try DG14(parsing: dg14).securityInfos)
        let candidate = try #require(ChipAuthentication.candidates(in: infos).candidates.first)
        let (session, run) = try await ChipAuthentication.perform(over: access.channel, candidate: candidate)
        #expect(
            session.ssc.allSatisfy { $0 == 0 } && run.chipPublicKeyInfo == candidate.publicKeyInfo.subjectPublicKeyInfo)
        #expect(await card.chipAuthenticationCount == 1)
        // Under the new keys the chip answers; the old session is gone.
        let ca = SecureChannel(inner: transport, session: session)
        #expect(try await ElementaryFileReader(transport: ca).readFile(fid: 0x0101, sfi: 0x01) == profile.dataGroup(1))
        await #expect(throws: TesseraError.self) {
            try await ElementaryFileReader(transport: access.channel).readFile(fid: 0x0101)
        }
    }

    @Test func aCloneWithTheWrongKeyCannotAnswer() async throws {
        let profile = try makeProfile(
            access: AccessOptions(chipAuthentication: [try .init(parsing: "ecdh-p256-aes128")]))
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile, misbehaviour: Misbehaviour(wrongChipAuthenticationKey: true))
        let transport = InProcessCardTransport(card: card)
        let access = try await establishAccess(
            transport: transport, password: .mrz(mrzInformation: specimenMRZInformation))
        let dg14 = try await ElementaryFileReader(transport: access.channel).readFile(fid: 0x010E, sfi: 0x0E)
        let candidate = try #require(
            ChipAuthentication.candidates(in: try SecurityInfos(encoded: try DG14(parsing: dg14).securityInfos))
                .candidates.first)
        // The chip accepts the key exchange (it cannot tell), but its keys differ from the reader's.
        let (session, _) = try await ChipAuthentication.perform(over: access.channel, candidate: candidate)
        let ca = SecureChannel(inner: transport, session: session)
        let error = await #expect(throws: TesseraError.self) {
            try await ElementaryFileReader(transport: ca).readFile(fid: 0x0101, sfi: 0x01)
        }
        #expect(error?.code == .secureMessagingError)
    }

    @Test func chipAuthenticationNeedsSecureMessaging() async throws {
        let profile = try makeProfile(access: AccessOptions(chipAuthentication: [try .init(parsing: "ecdh-p256-3des")]))
        defer { profile.cleanup() }
        let card = EmulatedPassport(profile: profile)
        let kat = ChipAuthentication.commands(
            algorithm: .init(keyAgreement: .ecdh, cipher: .tripleDES), keyId: 12,
            ephemeralPublicKey: try ECCurve.secp256r1.generateKeyPair().publicKey)[0]
        let response = try ResponseAPDU(parsing: await card.process(try kat.encoded()))
        #expect(response.sw == .securityStatusNotSatisfied)
        #expect(await card.chipAuthenticationCount == 0)
    }
}
