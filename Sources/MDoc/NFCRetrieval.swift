import APDU
import CBOR
import Crypto
import TesseraCore

/// Application identifiers of NFC engagement and retrieval.
public enum MDocNFC {
    /// NFC Forum Type 4 Tag NDEF application.
    public static let ndefApplicationID: [UInt8] = [0xD2, 0x76, 0x00, 0x00, 0x85, 0x01, 0x01]
    /// ISO/IEC 18013-5 mdoc application.
    public static let mdocApplicationID: [UInt8] = [0xA0, 0x00, 0x00, 0x02, 0x48, 0x04, 0x00]
}

/// ISO/IEC 18013-5 NFC engagement and data retrieval as APDUs (§8.2.2.1 static handover on a Type 4 Tag,
/// §8.3.3.1.2 ENVELOPE / GET RESPONSE), the reader's side, over any `APDUTransport`.
public struct MDocNFCReader<Transport: APDUTransport>: Sendable {
    public let transport: Transport
    /// Send whole messages in one extended-length ENVELOPE when the transport allows it.
    public var useExtendedLength: Bool

    public init(transport: Transport, useExtendedLength: Bool? = nil) {
        self.transport = transport
        self.useExtendedLength = useExtendedLength ?? transport.supportsExtendedLength
    }

    /// Reads the NDEF message of the Type 4 Tag: SELECT the NDEF application, the CC file (E103), the NDEF file
    /// it names, its NLEN and then its contents in chunks of the tag's MLe.
    public func readHandoverSelect() async throws(TesseraError) -> [UInt8] {
        try await expectSuccess(
            CommandAPDU.select(aid: MDocNFC.ndefApplicationID, returning: .fci, ne: 256),
            "SELECT NDEF application")
        try await expectSuccess(CommandAPDU.select(fileID: 0xE103), "SELECT CC file")
        let cc = try await expectSuccess(CommandAPDU.readBinary(offset: 0, ne: 15), "READ BINARY CC")
        guard cc.count >= 15, cc[7] == 0x04 else {
            throw MDocCBOR.malformed("Type 4 Tag CC file has no NDEF file control TLV")
        }
        let mle = max(1, min(Int(cc[3]) << 8 | Int(cc[4]), 255))
        try await expectSuccess(CommandAPDU.select(fileID: UInt16(cc[9]) << 8 | UInt16(cc[10])), "SELECT NDEF file")
        let nlenBytes = try await expectSuccess(CommandAPDU.readBinary(offset: 0, ne: 2), "READ BINARY NLEN")
        guard nlenBytes.count == 2 else { throw MDocCBOR.malformed("NDEF file has no NLEN") }
        let nlen = Int(nlenBytes[0]) << 8 | Int(nlenBytes[1])
        var message: [UInt8] = []
        while message.count < nlen {
            let offset = 2 + message.count
            let chunk = try await expectSuccess(
                CommandAPDU.readBinary(offset: offset, ne: min(mle, nlen - message.count)),
                "READ BINARY NDEF")
            guard !chunk.isEmpty else { throw MDocCBOR.malformed("NDEF file shorter than its NLEN") }
            message += chunk
        }
        return Array(message.prefix(nlen))
    }

    /// SELECT the mdoc application (AID A0000002480400).
    public func selectMDocApplication() async throws(TesseraError) {
        try await expectSuccess(
            CommandAPDU.select(aid: MDocNFC.mdocApplicationID), "SELECT mdoc application")
    }

    /// Sends one message (SessionEstablishment or SessionData) in DO'53' with ENVELOPE — chained (CLA 0x10) in
    /// 255-byte commands, or one extended-length command — and returns the mdoc's message from DO'53' of the
    /// responses (GET RESPONSE on 61xx).
    public func envelope(_ message: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let wrapped = TLV.encode(tag: 0x53, value: message)
        let chunkSize = useExtendedLength ? 65_535 : 255
        var offset = 0
        var response = ResponseAPDU(sw: .success)
        repeat {
            let end = min(offset + chunkSize, wrapped.count)
            let last = end == wrapped.count
            let command = CommandAPDU(
                cla: last ? 0x00 : 0x10, ins: 0xC3, p1: 0, p2: 0, data: Array(wrapped[offset..<end]),
                ne: last ? (useExtendedLength ? 65_536 : 256) : nil, forceExtended: useExtendedLength)
            response = try await transport.send(command)
            guard response.sw.isSuccess else {
                throw TesseraError(.cardError, "mdoc: ENVELOPE answered \(response.sw)")
            }
            offset = end
        } while offset < wrapped.count
        if response.data.isEmpty { return [] }
        let tlv = try TLV.parse(response.data)
        guard tlv.tag == 0x53 else { throw MDocCBOR.malformed("ENVELOPE response is not DO'53'") }
        return tlv.value
    }

    @discardableResult
    func expectSuccess(_ command: CommandAPDU, _ what: String) async throws(TesseraError) -> [UInt8] {
        let response = try await transport.send(command)
        guard response.sw.isSuccess else { throw TesseraError(.cardError, "mdoc: \(what) answered \(response.sw)") }
        return response.data
    }
}

/// The phases of a reader's mdoc read, each reported as it starts: the Handover Select read (`engagement`), session
/// keys and SELECT of the mdoc application (`session`), the DeviceRequest in SessionEstablishment (`request`), the
/// DeviceResponse decrypted and the session ended (`response`), and the verifier's checks (`verify`, by the caller).
public enum MDocReadPhase: String, Sendable, CaseIterable {
    case engagement, session, request, response, verify
}

/// What one NFC retrieval produced.
public struct MDocRetrieval: Sendable {
    public var engagement: DeviceEngagement
    public var handoverSelect: [UInt8]
    public var transcript: SessionTranscript
    public var request: DeviceRequest
    /// The decrypted DeviceResponse bytes, and the parsed response.
    public var responseBytes: [UInt8]
    public var response: DeviceResponse
    /// The reader's ephemeral key (for deviceMac).
    public var eReaderKey: P256.KeyAgreement.PrivateKey
}

extension MDocNFCReader {
    /// A whole retrieval: engagement from the Handover Select, session establishment with a fresh EReaderKey,
    /// the DeviceRequest for `elements` of `docType` (readerAuth when given), the DeviceResponse, then
    /// SessionData status 20. The response is returned unverified (see `MDocVerifier`). `progress` hears each
    /// phase as it starts (all but `verify`).
    public func retrieve(
        docType: String = MDL.docType, elements: [String: [String]],
        readerAuth: (chain: [[UInt8]], algorithm: COSEAlgorithm, signer: COSESigner)? = nil,
        eReaderKey: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(),
        progress: @Sendable (MDocReadPhase) -> Void = { _ in }
    )
        async throws(TesseraError) -> MDocRetrieval
    {
        progress(.engagement)
        let handoverSelect = try await readHandoverSelect()
        let engagement = try NFCHandover.deviceEngagement(inHandoverSelect: handoverSelect)
        let readerKey = try MDocECKey(uncompressedPoint: Array(eReaderKey.publicKey.x963Representation))
        progress(.session)
        let transcript = SessionTranscript(
            deviceEngagementBytes: engagement.bytes, eReaderKeyBytes: readerKey.encoded,
            handover: NFCHandover.staticHandover(handoverSelect: handoverSelect))
        var session = try SessionEncryption(
            role: .reader, privateKey: eReaderKey, peer: engagement.eDeviceKey,
            sessionTranscript: transcript)
        let request = DeviceRequest(docRequests: [
            try DocRequest.make(
                docType: docType, elements: elements, sessionTranscript: transcript, readerAuth: readerAuth)
        ])
        try await selectMDocApplication()
        progress(.request)
        let establishment = SessionEstablishment(eReaderKey: readerKey, data: try session.encrypt(request.encoded))
        let answer = try SessionData(bytes: try await envelope(establishment.encoded))
        guard let data = answer.data else {
            throw TesseraError(
                .cardError,
                "mdoc ended the session (status \(answer.status.map { "\($0)" } ?? "none")) without a response")
        }
        progress(.response)
        let responseBytes = try session.decrypt(data)
        let response = try DeviceResponse(bytes: responseBytes)
        if answer.status != SessionData.Status.sessionTermination.rawValue {
            _ = try? await envelope(SessionData(status: .sessionTermination).encoded)
        }
        return MDocRetrieval(
            engagement: engagement, handoverSelect: handoverSelect, transcript: transcript, request: request,
            responseBytes: responseBytes, response: response, eReaderKey: eReaderKey)
    }
}
