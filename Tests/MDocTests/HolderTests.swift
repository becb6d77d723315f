import CBOR
import Crypto
import CryptoPrimitives
import FoundationEssentials
import MDoc
import TesseraCore
import Testing
import X509Support

@testable import ICAO

/// The holder's pure decisions: readerAuth by signature chain to a held root listed in
/// supportedAuthorityKeyIdentifiers, element selection, and the DeviceResponse with a deviceSignature from a signer
/// that may wait (a token).
@Suite struct HolderTests {
    typealias Reader = (root: TestCertificate, signer: TestCertificate)

    static func reader() throws -> Reader {
        try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU)
    }

    static func request(
        _ reader: Reader?, chain: [[UInt8]]? = nil, signedOver transcript: SessionTranscript,
        elements: [String] = ["family_name", "given_name", "portrait"]
    ) throws -> DocRequest {
        let auth = try reader.map { r throws -> (chain: [[UInt8]], algorithm: COSEAlgorithm, signer: COSESigner) in
            (
                chain ?? [r.signer.certificate.der], .es256,
                COSESign1.privateKeySigner(der: r.signer.privateKeyDER, algorithm: .es256)
            )
        }
        let made = try DocRequest.make(
            docType: MDL.docType, elements: [MDL.namespace: elements], sessionTranscript: transcript, readerAuth: auth)
        return try #require(try DeviceRequest(bytes: DeviceRequest(docRequests: [made]).encoded).docRequests.first)
    }

    /// The refusal's `details.reason` of evaluating `doc` against `roots` (nil: trusted).
    static func refusalReason(
        _ doc: DocRequest, _ transcript: SessionTranscript, roots: [ParsedCertificate], listed: [[UInt8]]?,
        now: Date = Date()
    ) async -> String? {
        do {
            _ = try await MDocReaderTrust.evaluate(
                doc, sessionTranscript: transcript, roots: roots, supportedAuthorityKeyIdentifiers: listed, now: now)
            return nil
        } catch {
            #expect(error.code == .mdocReaderNotTrusted)
            return error.details["reason"]?.stringValue
        }
    }

    @Test func aReaderIssuedByAListedRootIsTrustedByTheSignatureChain() async throws {
        let reader = try Self.reader()
        let transcript = try IssuanceTests.transcript()
        let root = reader.root.certificate
        let rootSKI = try #require(root.subjectKeyIdentifier)
        let doc = try Self.request(reader, signedOver: transcript)
        let identity = try await MDocReaderTrust.evaluate(
            doc, sessionTranscript: transcript, roots: [root], supportedAuthorityKeyIdentifiers: [[1, 2, 3], rootSKI],
            now: Date())
        #expect(identity.authorityKeyIdentifier == Hex.encode(rootSKI))
        #expect(identity.subject.contains("Kiosk Reader"))
        // With the root in x5chain too.
        let withRoot = try Self.request(
            reader, chain: [reader.signer.certificate.der, root.der], signedOver: transcript)
        #expect(
            try await MDocReaderTrust.evaluate(
                withRoot, sessionTranscript: transcript, roots: [root], supportedAuthorityKeyIdentifiers: [rootSKI],
                now: Date()
            ).authorityKeyIdentifier == Hex.encode(rootSKI))
        // The root is held but not listed by the registration, or listed but not held: untrusted.
        #expect(await Self.refusalReason(doc, transcript, roots: [root], listed: [[1, 2, 3]]) == "untrusted")
        #expect(await Self.refusalReason(doc, transcript, roots: [], listed: [rootSKI]) == "untrusted")
        #expect(await Self.refusalReason(doc, transcript, roots: [root], listed: nil) == nil)
    }

    /// Issue #27: trust was the key identifier the chain claimed, so a leaf made with the reader's own key that copied
    /// the trusted root's key identifier into its authority key identifier (and its name into the issuer) was
    /// trusted. The root's signature is now what counts.
    @Test func aForgedLeafNamingTheTrustedRootIsRefused() async throws {
        let reader = try Self.reader()
        let transcript = try IssuanceTests.transcript()
        let root = reader.root.certificate
        let rootSKI = try #require(root.subjectKeyIdentifier)
        // Same root name (Tessera Test / Reader Root), another key; the leaf's AKI copied from the real root.
        let forged = try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU, signerAuthorityKeyIdentifier: rootSKI)
        #expect(forged.signer.certificate.authorityKeyIdentifier == rootSKI)
        #expect(forged.signer.certificate.issuer == root.subject)
        let doc = try Self.request(forged, signedOver: transcript)
        #expect(await Self.refusalReason(doc, transcript, roots: [root], listed: [rootSKI]) == "untrusted")
        // Its own (self-made) root in x5chain does not help.
        let withFakeRoot = try Self.request(
            forged, chain: [forged.signer.certificate.der, forged.root.certificate.der], signedOver: transcript)
        #expect(await Self.refusalReason(withFakeRoot, transcript, roots: [root], listed: [rootSKI]) == "untrusted")
    }

    /// Annex B.1.7/B.1.8 chains may pass through an intermediate CA (sent in x5chain): validated to the root by the
    /// RFC 5280 policy, so an intermediate that is not a CA (basicConstraints), or one under a root whose path
    /// length is 0, does not make a chain.
    @Test func aChainThroughAnIntermediateCAIsValidatedToTheRoot() async throws {
        func name(_ cn: String) -> [UInt8] { TestCA.name(country: "UT", organization: "Tessera Test", commonName: cn) }
        func ca(pathLength: Int?) -> [UInt8] {
            TestCA.extensionDER(
                "2.5.29.19", critical: true,
                ASN1.seq([ASN1.node(ASN1.boolean, [0xFF])] + (pathLength.map { [ASN1.int($0)] } ?? [])))
        }
        let keyUsage = TestCA.extensionDER("2.5.29.15", critical: true, ASN1.node(ASN1.bitString, [0x01, 0x06]))
        func certificate(
            _ cn: String, issuer: TestCertificate?, extensions: (_ ski: [UInt8]) -> [[UInt8]]
        ) throws -> TestCertificate {
            let key = try Signatures.generateKey(.ec(curve: "prime256v1"))
            let ski = try TestCA.keyIdentifier(key.publicKeyDER)
            var all = extensions(ski) + [TestCA.extensionDER("2.5.29.14", critical: false, ASN1.octets(ski))]
            if let issuer, let aki = issuer.certificate.subjectKeyIdentifier {
                all.append(TestCA.extensionDER("2.5.29.35", critical: false, ASN1.seq([ASN1.node(0x80, aki)])))
            }
            let made = try TestCA.issue(
                subject: name(cn), issuer: issuer?.certificate.subject ?? name(cn), publicKey: key.publicKeyDER,
                signerKey: issuer?.privateKeyDER ?? key.privateKeyDER, scheme: .ecdsa(.sha256),
                notBefore: Date(timeIntervalSinceNow: -60), days: 30, extensions: all)
            return TestCertificate(certificate: made, privateKeyDER: key.privateKeyDER, algorithm: .p256)
        }
        let eku = TestCA.extensionDER("2.5.29.37", critical: true, ASN1.seq([ASN1.oid(MDocIssuer.readerAuthEKU)]))
        let transcript = try IssuanceTests.transcript()
        for (rootPathLength, intermediateIsCA, trusted) in [(nil, true, true), (nil, false, false), (0, true, false)] {
            let root = try certificate("Reader Root", issuer: nil) { _ in [ca(pathLength: rootPathLength), keyUsage] }
            let intermediate = try certificate("Reader CA", issuer: root) { _ in
                intermediateIsCA ? [ca(pathLength: 0), keyUsage] : [keyUsage]
            }
            let leaf = try certificate("Kiosk Reader", issuer: intermediate) { _ in [eku] }
            let rootSKI = try #require(root.certificate.subjectKeyIdentifier)
            let doc = try Self.request(
                (intermediate, leaf), chain: [leaf.certificate.der, intermediate.certificate.der],
                signedOver: transcript)
            let reason = await Self.refusalReason(doc, transcript, roots: [root.certificate], listed: [rootSKI])
            #expect(
                reason == (trusted ? nil : "untrusted"),
                "root path length \(String(describing: rootPathLength)), intermediate CA \(intermediateIsCA)")
            if trusted {
                // Without the intermediate in x5chain there is no path.
                let leafOnly = try Self.request((intermediate, leaf), signedOver: transcript)
                #expect(
                    await Self.refusalReason(leafOnly, transcript, roots: [root.certificate], listed: [rootSKI])
                        == "untrusted")
            }
        }
    }

    @Test func aReaderCertificateWithoutTheReaderAuthenticationEKUIsRefused() async throws {
        let transcript = try IssuanceTests.transcript()
        let documentSigner = try MDocIssuer.testIACA()  // a valid chain, but its leaf's EKU is the DS one
        let plain = try TestCA.generateChain(rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader")
        let readers: [Reader] = [(documentSigner.iaca, documentSigner.documentSigner), (plain.root, plain.signer)]
        for reader in readers {
            let rootSKI = try #require(reader.root.certificate.subjectKeyIdentifier)
            let doc = try Self.request(reader, signedOver: transcript)
            #expect(
                await Self.refusalReason(doc, transcript, roots: [reader.root.certificate], listed: [rootSKI])
                    == "invalid")
        }
        #expect(documentSigner.documentSigner.certificate.extendedKeyUsage == [MDocIssuer.documentSignerEKU])
        #expect(plain.signer.certificate.extendedKeyUsage == nil)
        #expect(try Self.reader().signer.certificate.extendedKeyUsage == [MDocIssuer.readerAuthEKU])
    }

    /// Issue #27: readerAuth's payload is detached (ISO/IEC 18013-5 §9.1.4). A readerAuth captured from a real
    /// reader in another session, with that session's ReaderAuthenticationBytes attached, verified (the attached
    /// payload was used instead of this session's) and was trusted.
    @Test func aReaderAuthCarryingAPayloadIsRefused() async throws {
        let reader = try Self.reader()
        let root = reader.root.certificate
        let rootSKI = try #require(root.subjectKeyIdentifier)
        let earlier = try IssuanceTests.transcript()
        let now = try IssuanceTests.transcript()
        let captured = try Self.request(reader, signedOver: earlier)
        var replayed = try #require(captured.readerAuth)
        replayed.payload = DocRequest.readerAuthenticationBytes(
            sessionTranscript: earlier, itemsRequestBytes: captured.itemsRequestBytes)
        let bytes = MDocCBOR.encode([
            "version": "1.0",
            "docRequests": [
                [
                    "itemsRequest": MDocCBOR.tag24(captured.itemsRequestBytes),
                    "readerAuth": replayed.value,
                ]
            ],
        ])
        let doc = try #require(try DeviceRequest(bytes: bytes).docRequests.first)
        #expect(doc.readerAuth?.payload != nil)
        #expect(await Self.refusalReason(doc, now, roots: [root], listed: [rootSKI]) == "invalid")
        // Even in the session it was made for: 18013-5 says detached.
        #expect(await Self.refusalReason(doc, earlier, roots: [root], listed: [rootSKI]) == "invalid")
        #expect(await Self.refusalReason(captured, earlier, roots: [root], listed: [rootSKI]) == nil)
    }

    @Test func untrustedMissingOrForeignReaderAuthIsRefused() async throws {
        let reader = try Self.reader()
        let other = try Self.reader()
        let transcript = try IssuanceTests.transcript()
        let roots = [reader.root.certificate, other.root.certificate]
        let rootSKI = try #require(reader.root.certificate.subjectKeyIdentifier)
        let otherSKI = try #require(other.root.certificate.subjectKeyIdentifier)
        let doc = try Self.request(reader, signedOver: transcript)
        // Another root listed, or none: untrusted.
        #expect(await Self.refusalReason(doc, transcript, roots: roots, listed: [otherSKI]) == "untrusted")
        #expect(await Self.refusalReason(doc, transcript, roots: roots, listed: []) == "untrusted")
        // No readerAuth.
        let bare = try Self.request(nil, signedOver: transcript)
        #expect(await Self.refusalReason(bare, transcript, roots: roots, listed: [rootSKI]) == "missing")
        // Signed over another session (a replayed request).
        let otherSession = try IssuanceTests.transcript()
        #expect(await Self.refusalReason(doc, otherSession, roots: roots, listed: [rootSKI]) == "invalid")
        // A leaf followed by a root that did not issue it.
        let spliced = try Self.request(
            reader, chain: [reader.signer.certificate.der, other.root.certificate.der], signedOver: transcript)
        #expect(await Self.refusalReason(spliced, transcript, roots: roots, listed: [rootSKI, otherSKI]) == "invalid")
        // The reader certificate has expired.
        #expect(
            await Self.refusalReason(
                doc, transcript, roots: roots, listed: [rootSKI], now: Date(timeIntervalSinceNow: 400 * 86_400))
                == "invalid")
    }

    @Test func onlyApprovedRequestedAndHeldElementsAreReleased() throws {
        let holder = try IssuanceTests.issue()
        let requested = [
            MDocRequestedElement(namespace: MDL.namespace, identifier: "family_name", intentToRetain: false),
            MDocRequestedElement(namespace: MDL.namespace, identifier: "portrait", intentToRetain: true),
            MDocRequestedElement(namespace: MDL.namespace, identifier: "age_over_21", intentToRetain: false),
        ]
        let ns = MDL.namespace
        #expect(
            MDocElementSelection.released(requested: requested, approved: nil, available: holder.issuerSigned)
                == ["\(ns)/family_name", "\(ns)/portrait"])
        #expect(
            MDocElementSelection.released(
                requested: requested, approved: ["\(ns)/portrait", "\(ns)/given_name", "\(ns)/age_over_21"],
                available: holder.issuerSigned) == ["\(ns)/portrait"])
        #expect(
            MDocElementSelection.released(requested: requested, approved: [], available: holder.issuerSigned).isEmpty)
        #expect(
            MDocElementSelection.released(
                requested: requested, approved: ["other.namespace/family_name"], available: holder.issuerSigned
            ).isEmpty)
    }

    @Test func theResponseCarriesOnlyTheReleasedElementsAndAnAsyncDeviceSignature() async throws {
        let holder = try IssuanceTests.issue()
        let transcript = try IssuanceTests.transcript()
        let key = holder.deviceKey
        let bytes = try await MDocPresentation.deviceResponse(
            issuerSigned: holder.issuerSigned, docType: MDL.docType, sessionTranscript: transcript,
            released: ["\(MDL.namespace)/given_name", "\(MDL.namespace)/birth_date"]
        ) { (tbs: [UInt8]) async throws(TesseraError) -> [UInt8] in
            do { return Array(try key.signature(for: tbs).rawRepresentation) } catch { throw .internalError("sign") }
        }
        let result = MDocVerifier.verify(
            response: try DeviceResponse(bytes: bytes), session: .init(transcript: transcript), iacas: [holder.iaca],
            now: Date())[0]
        #expect(result.verdict == .authentic)
        #expect(result.deviceAuthenticationKind == "deviceSignature")
        #expect(Set(result.elements.map(\.identifier)) == ["given_name", "birth_date"])
        // Signed by another key: the verifier says so.
        let wrong = P256.Signing.PrivateKey()
        let forged = try await MDocPresentation.deviceResponse(
            issuerSigned: holder.issuerSigned, docType: MDL.docType, sessionTranscript: transcript, released: []
        ) { (tbs: [UInt8]) async throws(TesseraError) -> [UInt8] in
            do { return Array(try wrong.signature(for: tbs).rawRepresentation) } catch { throw .internalError("sign") }
        }
        let bad = MDocVerifier.verify(
            response: try DeviceResponse(bytes: forged), session: .init(transcript: transcript), iacas: [holder.iaca],
            now: Date())[0]
        #expect(bad.reasons.contains(.deviceAuthInvalid))
    }
}
