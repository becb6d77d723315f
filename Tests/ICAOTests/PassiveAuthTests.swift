import APDU
import CryptoPrimitives
import FoundationEssentials
import MRZ
import TesseraCore
import Testing
import X509Support

@testable import ICAO

/// DG1, DG2 and DG15 of a specimen document.
private func specimenDataGroups() throws -> [Int: [UInt8]] {
    let aaKey = try Signatures.generateKey(.ec(curve: "prime256v1"))
    return [
        1: try LDSBuilder.dg1(mrz: ldsSpecimenMRZ),
        2: try LDSBuilder.dg2(image: ldsTestJPEG, width: 3, height: 2),
        15: LDSBuilder.dg15(publicKeyInfo: aaKey.publicKeyDER),
    ]
}

/// An LDSSecurityObject v0 with SHA-256 hashes, assembled independently of SODBuilder.
private func handBuiltLDSSecurityObject(_ groups: [Int: [UInt8]]) throws -> [UInt8] {
    let entries = try groups.keys.sorted().map { n in
        ASN1.seq([ASN1.int(n), ASN1.octets(try Signatures.digest(.sha256, groups[n]!))])
    }
    return ASN1.seq([ASN1.int(0), ASN1.seq([ASN1.oid("2.16.840.1.101.3.4.2.1")]), ASN1.seq(entries)])
}

@Suite struct PassiveAuthIssuanceTests {
    @Test(arguments: TestKeyAlgorithm.allCases)
    func issuedSODVerifies(algorithm: TestKeyAlgorithm) throws {
        let pki = try TestPKI.generate(country: "UTO", algorithm: algorithm)
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        #expect(sod.first == 0x77)
        let so = try SecurityObject(parsing: sod)
        #expect(so.hashAlgorithm == .sha256)
        #expect(Set(so.dataGroupHashes.keys) == [1, 2, 15])
        #expect(so.documentSignerCertificate == pki.documentSigner.certificate)

        let result = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: pki.trustStore)
        #expect(result.status == .valid, "\(result.reason ?? "")")
        #expect(result.signature == .valid)
        #expect(result.certificateChain == .valid)
        #expect(result.certificateValidity == .valid)
        #expect(result.dataGroupHashes == [1: .valid, 2: .valid, 15: .valid])
        #expect(result.json["dataGroupHashes"]?["DG1"] == "valid")
        #expect(result.json["status"] == "valid")
        #expect(result.json["certificateChain"] == "valid")

        // A tampered data group.
        var tampered = groups
        tampered[1]![10] ^= 0x01
        let bad = PassiveAuthentication.verify(sod: sod, dataGroups: tampered, trustStore: pki.trustStore)
        #expect(bad.status == .invalid)
        #expect(bad.dataGroupHashes[1] == .invalid)
        #expect(bad.dataGroupHashes[2] == .valid)
        #expect(bad.signature == .valid)
        #expect(bad.json["dataGroupHashes"]?["DG1"] == "invalid")
    }

    @Test func tamperedSignatureAndContent() throws {
        let pki = try TestPKI.generate(algorithm: .rsa2048)
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        // The signature is the last 256 bytes of the file.
        var badSig = sod
        badSig[badSig.count - 5] ^= 0x40
        let r1 = PassiveAuthentication.verify(sod: badSig, dataGroups: groups, trustStore: pki.trustStore)
        #expect(r1.signature == .invalid)
        #expect(r1.status == .invalid)
        // A hash inside the eContent: message digest no longer matches.
        let hash = try Signatures.digest(.sha256, groups[2]!)
        var badContent = sod
        let at = try #require(badContent.firstRange(of: hash)?.lowerBound)
        badContent[at] ^= 0x01
        let r2 = PassiveAuthentication.verify(sod: badContent, dataGroups: groups, trustStore: pki.trustStore)
        #expect(r2.signature == .invalid)
        #expect(r2.reason?.contains("message-digest") == true)
    }

    @Test func trustAnchorProblems() throws {
        let pki = try TestPKI.generate(country: "UTO")
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)

        let none = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: nil)
        #expect(none.status == .unverified)
        #expect(none.certificateChain == .noTrustAnchor)
        #expect(none.signature == .valid)

        let otherCountry = try TestPKI.generate(country: "ZZZ")
        let wrong = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: otherCountry.trustStore)
        #expect(wrong.status == .unverified)
        #expect(wrong.certificateChain == .noTrustAnchor)
        #expect(wrong.json["status"] == "unverified")

        // Same CSCA name, another key: not the anchor of this document.
        let sameName = try TestPKI.generate(country: "UTO")
        let rollover = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: sameName.trustStore)
        #expect(rollover.certificateChain == .noTrustAnchor)
        #expect(rollover.status == .unverified)

        // Unverified must not hide a bad hash.
        var tampered = groups
        tampered[2]![40] ^= 0xFF
        #expect(PassiveAuthentication.verify(sod: sod, dataGroups: tampered, trustStore: nil).status == .invalid)
    }

    @Test func expiredDocumentSignerIsReportedNotFatal() throws {
        let tenYearsAgo = Date(timeIntervalSinceNow: -10 * 365 * 86_400)
        let pki = try TestPKI.generate(notBefore: tenYearsAgo, documentSignerValidityDays: 365)
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey, signingTime: tenYearsAgo)
        let lenient = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: pki.trustStore)
        #expect(lenient.status == .valid)
        #expect(lenient.certificateValidity == .expired)
        #expect(lenient.reason?.contains("expired") == true)
        let strict = PassiveAuthentication.verify(
            sod: sod, dataGroups: groups, trustStore: pki.trustStore,
            options: .init(enforceValidityPeriod: true))
        #expect(strict.status == .invalid)
        #expect(strict.certificateChain == .invalid)
        let then = PassiveAuthentication.verify(
            sod: sod, dataGroups: groups, trustStore: pki.trustStore,
            options: .init(
                referenceDate: tenYearsAgo.addingTimeInterval(86_400),
                enforceValidityPeriod: true))
        #expect(then.status == .valid)
    }

    @Test func dataGroupsOutsideTheSODAndMissingOnes() throws {
        let pki = try TestPKI.generate()
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        var read = groups
        read[15] = nil
        read[11] = LDSBuilder.dg11(DG11())
        let r = PassiveAuthentication.verify(sod: sod, dataGroups: read, trustStore: pki.trustStore)
        #expect(r.dataGroupHashes[15] == .notRead)
        #expect(r.dataGroupHashes[11] == .notInSecurityObject)
        #expect(r.status == .invalid)
        read[11] = nil
        #expect(PassiveAuthentication.verify(sod: sod, dataGroups: read, trustStore: pki.trustStore).status == .valid)
    }

    @Test func malformedSODIsInvalidNotACrash() throws {
        let pki = try TestPKI.generate()
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        for cut in [1, 10, 100, sod.count / 2, sod.count - 1] {
            let r = PassiveAuthentication.verify(
                sod: Array(sod.prefix(cut)), dataGroups: groups, trustStore: pki.trustStore)
            #expect(r.status == .invalid)
            #expect(r.signature == .notChecked)
            #expect(r.reason?.contains("MALFORMED") == true || r.reason?.contains("unusable") == true)
        }
    }

    @Test func trustStoreFromFilesDirectoriesAndMasterLists() async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let a = try TestPKI.generate(country: "UTO"),
            b = try TestPKI.generate(country: "ZZZ", algorithm: .brainpoolP256r1)
        let written = try a.write(to: dir.appendingPathComponent("a").path)
        #expect(written.count == 6)
        try b.write(to: dir.appendingPathComponent("b").path)
        // Single PEM, single DER, a PEM bundle, a directory.
        #expect(
            try CSCATrustStore(contentsOf: dir.appendingPathComponent("a/csca.pem").path).certificates == [
                a.csca.certificate
            ])
        #expect(
            try CSCATrustStore(contentsOf: dir.appendingPathComponent("a/csca.der").path).certificates == [
                a.csca.certificate
            ])
        let bundle = Array((a.csca.certificatePEM + b.csca.certificatePEM).utf8)
        try OpenSSLCLI.write(bundle, "bundle.pem", in: dir)
        #expect(try CSCATrustStore(contentsOf: dir.appendingPathComponent("bundle.pem").path).certificates.count == 2)
        let fromDir = try CSCATrustStore(contentsOf: dir.appendingPathComponent("a").path)
        #expect(fromDir.certificates.contains(a.csca.certificate))

        // A master list built here, and one signed by the openssl CLI over a CscaMasterList assembled by hand.
        let mlSigner = try TestPKI.generate(
            country: "UTO", algorithm: .rsa2048, signerExtendedKeyUsage: CSCATrustStore.masterListSigningKeyUsage)
        let ml = try TestPKI.masterList(
            certificates: [a.csca.certificate, b.csca.certificate], signer: mlSigner.documentSignerKey)
        try OpenSSLCLI.write(ml, "UTO.ml", in: dir)
        let store = try CSCATrustStore(
            contentsOf: dir.appendingPathComponent("UTO.ml").path,
            masterListTrust: [mlSigner.csca.certificate])
        #expect(Set(store.certificates) == [a.csca.certificate, b.csca.certificate])

        try await OpenSSLCLI.makePKI(in: dir, kind: "prime256v1")
        // A Master List Signer for ds.key: the document signer's request, issued with the master list EKU.
        try OpenSSLCLI.write(
            Array("[mls]\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = 2.23.136.1.1.3\n".utf8),
            "mls.cnf", in: dir)
        try await OpenSSLCLI.run(
            [
                "x509", "-req", "-in", "ds.csr", "-CA", "csca.pem", "-CAkey", "csca.key", "-set_serial", "4661",
                "-days", "1000", "-sha256", "-extfile", "mls.cnf", "-extensions", "mls", "-out", "mls.pem",
            ], in: dir)
        let list = ASN1.seq([ASN1.int(0), ASN1.setOf([a.csca.certificate.der, b.csca.certificate.der])])
        try OpenSSLCLI.write(list, "list.der", in: dir)
        try await OpenSSLCLI.run(
            [
                "cms", "-sign", "-binary", "-in", "list.der", "-signer", "mls.pem", "-inkey", "ds.key",
                "-outform", "DER", "-out", "openssl.ml", "-nodetach", "-econtent_type", "2.23.136.1.1.2",
                "-md", "sha256", "-nosmimecap",
            ], in: dir)
        let opensslCSCA = try ParsedCertificate(
            pemOrDER: Array(try Data(contentsOf: dir.appendingPathComponent("csca.pem"))))
        let store2 = try CSCATrustStore(
            contentsOf: dir.appendingPathComponent("openssl.ml").path, masterListTrust: [opensslCSCA])
        #expect(Set(store2.certificates) == [a.csca.certificate, b.csca.certificate])

        // The specimen is Utopia's: `a` (C=UT) anchors it, `b` (C=ZZ) may not.
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: a.documentSignerKey)
        #expect(PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: store2).status == .valid)
        let foreign = try SODBuilder.build(dataGroups: groups, signer: b.documentSignerKey)
        #expect(
            PassiveAuthentication.verify(sod: foreign, dataGroups: groups, trustStore: store2).issuingStateCheck
                == .mismatch)
        #expect(throws: TesseraError.self) { try CSCATrustStore(contentsOf: dir.appendingPathComponent("nope").path) }
        #expect(throws: TesseraError.self) {
            try CSCATrustStore(contentsOf: dir.appendingPathComponent("list.der").path)
        }
    }

    /// A CRL of the CSCA listing the document signer makes passive authentication invalid; a CRL not listing it
    /// is "checked", stale past nextUpdate; a CRL no trusted CSCA signed is refused.
    @Test func revocationByCSCACRLs() throws {
        let pki = try TestPKI.generate(country: "UTO"), other = try TestPKI.generate(country: "UTO")
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        var store = pki.trustStore
        #expect(PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: store).revocation == .notChecked)

        try store.addCRLs(contentsOf: try pki.crl(revoking: [[0x01, 0x02]]).der)
        let checked = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: store)
        #expect(checked.status == .valid && checked.revocation == .checked && !checked.crlStale)

        let ds = pki.documentSigner.certificate.serialNumber
        var revokedStore = pki.trustStore
        try revokedStore.addCRLs(contentsOf: Array(PEM.encode(try pki.crl(revoking: [ds]).der, label: "X509 CRL").utf8))
        let revoked = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: revokedStore)
        #expect(revoked.status == .invalid && revoked.revocation == .revoked && revoked.certificateChain == .invalid)
        #expect(revoked.reason?.contains("revoked") == true)
        #expect(revoked.json["revocation"] == .string("revoked"))

        var staleStore = pki.trustStore
        let old = Date().addingTimeInterval(-40 * 86_400)
        try staleStore.addCRLs(
            contentsOf: try pki.crl(revoking: [], thisUpdate: old, nextUpdate: old.addingTimeInterval(86_400)).der)
        let stale = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: staleStore)
        #expect(stale.status == .valid && stale.revocation == .checked && stale.crlStale)
        #expect(stale.json["crlStale"] == .bool(true))

        // Same issuer name, another key: refused.
        var strict = pki.trustStore
        #expect(throws: TesseraError.self) { try strict.addCRLs(contentsOf: try other.crl(revoking: [ds]).der) }
        #expect(strict.crls.isEmpty)
    }

    /// A master list with an expired CSCA and the link certificate to its successor (Doc 9303 Part 12 §5.1.1): the
    /// expired CSCA still anchors a document it signed (validity reported, not enforced), the link certificate
    /// anchors documents of the new key.
    @Test func masterListKeepsLinkCertificatesAndExpiredAnchors() throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let longAgo = Date(timeIntervalSinceNow: -20 * 365 * 86_400)
        let old = try TestPKI.generate(
            country: "UTO", notBefore: longAgo, cscaValidityDays: 365 * 15,
            documentSignerValidityDays: 365 * 11)
        let new = try TestPKI.generate(country: "UTO")
        let newCSCA = new.csca.certificate
        let link = try TestCA.issue(
            subject: newCSCA.subject, issuer: old.csca.certificate.subject, publicKey: newCSCA.subjectPublicKeyInfo,
            signerKey: old.csca.privateKeyDER, scheme: old.csca.algorithm.scheme,
            notBefore: Date(timeIntervalSinceNow: -86_400),
            days: 365 * 10,
            extensions: [
                TestCA.extensionDER(
                    "2.5.29.19", critical: true, ASN1.seq([ASN1.node(ASN1.boolean, [0xFF]), ASN1.int(0)])),
                TestCA.extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x01, 0x06])),
                TestCA.extensionDER(
                    "2.5.29.14", critical: false, ASN1.octets(try #require(newCSCA.subjectKeyIdentifier))),
                TestCA.extensionDER(
                    "2.5.29.35", critical: false,
                    ASN1.seq([ASN1.node(0x80, try #require(old.csca.certificate.subjectKeyIdentifier))])),
            ])
        let mlSigner = try TestPKI.generate(
            country: "UTO", algorithm: .rsa2048, signerExtendedKeyUsage: CSCATrustStore.masterListSigningKeyUsage)
        let ml = try TestPKI.masterList(certificates: [old.csca.certificate, link], signer: mlSigner.documentSignerKey)
        try OpenSSLCLI.write(ml, "UTO.ml", in: dir)
        let store = try CSCATrustStore(
            contentsOf: dir.appendingPathComponent("UTO.ml").path,
            masterListTrust: [mlSigner.csca.certificate])
        #expect(Set(store.certificates) == [old.csca.certificate, link])

        let groups = try specimenDataGroups()
        let oldSOD = try SODBuilder.build(
            dataGroups: groups, signer: old.documentSignerKey,
            signingTime: longAgo.addingTimeInterval(86_400))
        let oldResult = PassiveAuthentication.verify(sod: oldSOD, dataGroups: groups, trustStore: store)
        #expect(oldResult.status == .valid && oldResult.certificateValidity == .expired)
        #expect(oldResult.reason?.contains("expired") == true)
        #expect(
            PassiveAuthentication.verify(
                sod: oldSOD, dataGroups: groups, trustStore: store,
                options: .init(
                    referenceDate: longAgo.addingTimeInterval(86_400),
                    enforceValidityPeriod: true)
            ).status == .valid)

        let newSOD = try SODBuilder.build(dataGroups: groups, signer: new.documentSignerKey)
        let newResult = PassiveAuthentication.verify(sod: newSOD, dataGroups: groups, trustStore: store)
        #expect(newResult.status == .valid && newResult.certificateChain == .valid)
    }

    /// A master list is refused unless its signature verifies and its signer chains to a master-list anchor;
    /// in a directory of anchors a refused master list is an error, other unusable files are skipped.
    @Test func masterListsAreRefusedUnlessTrusted() throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let a = try TestPKI.generate(country: "UTO"), other = try TestPKI.generate(country: "ZZZ")
        let mlSigner = try TestPKI.generate(
            country: "UTO", algorithm: .rsa2048, signerExtendedKeyUsage: CSCATrustStore.masterListSigningKeyUsage)
        let ml = try TestPKI.masterList(certificates: [a.csca.certificate], signer: mlSigner.documentSignerKey)
        try OpenSSLCLI.write(ml, "UTO.ml", in: dir)
        let path = dir.appendingPathComponent("UTO.ml").path
        func refusal(_ trust: [ParsedCertificate], _ file: String? = nil) -> String? {
            do {
                _ = try CSCATrustStore(contentsOf: file ?? path, masterListTrust: trust)
                return nil
            } catch { return error.code == .invalidInput ? error.message : "wrong code \(error.code)" }
        }
        // Trusted directly as an anchor, or through the CSCA that issued it.
        #expect(refusal([mlSigner.documentSigner.certificate]) == nil)
        #expect(refusal([other.csca.certificate, mlSigner.csca.certificate]) == nil)
        #expect(refusal([])?.contains("no master list trust anchor") == true)
        #expect(refusal([other.csca.certificate])?.contains("does not chain") == true)
        #expect(refusal([other.csca.certificate])?.contains(path) == true)

        // A flipped byte in the signature.
        let sd = try CMSSignedData(contentInfo: ml)
        let sig = try #require(sd.signerInfos.first?.signature)
        let at = try #require(ml.firstRange(of: sig)).lowerBound
        var tampered = ml
        tampered[at + 10] ^= 0x01
        try OpenSSLCLI.write(tampered, "tampered.ml", in: dir)
        let why = refusal([mlSigner.csca.certificate], dir.appendingPathComponent("tampered.ml").path)
        #expect(why?.contains("signature invalid") == true)
        // A changed certificate in the list (content no longer matches the message digest).
        let certAt = try #require(ml.firstRange(of: a.csca.certificate.signature)).lowerBound
        var swapped = ml
        swapped[certAt + 5] ^= 0x01
        try OpenSSLCLI.write(swapped, "swapped.ml", in: dir)
        #expect(
            refusal([mlSigner.csca.certificate], dir.appendingPathComponent("swapped.ml").path)?.contains(
                "signature invalid") == true)

        // In a directory: a stray text file is skipped, the tampered list is refused naming itself.
        let d = dir.appendingPathComponent("anchors")
        try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
        try OpenSSLCLI.write(Array("not a certificate".utf8), "README", in: d)
        try OpenSSLCLI.write(ml, "UTO.ml", in: d)
        #expect(
            try CSCATrustStore(contentsOf: d.path, masterListTrust: [mlSigner.csca.certificate]).certificates == [
                a.csca.certificate
            ])
        try OpenSSLCLI.write(tampered, "XXX.ml", in: d)
        #expect(refusal([mlSigner.csca.certificate], d.path)?.contains("XXX.ml") == true)
    }
}

/// Both directions against the openssl CLI: SODs that `openssl cms -sign` made, verified here; SODs made here,
/// verified by `openssl cms -verify`.
@Suite struct PassiveAuthOpenSSLTests {
    struct Case: Sendable, CustomStringConvertible {
        var kind: String
        var pss = false
        var explicitCSCA = false
        var description: String { kind + (pss ? "-pss" : "") + (explicitCSCA ? "-explicit" : "") }
    }

    @Test(arguments: [
        Case(kind: "prime256v1"), Case(kind: "secp384r1"), Case(kind: "brainpoolP256r1"), Case(kind: "brainpoolP384r1"),
        Case(kind: "brainpoolP256r1", explicitCSCA: true), Case(kind: "rsa"), Case(kind: "rsa", pss: true),
    ])
    func openSSLSignedSODVerifies(_ c: Case) async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await OpenSSLCLI.makePKI(in: dir, kind: c.kind, pss: c.pss, explicitCSCA: c.explicitCSCA)
        let groups = try specimenDataGroups()
        try OpenSSLCLI.write(try handBuiltLDSSecurityObject(groups), "lso.der", in: dir)
        let keyopts = c.pss ? ["-keyopt", "rsa_padding_mode:pss", "-keyopt", "rsa_pss_saltlen:32"] : []
        try await OpenSSLCLI.run(
            [
                "cms", "-sign", "-binary", "-in", "lso.der", "-signer", "ds.pem", "-inkey", "ds.key",
                "-outform", "DER", "-out", "sod.der", "-nodetach", "-econtent_type", "2.23.136.1.1.1",
                "-md", "sha256", "-nosmimecap",
            ] + keyopts, in: dir)
        let sod = TLV(tag: 0x77, value: try OpenSSLCLI.read("sod.der", in: dir)).encoded
        let store = try CSCATrustStore(contentsOf: dir.appendingPathComponent("csca.pem").path)
        let result = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: store)
        #expect(result.status == .valid, "\(c): \(result.reason ?? "")")
        #expect(result.signature == .valid)
        #expect(result.certificateChain == .valid)
        if c.pss {
            let so = try SecurityObject(parsing: sod)
            let alg = try TLV.parse(try #require(so.signedData.signerInfos.first).signatureAlgorithm)
            #expect(try AlgorithmOIDs.scheme(alg) == .rsaPSS(.sha256, mgf1: .sha256, saltLength: 32))
        }

        var tampered = groups
        tampered[15]![20] ^= 0x01
        let bad = PassiveAuthentication.verify(sod: sod, dataGroups: tampered, trustStore: store)
        #expect(bad.status == .invalid)
        #expect(bad.dataGroupHashes[15] == .invalid)

        // The DS certificate of another openssl PKI with the same CSCA name: no anchor (names match, keys do not).
        let other = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: other) }
        try await OpenSSLCLI.makePKI(in: other, kind: c.kind, cscaSubject: "/C=UT/O=Elsewhere/CN=CSCA Elsewhere")
        let otherStore = try CSCATrustStore(contentsOf: other.appendingPathComponent("csca.pem").path)
        let unanchored = PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: otherStore)
        #expect(unanchored.certificateChain == .noTrustAnchor)
        #expect(unanchored.status == .unverified)
    }

    @Test(arguments: TestKeyAlgorithm.allCases)
    func openSSLVerifiesIssuedSOD(algorithm: TestKeyAlgorithm) async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let pki = try TestPKI.generate(algorithm: algorithm)
        try pki.write(to: dir.path)
        let groups = try specimenDataGroups()
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        let contentInfo = try TLV.parse(sod).value
        try OpenSSLCLI.write(contentInfo, "sod.der", in: dir)
        try await OpenSSLCLI.run(
            [
                "cms", "-verify", "-inform", "DER", "-in", "sod.der", "-CAfile", "csca.pem",
                "-purpose", "any", "-out", "content.der",
            ], in: dir)
        let content = try OpenSSLCLI.read("content.der", in: dir)
        #expect(content == (try handBuiltLDSSecurityObject(groups)))
        // And openssl rejects it under a foreign CSCA.
        let foreign = try TestPKI.generate(country: "ZZZ")
        try OpenSSLCLI.write(Array(foreign.csca.certificatePEM.utf8), "foreign.pem", in: dir)
        await #expect(throws: (any Error).self) {
            try await OpenSSLCLI.run(
                [
                    "cms", "-verify", "-inform", "DER", "-in", "sod.der", "-CAfile", "foreign.pem",
                    "-purpose", "any", "-out", "content2.der",
                ], in: dir)
        }
    }
}

/// The CSCA's and the document signer's country must be the document's issuing state (issue #27; Doc 9303
/// Part 12 §7.1.1), with Doc 9303 Part 3's own codes mapped to ISO 3166-1 alpha-2.
@Suite struct IssuingStateTests {
    /// The specimen's DG1 with another issuing state (positions 3–5 of the first line; no check digit covers it).
    func dataGroups(state: String) throws -> [Int: [UInt8]] {
        let mrz = "P<" + state + String(ldsSpecimenMRZ.dropFirst(5))
        return [1: try LDSBuilder.dg1(mrz: mrz), 2: try LDSBuilder.dg2(image: ldsTestJPEG, width: 3, height: 2)]
    }

    func verify(state: String, countryCode: String) throws -> PassiveAuthenticationResult {
        let pki = try TestPKI.generate(country: "UTO", countryCode: countryCode)
        let groups = try dataGroups(state: state)
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey)
        return PassiveAuthentication.verify(sod: sod, dataGroups: groups, trustStore: pki.trustStore)
    }

    @Test func cscaOfTheIssuingStateIsValid() throws {
        let r = try verify(state: "UTO", countryCode: "UT")
        #expect(r.status == .valid, "\(r.reason ?? "")")
        #expect(r.issuingStateCheck == .valid)
        #expect(r.json["issuingStateCheck"] == "valid")
    }

    @Test func cscaOfAnotherCountryIsInvalid() throws {
        let r = try verify(state: "UTO", countryCode: "ZZ")
        #expect(r.certificateChain == .valid)
        #expect(r.issuingStateCheck == .mismatch)
        #expect(r.status == .invalid)
        #expect(r.reason?.contains("C=ZZ") == true, "\(r.reason ?? "")")
    }

    @Test(arguments: [
        ("D<<", "DE"), ("GBD", "GB"), ("GBN", "GB"), ("GBO", "GB"), ("GBP", "GB"), ("GBS", "GB"), ("UNO", "UN"),
        ("UNA", "UN"), ("UNK", "UN"), ("EUE", "EU"), ("AUT", "AT"), ("FRA", "FR"),
    ])
    func icaoCodesMapToTheCertificateCountry(state: String, alpha2: String) throws {
        #expect(IssuingStateCodes.alpha2(docCode: state) == alpha2)
        let r = try verify(state: state, countryCode: alpha2)
        #expect(r.status == .valid, "\(state): \(r.reason ?? "")")
        #expect(r.issuingStateCheck == .valid)
        // "D" is Germany, not a prefix of some other country's code.
        #expect(try verify(state: state, countryCode: "AU").issuingStateCheck == .mismatch)
    }

    @Test func issuingStateWithoutMappingIsAReasonNotACrash() throws {
        #expect(IssuingStateCodes.alpha2(docCode: "XYZ") == nil)
        let r = try verify(state: "XYZ", countryCode: "XY")
        #expect(r.issuingStateCheck == .unknown)
        #expect(r.status == .valid)
        #expect(r.reason?.contains("XYZ") == true)
    }
}

/// Master List Signer certificates (issue #27; Doc 9303 Part 12 §7.1.2): the master list signing extended key
/// usage, and valid when the list was signed (CMS signingTime); a signer expired since loads, reported stale.
@Suite struct MasterListSignerTests {
    let anchor: TestPKI

    init() throws { anchor = try TestPKI.generate(country: "UTO") }

    func thrownError(_ body: () throws(TesseraError) -> Void) -> TesseraError? {
        do { try body() } catch { return error }
        return nil
    }

    func load(_ signer: TestPKI, signingTime: Date = Date()) throws(TesseraError) -> CSCATrustStore {
        var store = CSCATrustStore(masterListTrust: [signer.csca.certificate])
        try store.add(
            contentsOf: try TestPKI.masterList(
                certificates: [anchor.csca.certificate], signer: signer.documentSignerKey, signingTime: signingTime))
        return store
    }

    @Test func signerWithoutTheMasterListEKUIsRefused() throws {
        let plain = try TestPKI.generate(country: "UTO")
        let e = thrownError { () throws(TesseraError) in _ = try load(plain) }
        #expect(e?.code == .invalidInput)
        #expect(e?.message.contains("2.23.136.1.1.3") == true, "\(e?.message ?? "")")
        let tagged = try TestPKI.generate(
            country: "UTO", signerExtendedKeyUsage: CSCATrustStore.masterListSigningKeyUsage)
        let store = try load(tagged)
        #expect(store.certificates == [anchor.csca.certificate])
        #expect(store.masterLists.count == 1 && store.masterLists[0].isStale(at: Date()) == false)
    }

    @Test func signerExpiredSinceLoadsStale() throws {
        let start = Date(timeIntervalSinceNow: -3 * 365 * 86_400)
        let expired = try TestPKI.generate(
            country: "UTO", notBefore: start, documentSignerValidityDays: 365,
            signerExtendedKeyUsage: CSCATrustStore.masterListSigningKeyUsage)
        let store = try load(expired, signingTime: start.addingTimeInterval(30 * 86_400))
        #expect(store.certificates == [anchor.csca.certificate])
        let list = try #require(store.masterLists.first)
        #expect(list.isStale(at: Date()))
        #expect(list.signedAt.map { abs($0.timeIntervalSince(start.addingTimeInterval(30 * 86_400))) < 1 } == true)
        // Signed after the signer expired: refused.
        let e = thrownError { () throws(TesseraError) in _ = try load(expired) }
        #expect(e?.message.contains("not valid when the list was signed") == true, "\(e?.message ?? "")")
    }
}
