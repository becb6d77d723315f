import Crypto
import FoundationEssentials
import MDoc
import TesseraCore

/// ISO/IEC 18013-5 bytes from a holder or a reader: DeviceEngagement, the NFC Handover Select, SessionEstablishment,
/// SessionData, DeviceRequest (with the holder's readerAuth trust decision) and DeviceResponse (verified with a
/// fixed transcript, time and no anchors); ISO/IEC 18013-7 Annex C: the request data (JSON `{deviceRequest,
/// encryptionInfo, origin}`) or an EncryptionInfo, and an EncryptedResponse opened with a fixed recipient key.
enum MDocTarget {
    static let transcript = SessionTranscript(deviceEngagementBytes: [0xA0], eReaderKeyBytes: [0xA0], handover: .null)
    static let now = Date(timeIntervalSince1970: 1_606_780_800)
    static let recipient = try! P256.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 0x11, count: 32))

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        switch selector % 8 {
        case 0: _ = try? DeviceEngagement(bytes: bytes)
        case 1:
            _ = try? NFCHandover.deviceEngagement(inHandoverSelect: bytes)
            _ = try? NFCHandover.nfcCarrier(inHandoverSelect: bytes)
        case 2: _ = try? SessionEstablishment(bytes: bytes)
        case 3: _ = try? SessionData(bytes: bytes)
        case 4:
            if let request = try? DeviceRequest(bytes: bytes) {
                _ = request.encoded
                for doc in request.docRequests {
                    let payload = DocRequest.readerAuthenticationBytes(
                        sessionTranscript: transcript,
                        itemsRequestBytes: doc.itemsRequestBytes)
                    if let auth = doc.readerAuth, let der = auth.x5chain.first {
                        _ = auth.verify(publicKey: der, detachedPayload: payload)
                    }
                    // The holder's checks before the root: detached payload, x5chain certificates, EKU, links.
                    _ = try? MDocReaderTrust.signedChain(doc, sessionTranscript: transcript, now: now)
                    _ = MDocElementSelection.requested(doc)
                }
            }
        case 6:
            if bytes.first == UInt8(ascii: "{"), let json = try? JSONValue.parse(bytes) {
                if let request = try? AnnexCRequest(json: json), case .string(let origin)? = json["origin"] {
                    _ = try? request.sessionTranscript(origin: origin)
                }
            } else if let info = try? AnnexCEncryptionInfo(base64url: Base64URL.encode(bytes)) {
                _ = SessionTranscript(dcapiEncryptionInfo: info.base64url, origin: "https://verifier.example")
            }
        case 7:
            if let response = try? AnnexCEncryptedResponse(bytes: bytes) {
                _ = try? AnnexC.open(response, recipientPrivateKey: recipient, sessionTranscript: transcript)
            }
        default:
            if let response = try? DeviceResponse(bytes: bytes) {
                _ = response.encoded
                for result in MDocVerifier.verify(
                    response: response, session: .init(transcript: transcript), iacas: [], now: now)
                {
                    _ = result.json
                }
            }
        }
    }
}
