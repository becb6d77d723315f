import APDU
import CBOR
import Crypto
import TesseraCore

/// The mdoc's side of NFC engagement and retrieval as a card answering APDUs: a Type 4 Tag with the static
/// Handover Select, and the mdoc application taking SessionEstablishment / SessionData in ENVELOPE (chained or
/// extended) and answering in DO'53' (61xx + GET RESPONSE beyond Ne). What to answer is the `responder`'s
/// decision: it gets each decrypted DeviceRequest with the SessionTranscript and returns DeviceResponse bytes,
/// or nil to end the session (status 20) without data. The transport calls `sent()` once an answer went out, so
/// that a DeviceResponse counts as delivered only when its last chunk reached the reader (`delivered`).
public actor MDocNFCHolder {
    public typealias Responder = @Sendable (DeviceRequest, SessionTranscript) async -> [UInt8]?
    public typealias Delivered = @Sendable () async -> Void

    enum Selected { case none, ndefApplication, capabilityContainer, ndefFile, mdoc }

    let eDeviceKey: P256.KeyAgreement.PrivateKey
    public nonisolated let engagement: DeviceEngagement
    public nonisolated let handoverSelect: [UInt8]
    let responder: Responder
    let delivered: Delivered
    /// Largest R-APDU data the tag announces in its CC (MLe) and the largest response chunk of ENVELOPE answers.
    let maxReadLength = 0xFF

    var selected = Selected.none
    var envelopeBuffer: [UInt8] = []
    var pendingResponse: [UInt8] = []
    var session: SessionEncryption?
    var transcript: SessionTranscript?
    /// A DeviceResponse is in `pendingResponse` (or its first chunk is being answered).
    var responseWaiting = false
    /// The answer carrying a DeviceResponse's last chunk was handed to the transport, not yet known sent.
    var lastChunkOut = false
    /// Requests received, in order (for tests and UIs).
    public private(set) var requests: [DeviceRequest] = []
    /// Whether the reader ended the session with status 20.
    public private(set) var terminated = false

    public init(
        eDeviceKey: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(),
        responder: @escaping Responder, delivered: @escaping Delivered = {}
    ) throws(TesseraError) {
        self.eDeviceKey = eDeviceKey
        engagement = try DeviceEngagement.make(
            eDeviceKey: try MDocECKey(uncompressedPoint: Array(eDeviceKey.publicKey.x963Representation)))
        handoverSelect = NFCHandover.staticHandoverSelect(deviceEngagement: engagement)
        self.responder = responder
        self.delivered = delivered
    }

    /// The transport sent the answer to the last command to the reader.
    public func sent() async {
        guard lastChunkOut else { return }
        lastChunkOut = false
        await delivered()
    }

    var ndefFile: [UInt8] { [UInt8(handoverSelect.count >> 8), UInt8(handoverSelect.count & 0xFF)] + handoverSelect }

    var capabilityContainer: [UInt8] {
        let size = ndefFile.count
        return [
            0x00, 0x0F, 0x20, 0x00, UInt8(maxReadLength), 0x00, 0xFF,
            0x04, 0x06, 0xE1, 0x04, UInt8(size >> 8), UInt8(size & 0xFF), 0x00, 0xFF,
        ]
    }

    /// Answers one command APDU (data + SW1SW2).
    public func process(_ bytes: [UInt8]) async -> [UInt8] {
        // A reader that sends a command has read the answer to the previous one.
        await sent()
        guard let command = try? CommandAPDU(parsing: bytes) else { return StatusWord.wrongLength.bytes }
        switch (command.cla & 0xEF, command.ins) {
        case (0x00, CommandAPDU.Instruction.select): return select(command)
        case (0x00, CommandAPDU.Instruction.readBinary): return readBinary(command)
        case (0x00, 0xC3): return await envelope(command)
        case (0x00, CommandAPDU.Instruction.getResponse): return getResponse(command)
        default: return StatusWord.insNotSupported.bytes
        }
    }

    func select(_ command: CommandAPDU) -> [UInt8] {
        switch (command.p1, command.data) {
        case (0x04, MDocNFC.ndefApplicationID): selected = .ndefApplication
        case (0x04, MDocNFC.mdocApplicationID):
            selected = .mdoc; envelopeBuffer = []; pendingResponse = []; responseWaiting = false
        case (0x00, [0xE1, 0x03]) where selected != .none && selected != .mdoc: selected = .capabilityContainer
        case (0x00, [0xE1, 0x04]) where selected != .none && selected != .mdoc: selected = .ndefFile
        default: return StatusWord.fileNotFound.bytes
        }
        return StatusWord.success.bytes
    }

    func readBinary(_ command: CommandAPDU) -> [UInt8] {
        let file: [UInt8]
        switch selected {
        case .capabilityContainer: file = capabilityContainer
        case .ndefFile: file = ndefFile
        default: return StatusWord.conditionsNotSatisfied.bytes
        }
        let offset = Int(command.p1 & 0x7F) << 8 | Int(command.p2)
        guard offset <= file.count else { return StatusWord.wrongP1P2Offset.bytes }
        let length = min(command.ne ?? 256, maxReadLength, file.count - offset)
        return Array(file[offset..<(offset + length)]) + StatusWord.success.bytes
    }

    func envelope(_ command: CommandAPDU) async -> [UInt8] {
        guard selected == .mdoc else { return StatusWord.conditionsNotSatisfied.bytes }
        envelopeBuffer += command.data
        guard envelopeBuffer.count < 1 << 20 else { envelopeBuffer = []; return StatusWord.wrongLength.bytes }
        if command.cla & 0x10 != 0 { return StatusWord.success.bytes }
        let received = envelopeBuffer
        envelopeBuffer = []
        guard let tlv = try? TLV.parse(received), tlv.tag == 0x53 else { return StatusWord.incorrectData.bytes }
        let answer = await handle(message: tlv.value)
        pendingResponse = answer.isEmpty ? [] : TLV.encode(tag: 0x53, value: answer)
        return respond(ne: command.ne ?? 0)
    }

    func getResponse(_ command: CommandAPDU) -> [UInt8] {
        guard !pendingResponse.isEmpty else { return StatusWord.conditionsNotSatisfied.bytes }
        return respond(ne: command.ne ?? 256)
    }

    func respond(ne: Int) -> [UInt8] {
        let chunk = Array(pendingResponse.prefix(max(ne, 1)))
        pendingResponse.removeFirst(chunk.count)
        guard !pendingResponse.isEmpty else {
            if responseWaiting { responseWaiting = false; lastChunkOut = true }
            return chunk + StatusWord.success.bytes
        }
        return chunk + [0x61, UInt8(min(pendingResponse.count, 256) & 0xFF)]
    }

    /// One reader message → the mdoc's answer (empty for none).
    func handle(message: [UInt8]) async -> [UInt8] {
        if session == nil {
            guard let establishment = try? SessionEstablishment(bytes: message) else {
                return SessionData(status: .decodingError).encoded
            }
            let transcript = SessionTranscript(
                deviceEngagementBytes: engagement.bytes,
                eReaderKeyBytes: establishment.eReaderKeyBytes,
                handover: NFCHandover.staticHandover(handoverSelect: handoverSelect))
            guard
                let keys = try? SessionEncryption(
                    role: .device, privateKey: eDeviceKey, peer: establishment.eReaderKey,
                    sessionTranscript: transcript)
            else {
                return SessionData(status: .encryptionError).encoded
            }
            session = keys
            self.transcript = transcript
            return await answer(encrypted: establishment.data)
        }
        guard let data = try? SessionData(bytes: message) else { return SessionData(status: .decodingError).encoded }
        if data.status == SessionData.Status.sessionTermination.rawValue {
            terminated = true; session = nil; transcript = nil
            return []
        }
        guard let encrypted = data.data else { return SessionData(status: .decodingError).encoded }
        return await answer(encrypted: encrypted)
    }

    func answer(encrypted: [UInt8]) async -> [UInt8] {
        guard var keys = session, let transcript else { return SessionData(status: .encryptionError).encoded }
        guard let plain = try? keys.decrypt(encrypted) else {
            session = nil
            return SessionData(status: .encryptionError).encoded
        }
        guard let request = try? DeviceRequest(bytes: plain) else {
            session = keys
            return SessionData(status: .decodingError).encoded
        }
        requests.append(request)
        guard let response = await responder(request, transcript), let sealed = try? keys.encrypt(response) else {
            session = nil; terminated = true
            return SessionData(status: .sessionTermination).encoded
        }
        session = keys
        responseWaiting = true
        return SessionData(data: sealed).encoded
    }
}

extension StatusWord {
    var bytes: [UInt8] { [sw1, sw2] }
}
