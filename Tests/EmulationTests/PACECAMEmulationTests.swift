import APDU
import CryptoPrimitives
import Emulation
import FoundationEssentials
import ICAO
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// PACE-CAM on the emulated chip: profile options, the static key in DG14, and the real reader against it.
@Suite struct PACECAMEmulationTests {
    @Test func camOptionsParseAndRoundTrip() throws {
        let option = try PACEOption(parsing: "ECDH-CAM-brainpoolP256r1-AES256")
        #expect(option.mapping == .chipAuthentication && option.parameterId == 13 && option.cipher == .aes256)
        #expect(option.description == "ecdh-cam-brainpoolp256r1-aes256")
        #expect(option.paceInfo.protocolOID == "0.4.0.127.0.7.2.2.4.6.4")
        #expect(PACE.isSupported(option.paceInfo))
        #expect(try PACEOption(parsing: "ecdh-gm-p256-aes128").mapping == .generic)
        let json = try JSONEncoder().encode(AccessOptions(bac: false, pace: [option]))
        #expect(try JSONDecoder().decode(AccessOptions.self, from: json).pace == [option])
        for bad in ["ecdh-cam-p256-3des", "dh-cam-2048-aes128", "ecdh-im-p224-aes128", "ecdh-xm-p256-aes128"] {
            #expect(throws: TesseraError.self) { try PACEOption(parsing: bad) }
        }
        #expect(throws: TesseraError.self) {
            try PACEOption(parameterId: 2, cipher: .aes128, mapping: .chipAuthentication)
        }
    }

    @Test func profileCarriesTheChipAuthenticationKey() throws {
        let profile = try makeProfile(
            access: AccessOptions(
                bac: false,
                pace: [
                    try PACEOption(parsing: "ecdh-gm-p256-aes128"), try PACEOption(parsing: "ecdh-cam-p256-aes128"),
                ]))
        defer { profile.cleanup() }
        let key = try #require(profile.chipAuthenticationKeys[12])
        let dg14 = try DG14(parsing: try #require(profile.dataGroup(14)))
        let infos = try SecurityInfos(encoded: dg14.securityInfos)
        let info = try #require(infos.chipAuthenticationPublicKeyInfos.first)
        #expect(infos.chipAuthenticationPublicKeyInfos.count == 1 && info.keyId == 12)
        let pk = try ChipAuthenticationMapping.publicKey(of: info)
        #expect(pk.curve == .secp256r1)
        #expect(pk.point == (try ECCurve.secp256r1.publicKey(privateKey: key)))
        #expect(infos.paceInfos.count == 2)
        // The key survives a reload from disk, readable only by the owner.
        let loaded = try DocumentProfile.load(directory: profile.directory)
        #expect(loaded.chipAuthenticationKeys == profile.chipAuthenticationKeys)
        var st = stat()
        #expect(stat(profile.directory + "/ca-key-12.bin", &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600)
        // GM-only profiles have no chip authentication key.
        let gm = try makeProfile(access: AccessOptions(bac: false, pace: [.default]))
        defer { gm.cleanup() }
        #expect(gm.chipAuthenticationKeys.isEmpty)
        #expect(
            try SecurityInfos(encoded: DG14(parsing: gm.dataGroup(14)!).securityInfos).chipAuthenticationPublicKeyInfos
                .isEmpty)
    }

    static func camRun(
        _ options: [String], misbehaviour: Misbehaviour = .init(),
        password: AccessPassword = .mrz(mrzInformation: specimenMRZInformation)
    )
        async throws -> (
            access: EstablishedAccess, result: ChipAuthenticationResult?, card: EmulatedPassport,
            profile: DocumentProfile
        )
    {
        let profile = try makeProfile(
            access: AccessOptions(bac: false, pace: try options.map { try PACEOption(parsing: $0) }),
            can: "123456")
        let card = EmulatedPassport(profile: profile, misbehaviour: misbehaviour)
        let access = try await establishSecureAccess(transport: InProcessCardTransport(card: card), password: password)
        // DG14 is read under SM, as a reader must.
        let dg14 = try DG14(
            parsing: try await ElementaryFileReader(transport: access.channel).readFile(fid: 0x010E, sfi: 0x0E))
        let result = access.chipAuthentication.map {
            ChipAuthenticationMapping.verify($0, securityInfos: (try? SecurityInfos(encoded: dg14.securityInfos))!)
        }
        return (access, result, card, profile)
    }

    @Test(arguments: [
        "ecdh-cam-p256-aes128", "ecdh-cam-brainpoolp256r1-aes128", "ecdh-cam-p384-aes192",
        "ecdh-cam-brainpoolp512r1-aes256",
    ])
    func readerAuthenticatesTheEmulatedChip(option: String) async throws {
        let run = try await Self.camRun([option])
        defer { run.profile.cleanup() }
        #expect(run.access.paceAlgorithm?.mapping == .chipAuthentication)
        #expect(await run.card.establishedAccess == .pace)
        #expect(run.result?.status == .valid)
        #expect(run.result?.keyId == run.profile.access.pace[0].parameterId)
    }

    @Test func camIsPreferredAndWorksWithTheCAN() async throws {
        let run = try await Self.camRun(["ecdh-gm-p256-aes256", "ecdh-cam-p256-aes128"], password: .can("123456"))
        defer { run.profile.cleanup() }
        #expect(
            run.access.paceAlgorithm
                == PACEAlgorithm(mapping: .chipAuthentication, keyAgreement: .ecdh, cipher: .aes128))
        #expect(run.result?.status == .valid)
    }

    @Test func gmOnlyChipsStillUseGM() async throws {
        let run = try await Self.camRun(["ecdh-gm-p256-aes128"])
        defer { run.profile.cleanup() }
        #expect(run.access.paceAlgorithm?.mapping == .generic)
        #expect(run.access.chipAuthentication == nil && run.result == nil)
    }

    @Test func tamperedDataOrWrongKeyIsInvalid() async throws {
        let tampered = try await Self.camRun(
            ["ecdh-cam-p256-aes128"], misbehaviour: Misbehaviour(tamperedChipAuthenticationData: true))
        defer { tampered.profile.cleanup() }
        #expect(tampered.result?.status == .invalid)
        // The padding block is intact, so this is the PK_Map,IC comparison failing, not decryption.
        #expect(tampered.result?.reason?.contains("PK_Map,IC") == true)
        let wrongKey = try await Self.camRun(
            ["ecdh-cam-p256-aes128"], misbehaviour: Misbehaviour(wrongChipAuthenticationKey: true))
        defer { wrongKey.profile.cleanup() }
        #expect(wrongKey.result?.status == .invalid)
    }
}
