import FoundationEssentials
import ICAO
import MDoc
import MDocHolderDoor
import TesseraCore
import TesseraTestSupport
import Testing
import X509Support

/// The holder door on real components: SoftHSM2 device keys, the registration store over a temporary database,
/// reader roots from test PKI (docs/MDOC.md, "Holder"; docs/API.md, "Owners").
@Suite struct MDocHolderServiceTests {
    /// Another uid's registration answers exactly as one never made: MDOC_REGISTRATION_NOT_FOUND with the same
    /// message and details, so its existence is not disclosed. Its owner and an administrator find it.
    @Test func anotherUidsRegistrationIsNotFoundLikeOneNeverMade() async throws {
        let h = try await HolderHarness.make()
        let made = try await h.register(uid: 1000, documentIdentifier: "doc-of-1000")
        #expect(try await h.service.registration("doc-of-1000", uid: 1000, isAdmin: false).ownerUid == 1000)
        #expect(
            try await h.service.registration("doc-of-1000", uid: 0, isAdmin: true).documentIdentifier
                == made.documentIdentifier)

        func refusal(_ id: String, uid: UInt32) async -> TesseraError? {
            do {
                _ = try await h.service.registration(id, uid: uid, isAdmin: false)
                return nil
            } catch { return error }
        }
        let foreign = try #require(await refusal("doc-of-1000", uid: 1001))
        #expect(foreign.code == .mdocRegistrationNotFound)
        let absent = try #require(await refusal("doc-never-made", uid: 1001))
        #expect(absent.code == .mdocRegistrationNotFound)
        #expect(foreign.details["documentIdentifier"] == "doc-of-1000")
        #expect(
            foreign.message.replacing("doc-of-1000", with: "X")
                == absent.message.replacing("doc-never-made", with: "X"))
        #expect(Set(foreign.details.keys) == Set(absent.details.keys))
        // The registration that answers a request is chosen among the caller's own only.
        let t = try transcript()
        let req = try request(signer: h.readerSigner, chain: [h.readerSigner.certificate.der], over: t)
        await #expect(throws: TesseraError.self) {
            _ = try await h.service.registration(for: req, sessionTranscript: t, uid: 1001)
        }
        #expect(
            try await h.service.registration(for: req, sessionTranscript: t, uid: 1000).documentIdentifier
                == made.documentIdentifier)
    }

    /// A device key is its uid's: another uid neither finds it nor registers a document with it; an
    /// administrator finds it.
    @Test func aDeviceKeyIsItsUids() async throws {
        let h = try await HolderHarness.make()
        let key = try await h.deviceKey(uid: 1000)
        #expect(
            try await h.service.deviceKey(tokenId: h.tokenId, keyId: key.keyId, uid: 1000, isAdmin: false) == key.key)
        #expect(try await h.service.deviceKey(tokenId: h.tokenId, keyId: key.keyId, uid: 0, isAdmin: true) == key.key)
        do {
            _ = try await h.service.deviceKey(tokenId: h.tokenId, keyId: key.keyId, uid: 1001, isAdmin: false)
            Issue.record("uid 1001 found uid 1000's device key")
        } catch { #expect(error.code == .mdocDeviceKeyNotFound) }
        let stolen = try h.issue(for: key.key)
        do {
            _ = try await h.service.register(
                documentIdentifier: "stolen", docType: MDL.docType, issuerSigned: stolen,
                tokenId: h.tokenId, keyId: key.keyId, supportedAuthorityKeyIdentifiers: [], invalidationDate: nil,
                uid: 1001, isAdmin: false)
            Issue.record("uid 1001 registered a document on uid 1000's device key")
        } catch { #expect(error.code == .mdocDeviceKeyNotFound) }
        #expect(try await h.service.store.registration("stolen") == nil)
        // An mdoc issued for another key is refused for this one.
        let other = try await h.deviceKey(uid: 1000)
        let mismatched = try h.issue(for: other.key)
        do {
            _ = try await h.service.register(
                documentIdentifier: "mismatch", docType: MDL.docType, issuerSigned: mismatched,
                tokenId: h.tokenId, keyId: key.keyId, supportedAuthorityKeyIdentifiers: [], invalidationDate: nil,
                uid: 1000, isAdmin: false)
            Issue.record("registered an mdoc whose MSO names another device key")
        } catch { #expect(error.code == .mdocDeviceKeyMismatch) }
    }

    /// A reader whose chain validates to a trusted root is shown to the user and answered with a DeviceResponse
    /// signed by the token's device key; a forged leaf that names the trusted root (its key identifier and name)
    /// but is signed by another key is refused MDOC_READER_NOT_TRUSTED before consent is asked.
    @Test func onlyAReaderChainedBySignatureToATrustedRootIsAnswered() async throws {
        let h = try await HolderHarness.make()
        let registration = try await h.register(uid: 1000)
        let t = try transcript()
        let approve = ConsentLog(MDocConsent(approved: true))
        let good = try request(signer: h.readerSigner, chain: [h.readerSigner.certificate.der], over: t)
        let response = try await h.service.respond(
            registration: registration, request: good, sessionTranscript: t, uid: 1000, consent: approve.ask)
        #expect(Set(response.released) == ["\(MDL.namespace)/family_name", "\(MDL.namespace)/given_name"])
        #expect(approve.asked.withLock { $0.count } == 1)
        let verified = MDocVerifier.verify(
            response: try DeviceResponse(bytes: response.deviceResponse), session: .init(transcript: t),
            iacas: [h.pki.iaca.certificate], now: Date())
        #expect(verified.first?.verdict == .authentic)
        #expect(verified.first?.deviceAuthenticationKind == "deviceSignature")

        let forged = try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU, signerAuthorityKeyIdentifier: h.readerRootSKI)
        #expect(forged.signer.certificate.issuer == h.readerRoot.certificate.subject)
        let consent = ConsentLog(MDocConsent(approved: true))
        for chain in [
            [forged.signer.certificate.der], [forged.signer.certificate.der, forged.root.certificate.der],
        ] {
            let bad = try request(signer: forged.signer, chain: chain, over: t)
            do {
                _ = try await h.service.respond(
                    registration: registration, request: bad, sessionTranscript: t, uid: 1000, consent: consent.ask)
                Issue.record("a forged reader leaf was answered")
            } catch { #expect(error.code == .mdocReaderNotTrusted) }
        }
        #expect(consent.asked.withLock { $0.isEmpty })
        // Another uid cannot answer with this registration either.
        do {
            _ = try await h.service.respond(
                registration: registration, request: good, sessionTranscript: t, uid: 1001, consent: consent.ask)
            Issue.record("uid 1001 answered with uid 1000's registration")
        } catch { #expect(error.code == .unauthorized) }
        #expect(consent.asked.withLock { $0.isEmpty })
    }
}
