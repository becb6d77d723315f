import CBOR
import Crypto
import Foundation
import ICAO
import MDoc
import TesseraCore
import Testing

/// The holder's pure decisions: readerAuth against supportedAuthorityKeyIdentifiers, element selection, and the
/// DeviceResponse with a deviceSignature from a signer that may wait (a token).
@Suite struct HolderTests {
    typealias Reader = (root: TestCertificate, signer: TestCertificate)

    static func reader() throws -> Reader {
        try TestPKI.generateChain(
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

    static func refusalReason(_ body: () throws(TesseraError) -> MDocReaderIdentity) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            #expect(error.code == .mdocReaderNotTrusted)
            return error.details["reason"]?.stringValue
        }
    }

    @Test func aReaderUnderAListedRootIsTrustedByTheLeafsAuthorityKeyIdentifier() throws {
        let reader = try Self.reader()
        let transcript = try IssuanceTests.transcript()
        let rootSKI = try #require(reader.root.certificate.subjectKeyIdentifier)
        let doc = try Self.request(reader, signedOver: transcript)
        let identity = try MDocReaderTrust.evaluate(
            doc, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [[1, 2, 3], rootSKI], now: Date())
        #expect(identity.authorityKeyIdentifier == Hex.encode(rootSKI))
        #expect(identity.subject.contains("Kiosk Reader"))
        // With the root in x5chain, the root's own subject key identifier is compared.
        let withRoot = try Self.request(
            reader, chain: [reader.signer.certificate.der, reader.root.certificate.der], signedOver: transcript)
        #expect(
            try MDocReaderTrust.evaluate(
                withRoot, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [rootSKI], now: Date()
            ).authorityKeyIdentifier == Hex.encode(rootSKI))
    }

    @Test func aReaderCertificateWithoutTheReaderAuthenticationEKUIsRefused() throws {
        let transcript = try IssuanceTests.transcript()
        let documentSigner = try MDocIssuer.testIACA()  // a valid chain, but its leaf's EKU is the DS one
        let plain = try TestPKI.generateChain(rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader")
        let readers: [Reader] = [(documentSigner.iaca, documentSigner.documentSigner), (plain.root, plain.signer)]
        for reader in readers {
            let rootSKI = try #require(reader.root.certificate.subjectKeyIdentifier)
            let doc = try Self.request(reader, signedOver: transcript)
            #expect(
                Self.refusalReason { () throws(TesseraError) in
                    try MDocReaderTrust.evaluate(
                        doc, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [rootSKI], now: Date())
                } == "invalid")
        }
        #expect(documentSigner.documentSigner.certificate.extendedKeyUsage == [MDocIssuer.documentSignerEKU])
        #expect(plain.signer.certificate.extendedKeyUsage == nil)
        #expect(try Self.reader().signer.certificate.extendedKeyUsage == [MDocIssuer.readerAuthEKU])
    }

    @Test func untrustedMissingOrForeignReaderAuthIsRefused() throws {
        let reader = try Self.reader()
        let other = try Self.reader()
        let transcript = try IssuanceTests.transcript()
        let rootSKI = try #require(reader.root.certificate.subjectKeyIdentifier)
        let otherSKI = try #require(other.root.certificate.subjectKeyIdentifier)
        let doc = try Self.request(reader, signedOver: transcript)
        // Another root listed, or none: untrusted.
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    doc, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [otherSKI], now: Date())
            } == "untrusted")
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    doc, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [], now: Date())
            } == "untrusted")
        // No readerAuth.
        let bare = try Self.request(nil, signedOver: transcript)
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    bare, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [rootSKI], now: Date())
            } == "missing")
        // Signed over another session (a replayed request).
        let otherSession = try IssuanceTests.transcript()
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    doc, sessionTranscript: otherSession,
                    supportedAuthorityKeyIdentifiers: [rootSKI], now: Date())
            } == "invalid")
        // A leaf followed by a root that did not issue it.
        let spliced = try Self.request(
            reader, chain: [reader.signer.certificate.der, other.root.certificate.der], signedOver: transcript)
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    spliced, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [rootSKI, otherSKI],
                    now: Date())
            } == "invalid")
        // The reader certificate has expired.
        #expect(
            Self.refusalReason { () throws(TesseraError) in
                try MDocReaderTrust.evaluate(
                    doc, sessionTranscript: transcript, supportedAuthorityKeyIdentifiers: [rootSKI],
                    now: Date(timeIntervalSinceNow: 400 * 86_400))
            } == "invalid")
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
