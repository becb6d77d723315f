import CBOR
import CredentialStore
import Crypto
import FoundationEssentials
import ICAO
import KeyStores
import Logging
import MDoc
import MDocHolderDoor
import PasskeyTestSupport
import Passkeys
import TesseraCore
import TesseraTestSupport
import Testing
import X509Support

let quietLogger = SpareTokenPasskeys.quietLogger

/// A holder service on a spare SoftHSM2 token of its own (logged in, as a PIN file does for the daemon), a
/// passkey service and the registration store over a temporary database, and a reader root it trusts.
struct HolderHarness {
    let service: MDocHolderService
    let tokenId: String
    let readerRoot: TestCertificate
    let readerSigner: TestCertificate
    let pki: (iaca: TestCertificate, documentSigner: TestCertificate)

    static func make() async throws -> HolderHarness {
        let spare = try await SpareTokenPasskeys.make(scratch: "mdoc-holder", login: true)
        let passkeys = spare.service, token = spare.token, db = spare.database
        let reader = try TestCA.generateChain(
            rootCommonName: "Reader Root", signerCommonName: "Kiosk Reader",
            signerExtendedKeyUsage: MDocIssuer.readerAuthEKU)
        let service = MDocHolderService(
            passkeys: passkeys, store: MDocRegistrationStore(database: db), readerRoots: [reader.root.certificate])
        return HolderHarness(
            service: service, tokenId: token.id, readerRoot: reader.root, readerSigner: reader.signer,
            pki: try MDocIssuer.testIACA())
    }

    var readerRootSKI: [UInt8] { readerRoot.certificate.subjectKeyIdentifier ?? [] }

    /// A device key of `uid` on the harness's token.
    func deviceKey(uid: UInt32) async throws -> (keyId: [UInt8], key: MDocECKey) {
        let made = try await service.createDeviceKey(
            tokenId: tokenId, uid: uid, pin: nil, caller: PINCaller(uid: uid, pid: 1), allowFinalPinTry: false)
        return (made.keyId, made.deviceKey)
    }

    /// An mDL issued by the test IACA for `deviceKey`: IssuerSigned CBOR.
    func issue(for deviceKey: MDocECKey) throws -> [UInt8] {
        let elements: [(namespace: String, items: [(String, CBORValue)])] = [
            (
                MDL.namespace,
                [
                    ("family_name", "Mustermann"), ("given_name", "Erika"),
                    ("birth_date", MDocDate.fullDate("1964-08-12")),
                ]
            )
        ]
        return try MDocIssuer.issue(
            docType: MDL.docType, elements: elements, deviceKey: deviceKey,
            signerCertificate: pki.documentSigner.certificate.der,
            signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
            signed: Date(timeIntervalSinceNow: -60), validUntil: Date(timeIntervalSinceNow: 86_400 * 30)
        ).encoded
    }

    /// A registration of `uid` for a fresh device key of theirs, listing the harness's reader root.
    func register(uid: UInt32, documentIdentifier: String = UUID().uuidString) async throws -> MDocRegistrationRecord {
        let key = try await deviceKey(uid: uid)
        return try await service.register(
            documentIdentifier: documentIdentifier, docType: MDL.docType, issuerSigned: issue(for: key.key),
            tokenId: tokenId, keyId: key.keyId, supportedAuthorityKeyIdentifiers: [readerRootSKI],
            invalidationDate: nil, uid: uid, isAdmin: false)
    }
}

/// A SessionTranscript of an NFC engagement with fresh ephemeral keys.
func transcript() throws -> SessionTranscript {
    let eDevice = try MDocECKey(uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
    let eReader = try MDocECKey(uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
    let de = try DeviceEngagement.make(eDeviceKey: eDevice)
    let hs = NFCHandover.staticHandoverSelect(deviceEngagement: de)
    return SessionTranscript(
        deviceEngagementBytes: de.bytes, eReaderKeyBytes: eReader.encoded,
        handover: NFCHandover.staticHandover(handoverSelect: hs))
}

/// A DeviceRequest for the mDL's names, its readerAuth signed by `signer` over `transcript` with x5chain `chain`.
func request(
    signer: TestCertificate, chain: [[UInt8]], over transcript: SessionTranscript,
    elements: [String] = ["family_name", "given_name"]
) throws -> DeviceRequest {
    let made = try DocRequest.make(
        docType: MDL.docType, elements: [MDL.namespace: elements], sessionTranscript: transcript,
        readerAuth: (chain, .es256, COSESign1.privateKeySigner(der: signer.privateKeyDER, algorithm: .es256)))
    return try DeviceRequest(bytes: DeviceRequest(docRequests: [made]).encoded)
}

/// Records whether consent was asked, and answers it.
final class ConsentLog: Sendable {
    let asked = Locked<[MDocConsentRequest]>([])
    let answer: MDocConsent
    init(_ answer: MDocConsent) { self.answer = answer }
    func ask(_ request: MDocConsentRequest) -> MDocConsent {
        asked.withLock { $0.append(request) }
        return answer
    }
}
