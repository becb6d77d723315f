import APDU
import Documents
import Emulation
import FoundationEssentials
import ICAO
import TesseraCore
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// documents.read with Chip Authentication v1: DG14 read under the access session, CA, the rest under CA's keys.
@Suite struct DocumentServiceCATests {
    static func profile(_ ca: [String], pace: [String] = [], activeAuthentication: Bool = false) throws
        -> DocumentProfile
    {
        try DocumentProfile.make(
            directory: Scratch.directory("documents-ca"), mrz: specimenMRZ, can: "123456",
            access: AccessOptions(
                bac: true, pace: try pace.map { try PACEOption(parsing: $0) },
                chipAuthentication: try ca.map { try ChipAuthenticationOption(parsing: $0) }),
            activeAuthentication: activeAuthentication)
    }

    /// `extended`: whether the card link carries extended-length APDUs (DH-2048 CA needs them).
    static func read(
        _ doc: DocumentProfile, _ misbehaviour: Misbehaviour = .init(), evidence: Bool = false,
        extended: Bool = true
    ) async throws -> DocumentReadResult {
        var request = DocumentReadRequest(key: DocumentServiceTests.key)
        request.evidence = evidence
        return try await DocumentServiceTests.service(doc, misbehaviour: misbehaviour, extended: extended).read(request)
    }

    @Test(arguments: ["ecdh-p256-aes128", "ecdh-brainpoolp256r1-3des", "dh-2048-aes128"])
    func chipAuthenticationMakesTheChipAuthentic(option: String) async throws {
        let doc = try Self.profile([option])
        let result = try await Self.read(doc)
        let keyId = try ChipAuthenticationOption(parsing: option).parameterId
        #expect(
            result.chipAuthentication
                == ChipAuthenticationResult(status: .valid, keyId: keyId, mechanism: .chipAuthentication))
        #expect(result.verdict == DocumentVerdict(verdict: .authentic, chipAuthenticity: .valid, reasons: []))
        #expect(result.files[.dataGroup(1)] == doc.dataGroup(1) && result.files[.dataGroup(2)] == doc.dataGroup(2))
        #expect(
            result.json["chipAuthentication"] == [
                "status": "valid", "keyId": .number(Double(keyId)), "mechanism": "CA",
            ])
    }

    @Test func aCloneWithTheWrongKeyIsNotAuthenticAndStillRead() async throws {
        let doc = try Self.profile(["ecdh-p256-aes128"], activeAuthentication: true)
        let result = try await Self.read(doc, Misbehaviour(wrongChipAuthenticationKey: true))
        #expect(
            result.chipAuthentication?.status == .invalid && result.chipAuthentication?.mechanism == .chipAuthentication
        )
        #expect(
            result.verdict
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.chipAuthInvalid]))
        // Access is established again after the failed CA: the data is still read and passes passive authentication.
        #expect(result.passiveAuthentication?.status == .valid)
        #expect(result.files[.dataGroup(2)] == doc.dataGroup(2))
        #expect(result.activeAuthentication?.status == .valid)
    }

    @Test func aKeyTooLongForShortAPDUsIsNotChecked() async throws {
        let doc = try Self.profile(["dh-2048-aes128"])
        let result = try await Self.read(doc, extended: false)
        #expect(result.chipAuthentication?.status == .notChecked)
        #expect(result.chipAuthentication?.reason?.contains("extended-length") == true)
        #expect(
            result.verdict
                == DocumentVerdict(verdict: .unverified, chipAuthenticity: .notChecked, reasons: [.chipAuthNotChecked]))
        #expect(result.passiveAuthentication?.status == .valid && result.files[.dataGroup(2)] == doc.dataGroup(2))
        // DH-1024 fits a short APDU.
        let small = try await Self.read(try Self.profile(["dh-1024-3des"]), extended: false)
        #expect(small.chipAuthentication?.status == .valid)
    }

    @Test func aChipThatRefusesChipAuthenticationIsNotAuthentic() async throws {
        // A clone: DG14 copied, but the chip has no CA key (profile.json without the CA option: it answers 6A86).
        let genuine = try Self.profile(["ecdh-p256-aes128"], activeAuthentication: true)
        let path = genuine.directory + "/profile.json"
        guard
            case .object(var description) = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: path)))),
            case .object(var access) = description["access"]
        else { throw TesseraError(.malformedData, "\(path) is not a profile") }
        access["chipAuthentication"] = .array([])
        description["access"] = .object(access)
        try Data(JSONValue.object(description).serialized()).write(to: URL(fileURLWithPath: path))
        let clone = try DocumentProfile.load(directory: genuine.directory)
        #expect(clone.access.chipAuthentication.isEmpty && clone.dataGroup(14) == genuine.dataGroup(14))
        let result = try await Self.read(clone)
        #expect(
            result.chipAuthentication?.status == .invalid && result.chipAuthentication?.reason?.contains("6A86") == true
        )
        #expect(
            result.verdict
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.chipAuthInvalid]))
        // Access was established again after the refusal: everything else is read and checked.
        #expect(result.passiveAuthentication?.status == .valid && result.files[.dataGroup(2)] == genuine.dataGroup(2))
        #expect(result.activeAuthentication?.status == .valid)
    }

    @Test func withPACECAMChipAuthenticationIsNotRun() async throws {
        // PACE-CAM is preferred; the same key in DG14 also announces CA, which is then unnecessary.
        let doc = try Self.profile(["ecdh-p256-aes128"], pace: ["ecdh-cam-p256-aes128"])
        let result = try await Self.read(doc)
        #expect(result.paceMapping == .chipAuthentication)
        #expect(result.chipAuthentication == ChipAuthenticationResult(status: .valid, keyId: 12, mechanism: .paceCAM))
        #expect(result.verdict.verdict == .authentic)
    }

    @Test func tamperedDG14IsNotTrusted() async throws {
        let doc = try Self.profile(["ecdh-p256-aes128"])
        let result = try await Self.read(doc, Misbehaviour(tamperedDataGroup: 14))
        #expect(result.passiveAuthentication?.dataGroupHashes[14] == .invalid)
        #expect(result.chipAuthentication?.status != .valid)
        #expect(result.verdict.verdict == .notAuthentic && result.verdict.reasons.contains(.passiveAuthInvalid))
    }

    @Test func evidenceRecordsTheOnlineProof() async throws {
        let doc = try Self.profile(["ecdh-p256-aes128"])
        let read = try await Self.read(doc, evidence: true)
        let json = try #require(read.evidence).json
        #expect(json["chipAuthentication"]?["mechanism"] == "CA" && json["chipAuthentication"]?["proof"] == "online")
        let evidence = try DocumentEvidence(json: try JSONValue.parse(json.serialized()))
        let run = try #require(evidence.chipAuthenticationRun)
        #expect(run.keyId == 12 && run.algorithm.cipher == .aes128)
        let store = try doc.trustStore()
        let again = evidence.verify(trustStore: store)
        #expect(
            again.verdict == read.verdict && again.chip?.status == .valid
                && again.chip?.mechanism == .chipAuthentication)
        #expect(again.chip?.reason?.contains("online") == true)
        // The CLI's re-check says it is the reader's observation (issue #27).
        let printed = evidence.verificationJSON(trustStore: store)
        #expect(printed["chipAuthentication"]?["offline"] == "readerObserved")
        #expect(printed["offline"]?["readerObserved"] == ["chipAuthentication"])
        // A key that is not DG14's, a recorded failure, or no record at all.
        var forged = evidence
        var key = run.chipPublicKeyInfo
        key[key.count - 1] ^= 0x01
        forged.chipAuthenticationRun = ChipAuthenticationRun(
            algorithm: run.algorithm, keyId: run.keyId, chipPublicKeyInfo: key,
            terminalEphemeralPublicKey: run.terminalEphemeralPublicKey)
        #expect(forged.verify(trustStore: store).verdict.reasons == [.chipAuthInvalid])
        var failed = evidence
        failed.chipAuthenticationStatus = "invalid"
        #expect(failed.verify(trustStore: store).verdict.reasons == [.chipAuthInvalid])
        var none = evidence
        none.chipAuthenticationRun = nil
        none.chipAuthenticationStatus = nil
        #expect(none.verify(trustStore: store).verdict.reasons == [.chipAuthNotChecked])
    }
}
