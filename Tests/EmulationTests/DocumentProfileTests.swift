import Emulation
import FoundationEssentials
import ICAO
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DocumentProfileTests {
    @Test(arguments: [
        ("ecdh-gm-p256-aes128", 12, SessionCipher.aes128),
        ("ECDH-GM-brainpoolP256r1-AES128", 13, .aes128),
        ("ecdh-gm-brainpoolp512r1-aes256", 17, .aes256),
        ("ecdh-gm-secp521r1-aes256", 18, .aes256),
        ("dh-gm-1024-3des", 0, .tripleDES),
        ("dh-gm-2048-224-aes192", 1, .aes192),
        ("dh-gm-2048-aes128", 2, .aes128),
        ("ecdh-gm-id11-aes128", 11, .aes128),
        ("ecdh-im-brainpoolp256r1-aes128", 13, .aes128),
        ("dh-im-1024-aes256", 0, .aes256),
        ("default", 12, .aes128),
    ])
    func paceOptionParses(text: String, parameterId: Int, cipher: SessionCipher) throws {
        let option = try PACEOption(parsing: text)
        #expect(option.parameterId == parameterId)
        #expect(option.cipher == cipher)
        #expect(try PACEOption(parsing: option.description) == option)
        #expect(PACE.isSupported(option.paceInfo))
    }

    @Test(arguments: [
        "", "ecdh-gm-p256", "ecdh-im-p224-aes128", "dh-gm-p256-aes128", "ecdh-gm-1024-aes128",
        "ecdh-gm-p999-aes128", "ecdh-gm-p256-aes512", "rsa-gm-p256-aes128", "ecdh-gm-id3-aes128",
    ])
    func paceOptionRejects(text: String) {
        #expect(PACEOption(text) == nil)
        #expect(throws: TesseraError.self) { try PACEOption(parsing: text) }
    }

    @Test func accessOptionsJSON() throws {
        let options = AccessOptions(bac: false, pace: [.default, try PACEOption(parsing: "dh-gm-1024-3des")])
        let json = try JSONEncoder().encode(options)
        #expect(String(decoding: json, as: UTF8.self).contains("\"dh-gm-1024-3des\""))
        #expect(try JSONDecoder().decode(AccessOptions.self, from: json) == options)
        #expect(try JSONDecoder().decode(AccessOptions.self, from: Data("{}".utf8)) == AccessOptions())
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(AccessOptions.self, from: Data(#"{"pace":["nope"]}"#.utf8))
        }
        let misbehaviour = try JSONDecoder().decode(Misbehaviour.self, from: Data(#"{"maxShortLe":128}"#.utf8))
        #expect(misbehaviour == Misbehaviour(maxShortLe: 128))
    }

    @Test func makeWritesAndLoadReadsBack() throws {
        let profile = try makeProfile(
            access: AccessOptions(bac: true, pace: [.default]), can: "123456",
            activeAuthentication: true)
        defer { profile.cleanup() }
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: profile.directory))
        for name in [
            "profile.json", "EF.COM.bin", "DG1.bin", "DG2.bin", "DG11.bin", "DG12.bin", "DG14.bin", "DG15.bin",
            "EF.SOD.bin", "EF.CardAccess.bin", "csca.pem", "ds.pem", "aa-key.pem",
        ] {
            #expect(names.contains(name), "\(name) missing")
        }
        #expect(FileManager.default.fileExists(atPath: profile.cscaPath))
        #expect(try EFCOM(parsing: profile.com).dataGroups == [1, 2, 11, 12, 14, 15])
        #expect(try DG11(parsing: try #require(profile.dataGroup(11))).fullName == "ERIKSSON<<ANNA<MARIA")
        #expect(try DG12(parsing: try #require(profile.dataGroup(12))).dateOfIssue?.count == 8)

        let loaded = try DocumentProfile.load(directory: profile.directory)
        #expect(loaded.mrz == profile.mrz)
        #expect(loaded.can == "123456")
        #expect(loaded.access == profile.access)
        #expect(loaded.algorithm == profile.algorithm)
        #expect(loaded.applicationFiles == profile.applicationFiles)
        #expect(loaded.cardAccess == profile.cardAccess)
        #expect(loaded.activeAuthenticationKey == profile.activeAuthenticationKey)
        #expect(loaded.activeAuthenticationHash == profile.activeAuthenticationHash)
        #expect(loaded.mrzInformation == specimenMRZInformation)
    }

    @Test func badInputIsRejected() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "tessera-emu-\(UUID().uuidString)"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(throws: TesseraError.self) { try DocumentProfile.make(directory: directory, mrz: "P<UTO") }
        #expect(throws: TesseraError.self) {
            try DocumentProfile.make(directory: directory, mrz: specimenMRZ, access: AccessOptions(bac: false))
        }
        #expect(throws: TesseraError.self) {
            try DocumentProfile.make(directory: directory, mrz: specimenMRZ, can: "12a456")
        }
        #expect(throws: TesseraError.self) {
            try DocumentProfile.make(directory: directory, mrz: specimenMRZ, photoJPEG: [0x89, 0x50, 0x4E, 0x47])
        }
        do {
            _ = try DocumentProfile.load(directory: directory)
            Issue.record("expected INVALID_INPUT")
        } catch { #expect(error.code == .invalidInput) }
    }

    @Test func photoPaddingKeepsAValidJPEG() throws {
        #expect(FacePhoto.dimensions(FacePhoto.builtIn)! == (24, 32))
        let padded = try FacePhoto.padded(FacePhoto.builtIn, to: 150_000)
        #expect(abs(padded.count - 150_000) <= 4)
        #expect(FacePhoto.dimensions(padded)! == (24, 32))
        #expect(padded.suffix(2) == [0xFF, 0xD9])
        let profile = try makeProfile(photoPadding: 20_000)
        defer { profile.cleanup() }
        let dg2 = try #require(profile.dataGroup(2))
        let face = try #require(try DG2(parsing: dg2).faces.first)
        #expect(abs(face.image.data.count - 20_000) <= 4)
        #expect(FacePhoto.dimensions(face.image.data)! == (24, 32))
    }
}
