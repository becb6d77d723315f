import APDU
import CryptoPrimitives
import Emulation
import TesseraCore
import Testing

@testable import Documents
@testable import ICAO

/// EF.CardSecurity in the verdict and as the source of the PACE-CAM key.
@Suite struct CardSecurityCheckTests {
    static let curve = ECCurve.brainpoolP256r1

    static func cardSecurity(publicKey: [UInt8], pki: TestPKI) throws -> [UInt8] {
        let info = LDSBuilder.chipAuthenticationPublicKeyInfo(parameterId: 13, publicKey: publicKey, keyId: 13)
        return try CardSecurityBuilder.build(
            securityInfos: TLV.encode(tag: 0x31, value: info), signer: pki.documentSignerKey)
    }

    static func dg14(publicKey: [UInt8]) -> [UInt8] {
        LDSBuilder.dg14(
            securityInfos: TLV.encode(
                tag: 0x31,
                value: LDSBuilder.chipAuthenticationPublicKeyInfo(
                    parameterId: 13, publicKey: publicKey, keyId: 13)))
    }

    /// What a chip holding `key` sends in PACE-CAM: PK_Map,IC = CA_IC · PK_IC.
    static func camData(for publicKey: [UInt8]) throws -> PACEChipAuthenticationData {
        let ca = try curve.generateKeyPair().privateKey
        return PACEChipAuthenticationData(
            domain: .ec(curve), chipMappingPublicKey: try curve.multiply(point: publicKey, scalar: ca),
            chipAuthenticationData: ca)
    }

    @Test func pairingKeyComesFromCardSecurityBeforeDG14() throws {
        let pki = try TestPKI.generate(country: "UTO")
        let chipKey = try Self.curve.generateKeyPair().publicKey
        let otherKey = try Self.curve.generateKeyPair().publicKey
        let cam = try Self.camData(for: chipKey)
        let passive = PassiveAuthenticationResult(
            status: .valid, signature: .valid, certificateChain: .valid,
            certificateValidity: .valid, dataGroupHashes: [14: .valid])
        let cs = try Self.cardSecurity(publicKey: chipKey, pki: pki)
        let csResult = CardSecurity.verify(cs, trustStore: pki.trustStore)
        // DG14 names another key: only EF.CardSecurity's key makes the proof valid.
        let fromCardSecurity = DocumentService.checkChipAuthenticationMapping(
            cam, cardSecurity: cs, cardSecurityResult: csResult, dg14: Self.dg14(publicKey: otherKey), passive: passive)
        #expect(fromCardSecurity.status == .valid && fromCardSecurity.keyId == 13)
        #expect(
            DocumentService.checkChipAuthenticationMapping(cam, dg14: Self.dg14(publicKey: otherKey), passive: passive)
                .status == .invalid)
        // Without EF.CardSecurity, DG14 decides.
        #expect(
            DocumentService.checkChipAuthenticationMapping(
                cam, cardSecurity: nil, cardSecurityResult: nil, dg14: Self.dg14(publicKey: chipKey), passive: passive
            ).status == .valid)
        // A badly signed EF.CardSecurity cannot vouch for the key.
        var tampered = cs
        tampered[tampered.count - 1] ^= 0x01
        let forged = DocumentService.checkChipAuthenticationMapping(
            cam, cardSecurity: tampered, cardSecurityResult: CardSecurity.verify(tampered, trustStore: pki.trustStore),
            dg14: Self.dg14(publicKey: chipKey), passive: passive)
        #expect(forged.status == .invalid)
    }

    @Test func invalidCardSecurityMakesTheDocumentNotAuthentic() {
        let passive = PassiveAuthenticationResult(
            status: .valid, signature: .valid, certificateChain: .valid,
            certificateValidity: .valid, dataGroupHashes: [1: .valid])
        let base = DocumentVerdict.evaluate(
            passive: passive, activeRequired: false, active: nil, chipRequired: true,
            chip: ChipAuthenticationResult(status: .valid), allowClonable: false)
        #expect(base.verdict == .authentic)
        var valid = base
        valid.include(cardSecurity: CardSecurityResult(status: .valid, check: passive))
        #expect(valid == base)
        var absent = base
        absent.include(cardSecurity: .notPresent)
        #expect(absent == base)
        var invalid = base
        invalid.include(cardSecurity: CardSecurityResult(status: .invalid, check: passive, reason: "bad signature"))
        #expect(invalid.verdict == .notAuthentic && invalid.reasons == [.cardSecurityInvalid])
        #expect(DocumentVerdict.Reason.cardSecurityInvalid.isFailure)
    }

    @Test func camReadChecksCardSecurityAndKeepsItInTheEvidence() async throws {
        let doc = try makeProfile(bac: false, pace: ["ecdh-cam-brainpoolp256r1-aes128"])
        #expect(doc.cardSecurity != nil)
        var request = DocumentReadRequest(key: DocumentServiceTests.key)
        request.evidence = true
        let good = try await DocumentServiceTests.service(doc).read(request)
        #expect(good.cardSecurity?.status == .valid && good.verdict.verdict == .authentic)
        #expect(good.json["cardSecurity"]?["status"] == "valid")
        let evidence = try #require(good.evidence)
        #expect(evidence.cardSecurity == doc.cardSecurity)
        let reparsed = try DocumentEvidence(json: evidence.json)
        let store = try doc.trustStore()
        #expect(reparsed.verify(trustStore: store).verdict.verdict == .authentic)
        var forged = reparsed
        var forgedBytes = try #require(reparsed.cardSecurity)
        forgedBytes[forgedBytes.count - 1] ^= 0x01
        forged.cardSecurity = forgedBytes
        let forgedCheck = forged.verify(trustStore: store)
        #expect(
            forgedCheck.verdict.verdict == .notAuthentic && forgedCheck.verdict.reasons.contains(.cardSecurityInvalid))

        var misbehaviour = Misbehaviour()
        misbehaviour.tamperedCardSecurity = true
        let bad = try await DocumentServiceTests.service(doc, misbehaviour: misbehaviour).read(request)
        #expect(bad.cardSecurity?.status == .invalid)
        #expect(bad.verdict.verdict == .notAuthentic && bad.verdict.reasons.contains(.cardSecurityInvalid))
        #expect(bad.chipAuthentication?.status == .invalid)

        let gmProfile = try makeProfile()
        let gm = try await DocumentServiceTests.service(gmProfile).read(request)
        #expect(gm.accessProtocol == .pace && gm.cardSecurity?.status == .notPresent)
    }
}
