import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import Testing

@testable import ICAO

/// EF.CardSecurity: issued by `CardSecurityBuilder`, parsed and verified with passive authentication's signer checks,
/// and cross-checked with `openssl cms -verify`.
@Suite struct CardSecurityTests {
    /// A PACE-CAM PACEInfo and an id-PK-ECDH key on brainpoolP256r1 (keyId 13).
    static func securityInfos() throws -> (set: [UInt8], publicKey: [UInt8]) {
        let key = try ECCurve.brainpoolP256r1.generateKeyPair()
        let pace = ax("3012060A04007F0007020204060202010202010D")
        let pk = LDSBuilder.chipAuthenticationPublicKeyInfo(parameterId: 13, publicKey: key.publicKey, keyId: 13)
        return (TLV.encode(tag: 0x31, value: pace + pk), key.publicKey)
    }

    @Test func validTamperedUnanchoredAndWrongContent() throws {
        let pki = try TestPKI.generate(country: "UTO")
        let infos = try Self.securityInfos()
        let bytes = try CardSecurityBuilder.build(securityInfos: infos.set, signer: pki.documentSignerKey)
        let parsed = try CardSecurity(parsing: bytes)
        #expect(parsed.securityInfos.paceInfos.map(\.protocolOID) == ["0.4.0.127.0.7.2.2.4.6.2"])
        #expect(parsed.securityInfos.chipAuthenticationPublicKeyInfos.first?.keyId == 13)
        #expect(parsed.signedData.content == infos.set)

        let ok = CardSecurity.verify(bytes, trustStore: pki.trustStore)
        #expect(ok.status == .valid && ok.check.signature == .valid && ok.check.certificateChain == .valid, "\(ok)")
        #expect(ok.json["status"]?.stringValue == "valid")

        var tampered = bytes
        tampered[tampered.count - 1] ^= 0x01  // the last byte of the signature
        let bad = CardSecurity.verify(tampered, trustStore: pki.trustStore)
        #expect(bad.status == .invalid && bad.check.signature == .invalid)
        #expect(bad.reason?.contains("EF.CardSecurity signature") == true)

        #expect(CardSecurity.verify(bytes, trustStore: nil).status == .unverified)
        let other = try TestPKI.generate(country: "ZZZ")
        #expect(CardSecurity.verify(bytes, trustStore: other.trustStore).status == .unverified)

        // EF.SOD's ContentInfo is signed by the same signer but is no EF.CardSecurity.
        let sod = try SODBuilder.build(dataGroups: [1: [0x61, 0x00]], signer: pki.documentSignerKey)
        let wrongType = CardSecurity.verify(try TLV.parse(sod).value, trustStore: pki.trustStore)
        #expect(wrongType.status == .invalid && wrongType.reason?.contains("id-SecurityObject") == true)
        #expect(CardSecurity.verify([0x30, 0x00], trustStore: pki.trustStore).status == .invalid)
        #expect(CardSecurityResult.notPresent.json == ["status": "notPresent"])
    }

    /// OpenSSL verifies the CMS signature and chain and extracts the same SecurityInfos.
    @Test func opensslVerifiesCardSecurity() async throws {
        let pki = try TestPKI.generate(country: "UTO")
        let infos = try Self.securityInfos()
        let bytes = try CardSecurityBuilder.build(securityInfos: infos.set, signer: pki.documentSignerKey)
        let dir = try OpenSSLCLI.tempDirectory()
        _ = try pki.write(to: dir.path)
        try OpenSSLCLI.write(bytes, "cs.der", in: dir)
        let content = try await OpenSSLCLI.run(
            [
                "cms", "-verify", "-inform", "DER", "-in", "cs.der", "-CAfile", "csca.pem",
                "-purpose", "any", "-binary",
            ], in: dir)
        #expect(content == infos.set)
    }
}
