import APDU
import Documents
import Emulation
import FoundationEssentials
import ICAO
import MRZ
import TesseraCore
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// DocumentService over in-memory readers holding the emulated chip (real BAC/PACE/SM/PA/AA code on both sides).
@Suite struct DocumentServiceTests {
    static let key = DocumentAccessKey.mrz(mrzInformation: "L898902C3674081221204159")

    static func service(
        _ profile: DocumentProfile, trusted: Bool = true, misbehaviour: Misbehaviour = .init(),
        extended: Bool = false, removeAfter: Int? = nil
    ) throws -> DocumentService {
        let source = MemoryReaderSource(slots: [
            ("empty reader", nil),
            (
                "reader 1",
                {
                    EmulatedSession(
                        card: EmulatedPassport(profile: profile, misbehaviour: misbehaviour),
                        supportsExtendedLength: extended, removeAfter: removeAfter)
                }
            ),
        ])
        return DocumentService(sources: [source], trustStore: trusted ? try profile.trustStore() : nil)
    }

    static func size(_ profile: DocumentProfile, _ file: LDSFile) -> Int {
        profile.applicationFiles[file.fileID]?.count ?? 0
    }

    @Test func bacReadVerifiesAndReportsTheContract() async throws {
        let doc = try makeProfile(pace: [])
        let result = try await Self.service(doc).read(DocumentReadRequest(key: Self.key))
        #expect(result.accessProtocol == .bac)
        #expect(result.reader == "reader 1")
        #expect(result.mrz?.primaryIdentifier == "ERIKSSON")
        #expect(result.mrz?.documentNumber == "L898902C3")
        let face = try #require(result.faceImages.first)
        #expect(face.data.starts(with: [0xFF, 0xD8]) && (face.width ?? 0) > 0)
        #expect(try DG2(parsing: doc.dataGroup(2)!).faces.first?.image == face)
        // Every group the SOD lists is read (DG11 and DG12 too); the result shows the requested ones.
        #expect(Set(result.files.keys) == [.com, .dataGroup(1), .dataGroup(2), .dataGroup(11), .dataGroup(12), .sod])
        #expect(result.passiveAuthentication?.status == .valid)
        #expect(result.activeAuthentication == nil)
        // BAC only, no DG15: nothing proves the chip is not a copy.
        #expect(
            result.verdict
                == DocumentVerdict(
                    verdict: .unverified, chipAuthenticity: .notSupported,
                    reasons: [.chipAuthNotSupported]))

        let json = result.json
        #expect(json["accessProtocol"] == "BAC")
        #expect(json["mrz"]?["dateOfBirth"] == "740812")
        #expect(json["mrz"]?["dateOfExpiry"] == "120415")
        #expect(json["mrz"]?["sex"] == "F")
        #expect(json["dataGroups"]?["DG1"]?.stringValue.flatMap(Base64URL.decode) == doc.dataGroup(1))
        #expect(json["dataGroups"]?["SOD"] != nil)
        #expect(json["faceImages"]?.arrayValue?.first?["mimeType"] == "image/jpeg")
        #expect(json["passiveAuthentication"]?["status"] == "valid")
        #expect(json["passiveAuthentication"]?["signature"] == "valid")
        #expect(json["passiveAuthentication"]?["certificateChain"] == "valid")
        #expect(
            json["passiveAuthentication"]?["dataGroupHashes"] == [
                "DG1": "valid", "DG2": "valid", "DG11": "valid", "DG12": "valid",
            ])
        #expect(json["activeAuthentication"] == nil)
        #expect(json["dataGroups"]?.objectValue.map { Set($0.keys) } == ["COM", "DG1", "DG2", "SOD"])
        #expect(json["verdict"] == "unverified" && json["chipAuthenticity"] == "notSupported")
        #expect(json["reasons"] == ["CHIP_AUTH_NOT_SUPPORTED"])
        #expect((json["stats"]?["apdus"]?.intValue ?? 0) > 0)
    }

    @Test(arguments: [
        "ecdh-gm-p256-aes128", "ecdh-gm-brainpoolp256r1-aes128", "ecdh-gm-p256-aes256", "dh-gm-2048-aes128",
    ])
    func paceWithMRZAndCAN(option: String) async throws {
        let doc = try makeProfile(bac: false, pace: [option])
        let service = try Self.service(doc)
        let byMRZ = try await service.read(DocumentReadRequest(key: Self.key))
        #expect(byMRZ.accessProtocol == .pace)
        #expect(byMRZ.passiveAuthentication?.status == .valid)
        let byCAN = try await service.read(DocumentReadRequest(key: try DocumentAccessKey(can: "123456")))
        #expect(byCAN.accessProtocol == .pace)
        #expect(byCAN.mrz?.secondaryIdentifier == "ANNA MARIA")
    }

    @Test func statisticsAndProgress() async throws {
        let doc = try makeProfile(photoPadding: 5000)
        let events = EventLog<DocumentReadProgress>()
        let result = try await Self.service(doc).read(DocumentReadRequest(key: Self.key)) { events.append($0) }
        let steps = events.all.map(\.step)
        #expect(steps.first == .connect)
        #expect(steps.contains(.access))
        #expect(steps.last == .verify)
        let dg2 = events.all.filter { $0.file == "DG2" }
        let total = doc.dataGroup(2)!.count
        #expect(dg2.last?.bytesRead == total && dg2.last?.totalBytes == total)
        #expect(dg2.count > 10)
        // The minimum for 0xDF chunks is ceil(size / 0xDF) per file; the reader needs no more.
        let sizes = ([LDSFile.com, .sod] + doc.dataGroupNumbers.map { LDSFile.dataGroup($0) }).map {
            Self.size(doc, $0)
        }
        let minimum = sizes.reduce(0) { $0 + ($1 + 0xDE) / 0xDF }
        #expect(result.statistics.readAPDUs == minimum)
        #expect(result.statistics.fileBytes == sizes.reduce(0, +))
        #expect(result.statistics.bytes > result.statistics.fileBytes)
        #expect(result.statistics.apdus > result.statistics.readAPDUs)
        #expect(result.statistics.durationMs > 0)
    }

    @Test func extendedLengthNeedsFewerAPDUs() async throws {
        let doc = try makeProfile(photoPadding: 20_000)
        let short = try await Self.service(doc, extended: true).read(DocumentReadRequest(key: Self.key))
        let extended = try await Self.service(doc, extended: true)
            .read(DocumentReadRequest(key: Self.key, extendedLength: true))
        #expect(extended.files == short.files)
        // EF.COM, EF.SOD and the listed DG1, DG2, DG11, DG12, DG14: one READ BINARY each.
        #expect(extended.statistics.readAPDUs == 7)
        #expect(short.statistics.readAPDUs > 90)
    }

    @Test func tamperedDataGroupIsInvalid() async throws {
        let doc = try makeProfile()
        let result = try await Self.service(doc, misbehaviour: Misbehaviour(tamperedDataGroup: 2)).read(
            DocumentReadRequest(key: Self.key))
        let pa = try #require(result.passiveAuthentication)
        #expect(pa.status == .invalid)
        #expect(pa.dataGroupHashes[2] == .invalid)
        #expect(pa.dataGroupHashes[1] == .valid)
        #expect(pa.signature == .valid)
        #expect(result.json["passiveAuthentication"]?["dataGroupHashes"]?["DG2"] == "invalid")
    }

    @Test func withoutTrustAnchorsTheDocumentIsUnverified() async throws {
        let doc = try makeProfile()
        let result = try await Self.service(doc, trusted: false).read(DocumentReadRequest(key: Self.key))
        #expect(result.passiveAuthentication?.status == .unverified)
        #expect(result.passiveAuthentication?.certificateChain == .noTrustAnchor)
        #expect(result.passiveAuthentication?.signature == .valid)
        #expect(result.json["passiveAuthentication"]?["reason"]?.stringValue?.isEmpty == false)
    }

    @Test func activeAuthenticationRunsWhenDG15Exists() async throws {
        let doc = try makeProfile(activeAuthentication: true)
        let result = try await Self.service(doc).read(DocumentReadRequest(key: Self.key))
        #expect(result.activeAuthentication?.status == .valid)
        #expect(result.files[.dataGroup(15)] != nil)
        #expect(result.passiveAuthentication?.dataGroupHashes[15] == .valid)
        #expect(result.json["activeAuthentication"]?["status"] == "valid")
        // Without verification neither EF.SOD nor DG15 is read.
        let plain = try await Self.service(doc).read(DocumentReadRequest(key: Self.key, verify: false))
        #expect(plain.activeAuthentication == nil && plain.passiveAuthentication == nil)
        #expect(Set(plain.files.keys) == [.com, .dataGroup(1), .dataGroup(2)])
        #expect(plain.json["passiveAuthentication"]?["status"] == "unverified")
    }

    @Test func requestedDataGroupsOnly() async throws {
        let doc = try makeProfile(pace: [])
        let result = try await Self.service(doc).read(DocumentReadRequest(key: Self.key, dataGroups: [1, 11, 13]))
        // DG2 and DG12 are read and hash-checked because the SOD lists them, but not returned.
        #expect(Set(result.files.keys) == [.com, .dataGroup(1), .dataGroup(2), .dataGroup(11), .dataGroup(12), .sod])
        #expect(result.notPresent == [13])
        #expect(result.faceImages.isEmpty)
        #expect(result.passiveAuthentication?.dataGroupHashes[2] == .valid)
        #expect(result.json["passiveAuthentication"]?["notRead"] == [])
        #expect(result.json["dataGroups"]?.objectValue.map { Set($0.keys) } == ["COM", "DG1", "DG11", "SOD"])
        await #expect(throws: TesseraError.self) {
            _ = try await Self.service(doc).read(DocumentReadRequest(key: Self.key, dataGroups: [17]))
        }
    }

    @Test func wrongKeysAreAccessDenied() async throws {
        for pace in [[], ["ecdh-gm-p256-aes128"]] {
            let doc = try makeProfile(pace: pace)
            let wrong = try DocumentAccessKey.fromFields(
                documentNumber: "L898902C3", dateOfBirth: "740813", dateOfExpiry: "120415")
            let service = try Self.service(doc)
            do {
                _ = try await service.read(DocumentReadRequest(key: wrong))
                Issue.record("expected ACCESS_DENIED")
            } catch { #expect(error.code == .accessDenied) }
        }
    }

    @Test func readerSelectionErrors() async throws {
        let doc = try makeProfile()
        let service = try Self.service(doc)
        #expect(try await service.readers().map(\.cardPresent) == [false, true])
        for (reader, code) in [("empty reader", TesseraError.Code.noCard), ("nowhere", .noReader)] {
            do {
                _ = try await service.read(DocumentReadRequest(reader: reader, key: Self.key))
                Issue.record("expected \(code)")
            } catch { #expect(error.code == code) }
        }
        let none = DocumentService(sources: [MemoryReaderSource(slots: [("empty", nil)])], trustStore: nil)
        do {
            _ = try await none.read(DocumentReadRequest(key: Self.key))
            Issue.record("expected NO_CARD")
        } catch { #expect(error.code == .noCard) }
    }

    @Test func cardRemovedMidReadThenNextReadWorks() async throws {
        let doc = try makeProfile(photoPadding: 8000)
        let failing = try Self.service(doc, removeAfter: 30)
        do {
            _ = try await failing.read(DocumentReadRequest(key: Self.key))
            Issue.record("expected CARD_REMOVED")
        } catch { #expect(error.code == .cardRemoved) }
        #expect(
            try await Self.service(doc).read(DocumentReadRequest(key: Self.key)).passiveAuthentication?.status == .valid
        )
    }
}

/// documents.read through an emulated chip offering PACE-CAM: DG14 is read and the chip authenticated.
@Suite struct DocumentServiceCAMTests {
    @Test func camReadReportsChipAuthentication() async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-cam-brainpoolp256r1-aes128"])
        let result = try await DocumentServiceTests.service(doc).read(
            DocumentReadRequest(key: DocumentServiceTests.key))
        #expect(result.accessProtocol == .pace && result.paceMapping == .chipAuthentication)
        // DG14 was not requested but is read to check CAM.
        #expect(result.files[.dataGroup(14)] == doc.dataGroup(14))
        #expect(result.passiveAuthentication?.status == .valid)
        #expect(result.passiveAuthentication?.dataGroupHashes[14] == .valid)
        #expect(result.chipAuthentication == ChipAuthenticationResult(status: .valid, keyId: 13))
        let json = result.json
        #expect(json["paceMapping"] == "CAM")
        #expect(json["chipAuthentication"] == ["status": "valid", "keyId": 13, "mechanism": "PACE-CAM"])
    }

    @Test func tamperedCAMOrDG14IsInvalid() async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-cam-p256-aes128"])
        let request = DocumentReadRequest(key: DocumentServiceTests.key)
        let tampered = try await DocumentServiceTests.service(
            doc, misbehaviour: Misbehaviour(tamperedChipAuthenticationData: true)
        )
        .read(request)
        #expect(tampered.chipAuthentication?.status == .invalid)
        #expect(tampered.json["chipAuthentication"]?["status"] == "invalid")
        #expect(tampered.json["chipAuthentication"]?["reason"] != nil)
        let wrongKey = try await DocumentServiceTests.service(
            doc, misbehaviour: Misbehaviour(wrongChipAuthenticationKey: true)
        )
        .read(request)
        #expect(wrongKey.chipAuthentication?.status == .invalid)
        // Without EF.CardSecurity the key comes from DG14: a DG14 that no longer matches EF.SOD is not trusted even
        // though its key still fits.
        var withoutCardSecurity = doc
        withoutCardSecurity.cardSecurity = nil
        let badDG14 = try await DocumentServiceTests.service(
            withoutCardSecurity, misbehaviour: Misbehaviour(tamperedDataGroup: 14)
        )
        .read(request)
        #expect(badDG14.passiveAuthentication?.dataGroupHashes[14] == .invalid)
        #expect(badDG14.chipAuthentication?.status == .invalid)
        #expect(badDG14.cardSecurity?.status == .notPresent)
        // With it (where real chips keep the key) the chip still proves its key, and the tampered DG14 fails passive
        // authentication: the document is not authentic either way.
        let withCardSecurity = try await DocumentServiceTests.service(
            doc, misbehaviour: Misbehaviour(tamperedDataGroup: 14)
        ).read(request)
        #expect(withCardSecurity.cardSecurity?.status == .valid)
        #expect(withCardSecurity.chipAuthentication?.status == .valid)
        #expect(withCardSecurity.verdict.verdict == .notAuthentic)
    }

    @Test func withoutVerificationOrWithGMNothingIsChecked() async throws {
        let cam = try makeProfile(bac: false, pace: ["ecdh-cam-p256-aes128"])
        var request = DocumentReadRequest(key: DocumentServiceTests.key)
        request.verify = false
        let unverified = try await DocumentServiceTests.service(cam).read(request)
        #expect(unverified.chipAuthentication?.status == .notChecked)
        #expect(unverified.files[.dataGroup(14)] == nil)
        let gm = try makeProfile(bac: false, pace: ["ecdh-gm-p256-aes128"])
        let plain = try await DocumentServiceTests.service(gm).read(DocumentReadRequest(key: DocumentServiceTests.key))
        #expect(plain.paceMapping == .generic && plain.chipAuthentication == nil)
        #expect(plain.json["chipAuthentication"] == nil && plain.json["paceMapping"] == "GM")
    }
}

/// Chips that copy a genuine document's data but not its private keys (Misbehaviour clones): each must be
/// `notAuthentic`, while the genuine chips are `authentic`.
@Suite struct DocumentServiceCloneTests {
    static func read(
        _ doc: DocumentProfile, _ misbehaviour: Misbehaviour = .init(),
        allowClonable: Bool = false
    ) async throws -> DocumentReadResult {
        try await DocumentServiceTests.service(doc, misbehaviour: misbehaviour)
            .read(DocumentReadRequest(key: DocumentServiceTests.key, allowClonable: allowClonable))
    }

    @Test func genuineChipsAreAuthentic() async throws {
        let aa = try await Self.read(try makeProfile(activeAuthentication: true))
        #expect(aa.verdict == DocumentVerdict(verdict: .authentic, chipAuthenticity: .valid, reasons: []))
        #expect(aa.json["verdict"] == "authentic" && aa.json["reasons"] == [] && aa.json["chipAuthenticity"] == "valid")
        let cam = try await Self.read(try makeProfile(bac: false, pace: ["ecdh-cam-p256-aes128"]))
        #expect(cam.verdict == DocumentVerdict(verdict: .authentic, chipAuthenticity: .valid, reasons: []))
    }

    /// Evidence carries the caller's AA challenge and re-checks offline to the same verdict; any flipped byte
    /// (data group, AA signature) or a removed DG15 makes it notAuthentic.
    @Test func evidenceRoundTripsAndTamperingIsNotAuthentic() async throws {
        let doc = try makeProfile(activeAuthentication: true)
        var request = DocumentReadRequest(key: DocumentServiceTests.key)
        request.evidence = true
        request.aaChallenge = [1, 2, 3, 4, 5, 6, 7, 8]
        let read = try await DocumentServiceTests.service(doc).read(request)
        #expect(read.verdict.verdict == .authentic)
        let evidence = try #require(read.evidence)
        #expect(evidence.aaChallenge == [1, 2, 3, 4, 5, 6, 7, 8] && evidence.aaSignature?.isEmpty == false)
        #expect(read.json["evidence"] == evidence.json)
        let parsed = try DocumentEvidence(json: try JSONValue.parse(read.json.serialized()))
        #expect(parsed == (try DocumentEvidence(json: evidence.json)))
        let store = try doc.trustStore()
        #expect(parsed.verify(trustStore: store).verdict == read.verdict)
        #expect(parsed.verify(trustStore: nil).verdict.reasons == [.noTrustAnchor])

        var dg1 = parsed
        dg1.dataGroups[1]![10] ^= 0x01
        #expect(dg1.verify(trustStore: store).verdict.reasons == [.passiveAuthInvalid])
        var signature = parsed
        signature.aaSignature![3] ^= 0x01
        #expect(signature.verify(trustStore: store).verdict.reasons == [.activeAuthInvalid])
        var challenge = parsed
        challenge.aaChallenge = [8, 7, 6, 5, 4, 3, 2, 1]
        #expect(challenge.verify(trustStore: store).verdict.verdict == .notAuthentic)
        var noDG15 = parsed
        noDG15.dataGroups[15] = nil
        #expect(noDG15.verify(trustStore: store).verdict.reasons == [.activeAuthInvalid])
    }

    /// PACE-CAM evidence (PK_Map,IC and CA_IC) re-checks against DG14 offline; a changed CA_IC is a clone.
    @Test func camEvidenceIsReChecked() async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-cam-p256-aes128"])
        var request = DocumentReadRequest(key: DocumentServiceTests.key)
        request.evidence = true
        let read = try await DocumentServiceTests.service(doc).read(request)
        #expect(read.verdict.verdict == .authentic)
        let evidence = try DocumentEvidence(json: try JSONValue.parse(try #require(read.evidence).json.serialized()))
        #expect(evidence.chipAuthenticationData != nil)
        let store = try doc.trustStore()
        let again = evidence.verify(trustStore: store)
        #expect(again.verdict == read.verdict && again.chip?.status == .valid)
        var forged = evidence
        let ca = try #require(forged.chipAuthenticationData)
        var caIC = try #require(ca.chipAuthenticationData)
        caIC[caIC.count - 1] ^= 0x01
        forged.chipAuthenticationData = PACEChipAuthenticationData(
            domain: ca.domain, chipMappingPublicKey: ca.chipMappingPublicKey,
            chipAuthenticationData: caIC)
        #expect(forged.verify(trustStore: store).verdict.reasons == [.chipAuthInvalid])
        var withoutCAM = evidence
        withoutCAM.chipAuthenticationData = nil
        #expect(withoutCAM.verify(trustStore: store).verdict.reasons == [.chipAuthNotChecked])
    }

    /// reloadTrust swaps the whole set or nothing: a missing file leaves the old anchors in force.
    @Test func trustReloadIsAtomic() async throws {
        let doc = try makeProfile(activeAuthentication: true)
        let dir = Scratch.directory("trust-reload")
        let anchor = FilePaths.join(dir, "csca.pem")
        try FileManager.default.copyItem(atPath: doc.cscaPath, toPath: anchor)
        let sources = TrustSources(cscaPaths: [anchor])
        let service = DocumentService(
            sources: [], trustStore: try DocumentService.trustStore(paths: [anchor]), trustSources: sources)
        #expect(service.trustStatus()["anchorCount"] == 1)
        try FileManager.default.removeItem(atPath: anchor)
        await #expect(throws: TesseraError.self) { try await service.reloadTrust() }
        #expect(service.trustStore?.certificates.count == 1)
        try Data("junk".utf8).write(to: URL(fileURLWithPath: anchor))
        do { try await service.reloadTrust(); Issue.record("junk loaded") } catch {
            #expect(error.message.contains(anchor))
        }
        #expect(service.trustStore?.certificates.count == 1)
        try FileManager.default.removeItem(atPath: anchor)
        try FileManager.default.copyItem(atPath: doc.cscaPath, toPath: anchor)
        try await service.reloadTrust()
        let anchors = service.trustStatus()["anchors"]?.arrayValue?.first?["certificates"]?.arrayValue
        #expect(anchors?.first?["source"] == .string(anchor))
    }

    @Test func dg15DroppedFromEFCOMStillRunsActiveAuthentication() async throws {
        let doc = try makeProfile(activeAuthentication: true)
        let clone = try await Self.read(
            doc, Misbehaviour(dataGroupsHiddenFromCOM: [15], withoutActiveAuthenticationKey: true))
        #expect(try EFCOM(parsing: clone.files[.com]!).dataGroups.contains(15) == false)
        #expect(clone.files[.dataGroup(15)] == doc.dataGroup(15))
        #expect(clone.passiveAuthentication?.status == .valid)
        #expect(clone.activeAuthentication?.status == .invalid)
        #expect(
            clone.verdict
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.activeAuthInvalid]))
    }

    @Test func dg15AnsweringFileNotFoundIsMissing() async throws {
        let doc = try makeProfile(activeAuthentication: true)
        let clone = try await Self.read(
            doc,
            Misbehaviour(
                dataGroupsHiddenFromCOM: [15], missingDataGroups: [15],
                withoutActiveAuthenticationKey: true))
        let pa = try #require(clone.passiveAuthentication)
        #expect(pa.status == .invalid && pa.missingDataGroups == [15] && pa.dataGroupHashes[15] == .missing)
        #expect(clone.json["passiveAuthentication"]?["missingDataGroups"] == [15])
        #expect(clone.activeAuthentication?.status == .invalid)
        #expect(clone.verdict.verdict == .notAuthentic)
        #expect(clone.verdict.reasons == [.dataGroupMissing, .activeAuthInvalid])
        // Any other listed group too (here DG11, not requested).
        let noDG11 = try await Self.read(doc, Misbehaviour(missingDataGroups: [11]))
        #expect(noDG11.passiveAuthentication?.missingDataGroups == [11])
        #expect(noDG11.verdict.reasons == [.dataGroupMissing])
    }

    @Test func wrongActiveAuthenticationKeyIsNotAuthentic() async throws {
        let clone = try await Self.read(
            try makeProfile(activeAuthentication: true), Misbehaviour(wrongActiveAuthenticationKey: true))
        #expect(clone.activeAuthentication?.status == .invalid)
        #expect(
            clone.verdict
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.activeAuthInvalid]))
    }

    @Test func cardAccessHidingCAMStillRunsIt() async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-gm-p256-aes128", "ecdh-cam-p256-aes128"])
        let clone = try await Self.read(doc, Misbehaviour(hiddenChipAuthenticationMapping: true))
        #expect(clone.paceMapping == .generic)
        #expect(clone.passiveAuthentication?.status == .valid)
        #expect(clone.chipAuthentication?.status == .invalid)
        #expect(
            clone.verdict
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.chipAuthInvalid]))
    }

    @Test func bacOnlyChipWithoutDG15IsClonable() async throws {
        let doc = try makeProfile(pace: [])
        let plain = try await Self.read(doc)
        #expect(
            plain.verdict
                == DocumentVerdict(
                    verdict: .unverified, chipAuthenticity: .notSupported, reasons: [.chipAuthNotSupported]))
        let allowed = try await Self.read(doc, allowClonable: true)
        #expect(
            allowed.verdict
                == DocumentVerdict(
                    verdict: .authentic, chipAuthenticity: .notSupported, reasons: [.chipAuthNotSupported]))
        // allowClonable never excuses a failed check.
        let tampered = try await Self.read(doc, Misbehaviour(tamperedDataGroup: 1), allowClonable: true)
        #expect(tampered.verdict.verdict == .notAuthentic && tampered.verdict.reasons.contains(.passiveAuthInvalid))
    }
}
