import APDU
import CBOR
import Crypto
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import Testing

/// The reader's APDU sequence against the holder's card side, in process: static handover, session, request,
/// response over short (chained, GET RESPONSE) and extended-length ENVELOPEs.
@Suite struct NFCRetrievalTests {
    actor APDULog {
        var commands = 0, commandBytes = 0, responseBytes = 0, envelopes = 0, getResponses = 0
        func add(_ command: [UInt8], _ response: [UInt8]) {
            commands += 1; commandBytes += command.count; responseBytes += response.count
            if command.count > 1, command[1] == 0xC3 { envelopes += 1 }
            if command.count > 1, command[1] == 0xC0 { getResponses += 1 }
        }
    }

    struct HolderTransport: APDUTransport {
        let holder: MDocNFCHolder
        let extended: Bool
        let log = APDULog()
        func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
            let response = await holder.process(command)
            await log.add(command, response)
            return response
        }
        var supportsExtendedLength: Bool { extended }
    }

    /// A holder presenting `mdl`: releases what was requested, signs DeviceAuthentication with the device key.
    static func holder(_ mdl: IssuanceTests.Holder, answer: Bool = true) throws -> MDocNFCHolder {
        let deviceKey = mdl.deviceKey
        let issuerSigned = mdl.issuerSigned
        return try MDocNFCHolder { request, transcript in
            guard answer, let doc = request.docRequests.first else { return nil }
            let wanted = Set(doc.nameSpaces.flatMap { ns in ns.elements.map { "\(ns.namespace)/\($0.identifier)" } })
            let signer: COSESigner = { (tbs: [UInt8]) throws(TesseraError) -> [UInt8] in
                do { return Array(try deviceKey.signature(for: tbs).rawRepresentation) } catch {
                    throw .internalError("sign")
                }
            }
            guard
                let deviceSigned = try? DeviceSigned.signed(
                    sessionTranscript: transcript, docType: doc.docType, signer: signer)
            else { return nil }
            let disclosed = issuerSigned.disclosing { wanted.contains("\($0)/\($1)") }
            return DeviceResponse(documents: [
                MDocDocument(
                    docType: doc.docType, issuerSigned: disclosed,
                    deviceSigned: deviceSigned)
            ]).encoded
        }
    }

    static func portraitMDL() throws -> IssuanceTests.Holder {
        var mdl = try IssuanceTests.issue()
        // Re-issue with a 20 KB portrait so the response spans many APDUs.
        let pki = try MDocIssuer.testIACA()
        let elements: [(namespace: String, items: [(String, CBORValue)])] = [
            (
                MDL.namespace,
                [
                    ("family_name", "Mustermann"), ("given_name", "Erika"),
                    ("birth_date", MDocDate.fullDate("1964-08-12")),
                    ("document_number", "T22000129"), ("expiry_date", MDocDate.fullDate("2034-01-01")),
                    ("issuing_country", "UT"),
                    ("portrait", .byteString(SecureRandom.bytes(20_000))), ("sex", 2),
                ]
            )
        ]
        mdl.issuerSigned = try MDocIssuer.issue(
            docType: MDL.docType, elements: elements,
            deviceKey: try MDocECKey(uncompressedPoint: Array(mdl.deviceKey.publicKey.x963Representation)),
            signerCertificate: pki.documentSigner.certificate.der,
            signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
            signed: Date(timeIntervalSinceNow: -60), validUntil: Date(timeIntervalSinceNow: 86_400))
        mdl.iaca = pki.iaca.certificate
        return mdl
    }

    @Test(arguments: [false, true]) func retrievalReleasesTheRequestedElements(extended: Bool) async throws {
        let mdl = try Self.portraitMDL()
        let holder = try Self.holder(mdl)
        let transport = HolderTransport(holder: holder, extended: extended)
        let reader = MDocNFCReader(transport: transport)
        let retrieval = try await reader.retrieve(elements: [MDL.namespace: MDL.defaultElements])
        let result = MDocVerifier.verify(
            response: retrieval.response,
            session: .init(transcript: retrieval.transcript, eReaderKey: retrieval.eReaderKey),
            iacas: [mdl.iaca], now: Date())[0]
        #expect(result.verdict == .authentic)
        #expect(result.reasons == [])
        // Requested and issued: all but given_name/birth_date etc. that were issued; sex was not requested.
        #expect(
            Set(result.elements.map(\.identifier))
                == [
                    "portrait", "family_name", "given_name", "birth_date", "document_number", "expiry_date",
                    "issuing_country",
                ])
        #expect(result.element("portrait")?.bytesValue?.count == 20_000)
        #expect(await holder.requests.count == 1)
        #expect(await holder.terminated)
        let log = transport.log
        if extended {
            #expect(await log.envelopes == 2)  // request, termination
            #expect(await log.getResponses == 0)
        } else {
            #expect(await log.getResponses >= retrieval.responseBytes.count / 256)
        }
    }

    @Test func progressReportsEachPhaseInOrder() async throws {
        let holder = try Self.holder(try IssuanceTests.issue())
        let reader = MDocNFCReader(transport: HolderTransport(holder: holder, extended: true))
        let phases = Locked<[MDocReadPhase]>([])
        _ = try await reader.retrieve(elements: [MDL.namespace: ["family_name"]]) { phase in
            phases.withLock { $0.append(phase) }
        }
        #expect(phases.withLock { $0 } == [.engagement, .session, .request, .response])

        // A holder that declines: no response phase.
        let declining = try Self.holder(try IssuanceTests.issue(), answer: false)
        let seen = Locked<[MDocReadPhase]>([])
        await #expect(throws: TesseraError.self) {
            _ = try await MDocNFCReader(transport: HolderTransport(holder: declining, extended: true)).retrieve(
                elements: [MDL.namespace: ["family_name"]]
            ) { phase in seen.withLock { $0.append(phase) } }
        }
        #expect(seen.withLock { $0 } == [.engagement, .session, .request])
    }

    @Test func aHolderThatDeclinesEndsTheSessionWithoutData() async throws {
        let mdl = try IssuanceTests.issue()
        let holder = try Self.holder(mdl, answer: false)
        let reader = MDocNFCReader(transport: HolderTransport(holder: holder, extended: false))
        await #expect(throws: TesseraError.self) {
            _ = try await reader.retrieve(elements: [MDL.namespace: ["family_name"]])
        }
        #expect(await holder.terminated)
    }

    @Test func theHandoverSelectIsReadFromTheType4Tag() async throws {
        let holder = try Self.holder(try IssuanceTests.issue())
        let reader = MDocNFCReader(transport: HolderTransport(holder: holder, extended: false))
        let message = try await reader.readHandoverSelect()
        #expect(message == holder.handoverSelect)
        #expect(try NFCHandover.deviceEngagement(inHandoverSelect: message) == holder.engagement)
    }

    /// A Type 4 Tag whose NDEF file announces NLEN FFFF and answers every READ BINARY with as many zero bytes as asked.
    actor LongNDEFTag: APDUTransport {
        var selected: [UInt8] = []
        var readBinaryP1s: [UInt8] = []
        nonisolated func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
            await answer(try CommandAPDU(parsing: command))
        }
        func answer(_ command: CommandAPDU) -> [UInt8] {
            switch command.ins {
            case 0xA4:
                selected = command.data
                return [0x90, 0x00]
            case 0xB0:
                readBinaryP1s.append(command.p1)
                if selected == [0xE1, 0x03] {
                    // CCLEN 000F, mapping 2.0, MLe 00FF, MLc 00FF, NDEF file control TLV: E104, size FFFF, open.
                    return [0x00, 0x0F, 0x20, 0x00, 0xFF, 0x00, 0xFF, 0x04, 0x06, 0xE1, 0x04, 0xFF, 0xFF, 0x00, 0x00]
                        + [0x90, 0x00]
                }
                if command.p1 == 0, command.p2 == 0 { return [0xFF, 0xFF, 0x90, 0x00] }
                return [UInt8](repeating: 0, count: command.ne ?? 0) + [0x90, 0x00]
            default:
                return [0x6D, 0x00]
            }
        }
    }

    /// READ BINARY's P1 b8 means "short EF identifier" (ISO/IEC 7816-4 §7.2.3): an NDEF message reaching past offset
    /// 7FFF is refused, never read with a P1 that names another file.
    @Test func anNDEFMessagePastOffset7FFFIsRefused() async throws {
        let tag = LongNDEFTag()
        let reader = MDocNFCReader(transport: tag, useExtendedLength: false)
        await #expect(throws: TesseraError.self) { _ = try await reader.readHandoverSelect() }
        let p1s = await tag.readBinaryP1s
        #expect(p1s.count > 100)
        #expect(
            p1s.allSatisfy { $0 & 0x80 == 0 }, "READ BINARY with P1 b8 set: \(p1s.filter { $0 & 0x80 != 0 }.prefix(3))")
    }
}
