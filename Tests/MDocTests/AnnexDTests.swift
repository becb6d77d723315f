import CBOR
import Crypto
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import Testing
import X509Support

/// ISO/IEC 18013-5 Annex D, byte for byte (vectors and their source in AnnexDVectors.swift).
@Suite struct AnnexDTests {
    /// Inside the validity of the Annex D MSO (2020-10-01T13:30:02Z … 2021-10-01) and document signer.
    static let now = MDocDate.parse("2020-12-01T00:00:00Z")!

    static func transcript() throws -> SessionTranscript {
        try SessionTranscript(taggedBytes: AnnexD.sessionTranscriptBytes)
    }
    static func eReaderPrivate() throws -> P256.KeyAgreement.PrivateKey {
        try P256.KeyAgreement.PrivateKey(rawRepresentation: AnnexD.eReaderKeyD)
    }
    static func eDevicePrivate() throws -> P256.KeyAgreement.PrivateKey {
        try P256.KeyAgreement.PrivateKey(rawRepresentation: AnnexD.eDeviceKeyD)
    }

    @Test func deviceEngagementParsesAndReencodes() throws {
        let de = try DeviceEngagement(bytes: AnnexD.deviceEngagement)
        #expect(de.version == "1.0")
        #expect(de.cipherSuite == 1)
        #expect(de.eDeviceKey.x == AnnexD.eDeviceKeyX)
        #expect(de.eDeviceKey.y == AnnexD.eDeviceKeyY)
        #expect(de.retrievalMethods.count == 1)
        let rebuilt = try DeviceEngagement.make(eDeviceKey: de.eDeviceKey, retrievalMethods: de.retrievalMethods)
        #expect(rebuilt.bytes == AnnexD.deviceEngagement)
        // The private key published for EDeviceKey is the one engaged.
        #expect(Array(try Self.eDevicePrivate().publicKey.x963Representation) == de.eDeviceKey.uncompressedPoint)
    }

    @Test func sessionTranscriptIsBuiltByteForByte() throws {
        let vector = try Self.transcript()
        let parts = try CBORValue(decoding: vector.encoded, options: MDocCBOR.options).arrayValue!
        // The transcript is of the NFC engagement (negotiated handover): its DeviceEngagement has no retrieval
        // methods, and carries the same EDeviceKey as the QR engagement of D.3.1.
        let engagement = try DeviceEngagement(bytes: try MDocCBOR.untag24(parts[0], "DeviceEngagementBytes"))
        #expect(engagement.retrievalMethods.isEmpty)
        #expect(engagement.eDeviceKey == (try DeviceEngagement(bytes: AnnexD.deviceEngagement)).eDeviceKey)
        let rebuilt = try DeviceEngagement.make(eDeviceKey: engagement.eDeviceKey)
        let eReaderKey = try MDocECKey(curve: 1, x: AnnexD.eReaderKeyX, y: AnnexD.eReaderKeyY)
        let built = SessionTranscript(
            deviceEngagementBytes: rebuilt.bytes, eReaderKeyBytes: eReaderKey.encoded,
            handover: parts[2])
        #expect(built.taggedBytes == AnnexD.sessionTranscriptBytes)
    }

    @Test func sessionEstablishmentDecryptsToTheDeviceRequest() throws {
        let establishment = try SessionEstablishment(bytes: AnnexD.sessionEstablishment)
        #expect(establishment.eReaderKey.x == AnnexD.eReaderKeyX)
        let de = try DeviceEngagement(bytes: AnnexD.deviceEngagement)
        _ = de
        var device = try SessionEncryption(
            role: .device, privateKey: try Self.eDevicePrivate(),
            peer: establishment.eReaderKey, sessionTranscript: try Self.transcript())
        #expect(try device.decrypt(establishment.data) == AnnexD.deviceRequest)
        #expect(device.receiveCounter == 2)
    }

    @Test func readerEncryptsTheSessionEstablishmentByteForByte() throws {
        let de = try DeviceEngagement(bytes: AnnexD.deviceEngagement)
        var reader = try SessionEncryption(
            role: .reader, privateKey: try Self.eReaderPrivate(), peer: de.eDeviceKey,
            sessionTranscript: try Self.transcript())
        let data = try reader.encrypt(AnnexD.deviceRequest)
        let eReaderKey = try MDocECKey(uncompressedPoint: Array(try Self.eReaderPrivate().publicKey.x963Representation))
        #expect(SessionEstablishment(eReaderKey: eReaderKey, data: data).encoded == AnnexD.sessionEstablishment)
    }

    @Test func sessionKeysAgreeOnBothSides() throws {
        let de = try DeviceEngagement(bytes: AnnexD.deviceEngagement)
        let eReaderKey = try MDocECKey(curve: 1, x: AnnexD.eReaderKeyX, y: AnnexD.eReaderKeyY)
        let r = try SessionEncryption.sessionKeys(
            privateKey: try Self.eReaderPrivate(), peer: de.eDeviceKey,
            sessionTranscript: try Self.transcript())
        let d = try SessionEncryption.sessionKeys(
            privateKey: try Self.eDevicePrivate(), peer: eReaderKey,
            sessionTranscript: try Self.transcript())
        #expect(r.skReader == d.skReader)
        #expect(r.skDevice == d.skDevice)
        #expect(r.skReader != r.skDevice)
        // Device → reader: the DeviceResponse in SessionData, decrypted by the reader; a replay fails (counter).
        var device = try SessionEncryption(
            role: .device, privateKey: try Self.eDevicePrivate(), peer: eReaderKey,
            sessionTranscript: try Self.transcript())
        var reader = try SessionEncryption(
            role: .reader, privateKey: try Self.eReaderPrivate(), peer: de.eDeviceKey,
            sessionTranscript: try Self.transcript())
        let message = try device.encrypt(AnnexD.deviceResponse)
        let sessionData = try SessionData(bytes: SessionData(data: message).encoded)
        #expect(try reader.decrypt(sessionData.data!) == AnnexD.deviceResponse)
        #expect(throws: TesseraError.self) { try reader.decrypt(message) }
    }

    @Test func sessionTerminationIsStatus20() throws {
        #expect(SessionData(status: .sessionTermination).encoded == AnnexD.sessionTermination)
        let parsed = try SessionData(bytes: AnnexD.sessionTermination)
        #expect(parsed.status == 20 && parsed.data == nil)
    }

    @Test func deviceRequestParsesReencodesAndItsReaderAuthVerifies() throws {
        let request = try DeviceRequest(bytes: AnnexD.deviceRequest)
        #expect(request.encoded == AnnexD.deviceRequest)
        let doc = try #require(request.docRequests.first)
        #expect(doc.docType == MDL.docType)
        #expect(
            doc.nameSpaces.first?.elements.map { $0.identifier }
                == ["family_name", "document_number", "driving_privileges", "issue_date", "expiry_date", "portrait"])
        #expect(doc.nameSpaces.first?.elements.map { $0.intentToRetain } == [true, true, true, true, true, false])
        let auth = try #require(doc.readerAuth)
        let readerCert = try ParsedCertificate(der: try #require(auth.x5chain.first))
        #expect(try readerCert.isSigned(by: try ParsedCertificate(der: AnnexD.readerRootCertificate)))
        let payload = DocRequest.readerAuthenticationBytes(
            sessionTranscript: try Self.transcript(),
            itemsRequestBytes: doc.itemsRequestBytes)
        #expect(auth.verify(publicKey: readerCert.subjectPublicKeyInfo, detachedPayload: payload))
        // Over another transcript the same signature does not verify.
        let other = SessionTranscript(deviceEngagementBytes: [0xA0], eReaderKeyBytes: [0xA0], handover: .null)
        #expect(
            !auth.verify(
                publicKey: readerCert.subjectPublicKeyInfo,
                detachedPayload: DocRequest.readerAuthenticationBytes(
                    sessionTranscript: other,
                    itemsRequestBytes: doc.itemsRequestBytes)))
    }

    @Test func deviceResponseReencodesAndCarriesTheDocumentSigner() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        #expect(response.encoded == AnnexD.deviceResponse)
        #expect(response.status == 0)
        let doc = try #require(response.documents.first)
        #expect(doc.issuerSigned.issuerAuth.x5chain == [AnnexD.documentSignerCertificate])
        let ds = try ParsedCertificate(der: AnnexD.documentSignerCertificate)
        #expect(try ds.isSigned(by: try ParsedCertificate(der: AnnexD.iacaCertificate)))
        let mso = try MobileSecurityObject(issuerAuth: doc.issuerSigned.issuerAuth)
        #expect(mso.deviceKey.x == AnnexD.deviceKeyX && mso.deviceKey.y == AnnexD.deviceKeyY)
        #expect(mso.docType == MDL.docType)
        #expect(MDocDate.format(mso.signed) == "2020-10-01T13:30:02Z")
    }

    @Test func annexDResponseIsAuthentic() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let session = MDocVerifier.Session(transcript: try Self.transcript(), eReaderKey: try Self.eReaderPrivate())
        let iaca = try ParsedCertificate(der: AnnexD.iacaCertificate)
        let result = try #require(
            MDocVerifier.verify(response: response, session: session, iacas: [iaca], now: Self.now).first)
        #expect(result.reasons == [])
        #expect(result.verdict == .authentic)
        #expect(result.deviceAuthenticationKind == "deviceMac")
        #expect(result.deviceAuthentication == .valid)
        #expect(result.elements.count == 6)
        #expect(result.element("family_name") == "Doe")
        #expect(result.element("document_number") == "123456789")
        #expect(result.element("portrait")?.bytesValue?.count == 1042)
    }

    @Test func tamperedElementIsADigestMismatch() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let doc = response.documents[0]
        let ns = doc.issuerSigned.nameSpaces[0]
        var items = ns.items
        let original = items[0]
        items[0] = try IssuerSignedItem.make(
            digestID: original.digestID, random: original.random,
            identifier: original.elementIdentifier, value: "Roe")
        let tampered = MDocDocument(
            docType: doc.docType,
            issuerSigned: IssuerSigned(nameSpaces: [(ns.namespace, items)], issuerAuth: doc.issuerSigned.issuerAuth),
            deviceSigned: doc.deviceSigned)
        let session = MDocVerifier.Session(transcript: try Self.transcript(), eReaderKey: try Self.eReaderPrivate())
        let result = MDocVerifier.verify(
            document: tampered, session: session,
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)], now: Self.now)
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons == [.digestMismatch])
        #expect(result.elements.first?.digestValid == false)
        #expect(result.elements.dropFirst().allSatisfy { $0.digestValid })
    }

    @Test func afterValidUntilTheMSOIsExpired() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let session = MDocVerifier.Session(transcript: try Self.transcript(), eReaderKey: try Self.eReaderPrivate())
        let result = MDocVerifier.verify(
            response: response, session: session,
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)],
            now: MDocDate.parse("2021-11-01T00:00:00Z")!)[0]
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons.contains(.msoExpired))
        let early = MDocVerifier.verify(
            response: response, session: session,
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)],
            now: MDocDate.parse("2020-10-01T13:00:00Z")!)[0]
        #expect(early.reasons.contains(.msoNotYetValid))
    }

    @Test func anotherIACAIsUntrustedAndNoIACAIsUnverified() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let session = MDocVerifier.Session(transcript: try Self.transcript(), eReaderKey: try Self.eReaderPrivate())
        let other = try MDocIssuer.testIACA().iaca.certificate
        let wrong = MDocVerifier.verify(response: response, session: session, iacas: [other], now: Self.now)[0]
        #expect(wrong.verdict == .notAuthentic)
        #expect(wrong.reasons == [.untrustedIssuer])
        let none = MDocVerifier.verify(response: response, session: session, iacas: [], now: Self.now)[0]
        #expect(none.verdict == .unverified)
        #expect(none.reasons == [.noTrustAnchor])
    }

    @Test func deviceMacOverAnotherTranscriptIsInvalid() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let de = try DeviceEngagement(bytes: AnnexD.deviceEngagement)
        let other = SessionTranscript(
            deviceEngagementBytes: de.bytes, eReaderKeyBytes: de.eDeviceKeyBytes, handover: .null)
        let result = MDocVerifier.verify(
            response: response,
            session: .init(transcript: other, eReaderKey: try Self.eReaderPrivate()),
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)], now: Self.now)[0]
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons == [.deviceAuthInvalid])
        let unchecked = MDocVerifier.verify(
            response: response, session: nil,
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)], now: Self.now)[0]
        #expect(unchecked.verdict == .unverified)
        #expect(unchecked.reasons == [.deviceAuthNotChecked])
    }

    @Test func wrongDocTypeIsReported() throws {
        let response = try DeviceResponse(bytes: AnnexD.deviceResponse)
        let session = MDocVerifier.Session(transcript: try Self.transcript(), eReaderKey: try Self.eReaderPrivate())
        let result = MDocVerifier.verify(
            response: response, session: session,
            iacas: [try ParsedCertificate(der: AnnexD.iacaCertificate)], now: Self.now,
            expectedDocType: "org.iso.23220.photoid.1")[0]
        #expect(result.reasons == [.docTypeMismatch])
    }
}
