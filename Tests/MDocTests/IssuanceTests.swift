import CBOR
import Crypto
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import Testing
import X509Support

/// Tessera as issuer and holder against Tessera as reader: deviceSignature, validity, trust, handover.
@Suite struct IssuanceTests {
    struct Holder: Sendable {
        var iaca: ParsedCertificate
        var issuerSigned: IssuerSigned
        var deviceKey: P256.Signing.PrivateKey
    }

    static func signer(_ key: P256.Signing.PrivateKey) -> COSESigner {
        { (tbs: [UInt8]) throws(TesseraError) -> [UInt8] in
            do { return Array(try key.signature(for: tbs).rawRepresentation) } catch { throw .internalError("sign") }
        }
    }

    static func issue(
        validUntil: Date = Date(timeIntervalSinceNow: 86_400 * 30),
        validFrom: Date? = nil
    ) throws -> Holder {
        let pki = try MDocIssuer.testIACA()
        let deviceKey = P256.Signing.PrivateKey()
        let elements: [(namespace: String, items: [(String, CBORValue)])] = [
            (
                MDL.namespace,
                [
                    ("family_name", "Mustermann"), ("given_name", "Erika"),
                    ("birth_date", MDocDate.fullDate("1964-08-12")),
                    ("document_number", "T22000129"), ("issuing_country", "UT"),
                    ("portrait", .byteString([0xFF, 0xD8, 0xFF, 0xD9])),
                ]
            )
        ]
        let issued = try MDocIssuer.issue(
            docType: MDL.docType, elements: elements,
            deviceKey: try MDocECKey(uncompressedPoint: Array(deviceKey.publicKey.x963Representation)),
            signerCertificate: pki.documentSigner.certificate.der,
            signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
            signed: Date(timeIntervalSinceNow: -60), validFrom: validFrom, validUntil: validUntil)
        return Holder(
            iaca: pki.iaca.certificate, issuerSigned: try IssuerSigned(bytes: issued.encoded), deviceKey: deviceKey)
    }

    static func transcript() throws -> SessionTranscript {
        let eDevice = try MDocECKey(
            uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
        let eReader = try MDocECKey(
            uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
        let de = try DeviceEngagement.make(eDeviceKey: eDevice)
        let hs = NFCHandover.staticHandoverSelect(deviceEngagement: de)
        return SessionTranscript(
            deviceEngagementBytes: de.bytes, eReaderKeyBytes: eReader.encoded,
            handover: NFCHandover.staticHandover(handoverSelect: hs))
    }

    static func present(
        _ holder: Holder, transcript: SessionTranscript, signingKey: P256.Signing.PrivateKey? = nil,
        keep: Set<String>? = nil
    ) throws -> DeviceResponse {
        let disclosed = holder.issuerSigned.disclosing { _, id in keep?.contains(id) ?? true }
        let deviceSigned = try DeviceSigned.signed(
            sessionTranscript: transcript, docType: MDL.docType,
            signer: signer(signingKey ?? holder.deviceKey))
        let response = DeviceResponse(documents: [
            MDocDocument(
                docType: MDL.docType, issuerSigned: disclosed,
                deviceSigned: deviceSigned)
        ])
        return try DeviceResponse(bytes: response.encoded)
    }

    @Test func issuedMDLPresentedWithDeviceSignatureIsAuthentic() throws {
        let holder = try Self.issue()
        let transcript = try Self.transcript()
        let response = try Self.present(holder, transcript: transcript, keep: ["family_name", "portrait"])
        let result = MDocVerifier.verify(
            response: response, session: .init(transcript: transcript), iacas: [holder.iaca],
            now: Date())[0]
        #expect(result.reasons == [])
        #expect(result.verdict == .authentic)
        #expect(result.deviceAuthenticationKind == "deviceSignature")
        #expect(result.elements.map(\.identifier) == ["family_name", "portrait"])
        let mso = try #require(result.mso)
        #expect(Set(mso.valueDigests[MDL.namespace]!.keys) == Set(0..<6))
        #expect(result.documentSigner?.authorityKeyIdentifier == holder.iaca.subjectKeyIdentifier)
    }

    @Test func aSignatureByAnotherDeviceKeyIsInvalid() throws {
        let holder = try Self.issue()
        let transcript = try Self.transcript()
        let response = try Self.present(holder, transcript: transcript, signingKey: P256.Signing.PrivateKey())
        let result = MDocVerifier.verify(
            response: response, session: .init(transcript: transcript), iacas: [holder.iaca],
            now: Date())[0]
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons == [.deviceAuthInvalid])
    }

    @Test func aSignatureOverAnotherSessionIsInvalid() throws {
        let holder = try Self.issue()
        let response = try Self.present(holder, transcript: try Self.transcript())
        let result = MDocVerifier.verify(
            response: response, session: .init(transcript: try Self.transcript()),
            iacas: [holder.iaca], now: Date())[0]
        #expect(result.reasons == [.deviceAuthInvalid])
    }

    /// Issue #27: deviceSignature's payload is detached (ISO/IEC 18013-5 §9.1.3.6). A cloned mdoc replaying a
    /// deviceSignature captured in an earlier session, with that session's DeviceAuthenticationBytes attached, was
    /// `authentic`: the verifier used the attached payload instead of this session's.
    @Test func aReplayedDeviceSignatureWithItsPayloadAttachedIsNotAuthentic() throws {
        let holder = try Self.issue()
        let earlier = try Self.transcript()
        let now = try Self.transcript()
        let captured = try Self.present(holder, transcript: earlier).documents[0]
        let deviceSigned = try #require(captured.deviceSigned)
        var signature = try #require(deviceSigned.deviceSignature)
        signature.payload = DeviceSigned.deviceAuthenticationBytes(
            sessionTranscript: earlier, docType: MDL.docType, nameSpacesBytes: deviceSigned.nameSpacesBytes)
        // The attached payload is what the device key really signed.
        #expect(signature.verify(publicKey: Array(holder.deviceKey.publicKey.derRepresentation)))
        let replay = DeviceResponse(documents: [
            MDocDocument(
                docType: MDL.docType, issuerSigned: captured.issuerSigned,
                deviceSigned: DeviceSigned(
                    nameSpacesBytes: deviceSigned.nameSpacesBytes, deviceSignature: signature, deviceMac: nil))
        ])
        for session in [now, earlier] {
            let result = MDocVerifier.verify(
                response: try DeviceResponse(bytes: replay.encoded), session: .init(transcript: session),
                iacas: [holder.iaca], now: Date())[0]
            #expect(result.verdict == .notAuthentic)
            #expect(result.reasons == [.deviceAuthInvalid])
            #expect(result.deviceAuthentication == .invalid)
        }
    }

    /// The same for deviceMac (§9.1.3.5, detached): a COSE_Mac0 that carries a payload is invalid.
    @Test func aDeviceMacCarryingAPayloadIsInvalid() {
        let key = [UInt8](repeating: 7, count: 32)
        let earlier: [UInt8] = [1, 2, 3], now: [UInt8] = [4, 5, 6]
        var mac = COSEMac0(detachedPayload: earlier, key: key)
        #expect(mac.verify(key: key, detachedPayload: earlier))
        mac.payload = earlier
        #expect(!mac.verify(key: key, detachedPayload: now))
        #expect(!mac.verify(key: key, detachedPayload: earlier))
        #expect(mac.verify(key: key))
    }

    @Test func anExpiredMSOIsNotAuthentic() throws {
        let holder = try Self.issue(
            validUntil: Date(timeIntervalSinceNow: -10), validFrom: Date(timeIntervalSinceNow: -3600))
        let transcript = try Self.transcript()
        let response = try Self.present(holder, transcript: transcript)
        let result = MDocVerifier.verify(
            response: response, session: .init(transcript: transcript), iacas: [holder.iaca],
            now: Date())[0]
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons == [.msoExpired])
    }

    @Test func aForgedIssuerSignatureIsInvalid() throws {
        let holder = try Self.issue()
        var auth = holder.issuerSigned.issuerAuth
        auth.signature[5] ^= 0x01
        let forged = Holder(
            iaca: holder.iaca, issuerSigned: IssuerSigned(nameSpaces: holder.issuerSigned.nameSpaces, issuerAuth: auth),
            deviceKey: holder.deviceKey)
        let transcript = try Self.transcript()
        let result = MDocVerifier.verify(
            response: try Self.present(forged, transcript: transcript),
            session: .init(transcript: transcript), iacas: [holder.iaca], now: Date())[0]
        #expect(result.verdict == .notAuthentic)
        #expect(result.reasons.contains(.issuerSignatureInvalid))
    }

    @Test func readerAuthIsSignedOverTheTranscript() throws {
        let reader = try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU)
        let transcript = try Self.transcript()
        let request = try DocRequest.make(
            docType: MDL.docType, elements: [MDL.namespace: MDL.defaultElements], sessionTranscript: transcript,
            readerAuth: (
                [reader.signer.certificate.der], .es256,
                COSESign1.privateKeySigner(der: reader.signer.privateKeyDER, algorithm: .es256)
            ))
        let parsed = try DeviceRequest(bytes: DeviceRequest(docRequests: [request]).encoded)
        let doc = try #require(parsed.docRequests.first)
        #expect(doc.nameSpaces.first?.elements.map { $0.identifier } == MDL.defaultElements)
        let auth = try #require(doc.readerAuth)
        let payload = DocRequest.readerAuthenticationBytes(
            sessionTranscript: transcript, itemsRequestBytes: doc.itemsRequestBytes)
        #expect(auth.verify(publicKey: reader.signer.certificate.subjectPublicKeyInfo, detachedPayload: payload))
        #expect(try reader.signer.certificate.isSigned(by: reader.root.certificate))
    }

    @Test func staticHandoverSelectCarriesTheEngagement() throws {
        let key = try MDocECKey(uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
        let de = try DeviceEngagement.make(eDeviceKey: key)
        let message = NFCHandover.staticHandoverSelect(deviceEngagement: de)
        let records = try NDEFRecord.parseMessage(message)
        #expect(
            records.map { String(decoding: $0.type, as: UTF8.self) }
                == ["Hs", "iso.org:18013:nfc", "iso.org:18013:deviceengagement"])
        #expect(try NFCHandover.deviceEngagement(inHandoverSelect: message) == de)
        #expect(throws: TesseraError.self) {
            try NFCHandover.deviceEngagement(inHandoverSelect: Array(message.dropLast()))
        }
    }

    /// ISO/IEC 18013-5 §8.2.2.2, NFC carrier configuration record: version 0x01, then per field a length byte (type
    /// and value), the type (0x01 maximum command data length, 0x02 maximum response data length) and the value:
    /// `01 03 01 FFFF 04 02 010000` for 65535 / 65536 (as Multipaz writes and reads it). Issue #27: Tessera wrote
    /// `01 01 FFFF 02 010000` (no length bytes), which a Multipaz reader rejects.
    @Test func theNFCCarrierRecordHasTheStandardForm() throws {
        let key = try MDocECKey(uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
        let message = NFCHandover.staticHandoverSelect(deviceEngagement: try DeviceEngagement.make(eDeviceKey: key))
        let carrier = try #require(
            try NDEFRecord.parseMessage(message).first { $0.type == NFCHandover.nfcCarrierType })
        #expect(carrier.payload == Hex.decode("010301ffff0402010000"))
        #expect(carrier.id == Array("nfc".utf8))
        let parsed = try #require(try NFCHandover.nfcCarrier(inHandoverSelect: message))
        #expect(parsed == NFCCarrierConfiguration(maxCommandDataLength: 0xFFFF, maxResponseDataLength: 0x10000))
        #expect(try NFCCarrierConfiguration(payload: parsed.payload) == parsed)
        let small = NFCCarrierConfiguration(maxCommandDataLength: 255, maxResponseDataLength: 256)
        #expect(small.payload == Hex.decode("01030100ff0402000100"))
        #expect(try NFCCarrierConfiguration(payload: small.payload) == small)
        // A 2-byte response length is read too; an unknown field is skipped.
        #expect(
            try NFCCarrierConfiguration(payload: Hex.decode("010301ffff03020100020900")!)
                == NFCCarrierConfiguration(maxCommandDataLength: 0xFFFF, maxResponseDataLength: 0x100))
        // The old form, a truncated field, a missing length, another version: malformed.
        for bad in ["0101ffff02010000", "010301ffff0402", "010301ffff", "020301ffff0402010000", "01"] {
            #expect(throws: TesseraError.self) { try NFCCarrierConfiguration(payload: Hex.decode(bad)!) }
        }
    }
}

@Suite struct ReaderAuthKeyTests {
    @Test func theKeyMustMatchTheLeafCertificate() throws {
        let reader = try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU)
        let key = try ReaderAuthKey(
            privateKey: Array(reader.signer.privateKeyPEM.utf8),
            chain: [reader.signer.certificate.der, reader.root.certificate.der])
        #expect(key.algorithm == .es256)
        #expect(key.chain.count == 2)
        let signature = try key.signer([1, 2, 3])
        #expect(signature.count == 64)
        #expect(throws: TesseraError.self) {
            _ = try ReaderAuthKey(
                privateKey: Array(reader.root.privateKeyPEM.utf8), chain: [reader.signer.certificate.der])
        }
    }
}
