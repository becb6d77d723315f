import APDU
import CBOR
import Crypto
import Documents
import Emulation
import FoundationEssentials
import MDoc
import PCSC
import TesseraCore
import TesseraTestSupport
import VPCD

// One mDL read (issue 12, "Benchmark"): NFC engagement (static handover), session establishment, a DeviceRequest for
// 15 elements and the DeviceResponse with a 20 KB portrait and a deviceSignature, then session termination; read by
// `MDocNFCReader.retrieve` from an `MDocNFCHolder` (as `MDocCard`), in process (protocol cost only) and through
// pcscd + vpcd, with short APDUs (Le 256, chained ENVELOPE, GET RESPONSE) and extended length. Every read is verified
// against the IACA. Both paths go through `DocumentService.withCard`, which counts APDUs and wire bytes as
// `mdoc.read` does.

/// The 15 `org.iso.18013.5.1` elements of `tessera lab make-mdoc` without `--profile` (its built-in sample data lives
/// in the CLI executable, `LabMDoc.swift`), the built-in portrait padded as `--photo-padding 20000` pads it.
func benchMDLElements() throws(TesseraError) -> [(String, CBORValue)] {
    [
        ("family_name", "MUSTERMANN"), ("given_name", "ERIKA"), ("birth_date", MDocDate.fullDate("1964-08-12")),
        ("issue_date", MDocDate.fullDate("2024-01-15")), ("expiry_date", MDocDate.fullDate("2034-01-14")),
        ("issuing_country", "UT"), ("issuing_authority", "Utopia DMV"), ("document_number", "T22000129"),
        ("sex", 2), ("nationality", "UT"), ("age_over_18", true), ("age_over_21", true),
        ("driving_privileges", [["vehicle_category_code": "B"]]), ("un_distinguishing_sign", "UT"),
        ("portrait", .byteString(try FacePhoto.padded(FacePhoto.builtIn, to: 20_000))),
    ]
}

/// A holder releasing every requested element of `issuerSigned` with a deviceSignature by `deviceKey` (software).
func benchMDocHolder(issuerSigned: IssuerSigned, deviceKey: P256.Signing.PrivateKey) throws(TesseraError)
    -> MDocNFCHolder
{
    try MDocNFCHolder { request, transcript in
        await MDocPresentation.releasingRequested(
            request, sessionTranscript: transcript, issuerSigned: issuerSigned, docType: MDL.docType,
            deviceKey: deviceKey)
    }
}

/// The fewest APDUs one retrieval can take for the sizes of this read, with the reader's chunk `chunk` (bytes of
/// ENVELOPE data per command: 255 short, 65,535 extended) and Ne `ne` (256 short, 65,536 extended):
/// - engagement (NFC Forum Type 4 Tag): SELECT NDEF application, SELECT CC, READ BINARY CC, SELECT NDEF file,
///   READ BINARY NLEN, then ⌈NLEN / MLe⌉ READ BINARY (MLe 255): 6 when the Handover Select fits in one;
/// - SELECT mdoc application: 1;
/// - request: ⌈DO'53'(SessionEstablishment) / chunk⌉ ENVELOPE commands (CLA 0x10 chaining but the last);
/// - response: ⌈DO'53'(SessionData) / Ne⌉ response APDUs, the first of which answers the last request ENVELOPE,
///   so ⌈… / Ne⌉ − 1 GET RESPONSE commands; SessionData carries the DeviceResponse sealed by AES-GCM (+16 bytes);
/// - termination: 1 ENVELOPE of SessionData status 20 (answered 9000 without data).
/// The sizes are those of this read's own messages (CBOR and TLV headers depend only on the lengths, so encoding
/// zero bytes of the sealed lengths gives the exact sizes on the wire). Returns the five terms in that order (the
/// response as its GET RESPONSE commands); the minimum is their sum.
func minimumMDocAPDUs(retrieval: MDocRetrieval, extended: Bool) throws(TesseraError) -> [Int] {
    let chunk = extended ? 65_535 : 255
    let ne = extended ? 65_536 : 256
    let up = { (n: Int, d: Int) in (n + d - 1) / d }
    let nlen = retrieval.handoverSelect.count
    let engagement = 5 + up(nlen, 255)
    let readerKey = try MDocECKey(uncompressedPoint: Array(retrieval.eReaderKey.publicKey.x963Representation))
    let establishment = SessionEstablishment(
        eReaderKey: readerKey, data: [UInt8](repeating: 0, count: retrieval.request.encoded.count + 16))
    let requestCommands = up(TLV.encode(tag: 0x53, value: establishment.encoded).count, chunk)
    let sessionData = SessionData(data: [UInt8](repeating: 0, count: retrieval.responseBytes.count + 16))
    let responseAPDUs = up(TLV.encode(tag: 0x53, value: sessionData.encoded).count, ne)
    return [engagement, 1, requestCommands, responseAPDUs - 1, 1]
}

/// A retrieval over `transport` (opened from the existential, as `mdoc.read` does) and whether it used extended
/// length (asked for, and announced by the card's ATR).
func retrieve<T: APDUTransport>(_ transport: T, elements: [String: [String]]) async throws(TesseraError)
    -> (retrieval: MDocRetrieval, extended: Bool)
{
    let reader = MDocNFCReader(transport: transport)
    return (try await reader.retrieve(elements: elements), reader.useExtendedLength)
}

/// Issues the mDL, then reads it `runs` times per mode in process and through `pcscd` (a vpcd link on its first
/// reader); prints one line per mode.
func mdocBench(runs: Int, pcscd: PCSCDaemonFixture, context: PCSCContext) async throws {
    let pki = try MDocIssuer.testIACA()
    let deviceKey = P256.Signing.PrivateKey()
    let elements = try benchMDLElements()
    let issuerSigned = try MDocIssuer.issue(
        docType: MDL.docType, elements: [(MDL.namespace, elements)],
        deviceKey: try MDocECKey(uncompressedPoint: Array(deviceKey.publicKey.x963Representation)),
        signerCertificate: pki.documentSigner.certificate.der,
        signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
        signed: Date(timeIntervalSinceNow: -60), validUntil: Date(timeIntervalSinceNow: 365 * 86_400))
    let card = MDocCard(holder: try benchMDocHolder(issuerSigned: issuerSigned, deviceKey: deviceKey))
    let requested = [MDL.namespace: elements.map(\.0)]
    var portrait = 0
    if case .byteString(let bytes) = elements.last?.1 { portrait = bytes.count }
    print("mdoc: mDL, \(elements.count) elements requested and released, portrait \(portrait) bytes, deviceSignature")

    func measure(_ label: String, _ service: DocumentService, reader: String?, extended: Bool) async throws {
        var times: [Double] = []
        var verifyTimes: [Double] = []
        var last: (value: (retrieval: MDocRetrieval, extended: Bool), reader: String, apdus: Int, bytes: Int)?
        for _ in 0..<runs {
            let start = ContinuousClock.now
            let read = try await service.withCard(reader: reader, extendedLength: extended) {
                (transport: any APDUTransport) async throws(TesseraError) -> (retrieval: MDocRetrieval, extended: Bool)
                in
                try await retrieve(transport, elements: requested)
            }
            let readEnd = ContinuousClock.now
            let retrieval = read.value.retrieval
            let result = MDocVerifier.verify(
                response: retrieval.response,
                session: .init(transcript: retrieval.transcript, eReaderKey: retrieval.eReaderKey),
                iacas: [pki.iaca.certificate], now: Date(), expectedDocType: MDL.docType)
            let verifyEnd = ContinuousClock.now
            guard result.count == 1, result[0].verdict == .authentic, result[0].reasons.isEmpty,
                result[0].deviceAuthenticationKind == "deviceSignature", result[0].elements.count == elements.count
            else {
                fatalError("mdoc read not authentic: \(result.map { "\($0.verdict) \($0.reasons)" })")
            }
            let ms = { (d: Duration) in Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15 }
            times.append(ms(readEnd - start))
            verifyTimes.append(ms(verifyEnd - readEnd))
            last = read
        }
        let read = last!
        let negotiated = read.value.extended
        let terms = try minimumMDocAPDUs(retrieval: read.value.retrieval, extended: negotiated)
        let minimum = terms.reduce(0, +)
        let sum = terms.map(String.init).joined(separator: "+")
        let ratio = String(printf: "%.2f", Double(read.apdus) / Double(minimum))
        let pad = { (s: String, n: Int) in s + String(repeating: " ", count: max(0, n - s.count)) }
        print(
            pad(label, 35) + pad("Le \(negotiated ? 65_536 : 256)", 10)
                + pad("APDUs \(read.apdus) (min \(sum) = \(minimum), ×\(ratio))", 41)
                + pad("wire bytes \(read.bytes)", 19)
                + pad("DeviceResponse \(read.value.retrieval.responseBytes.count)", 22)
                + String(
                    printf: "median %.1f ms (min %.1f, %d runs), verify %.1f ms", median(times), times.min()!, runs,
                    median(verifyTimes)))
    }

    let memory = DocumentService(sources: [InMemorySource { card }], trustStore: nil)
    try await measure("mdoc in process, short APDUs", memory, reader: nil, extended: false)
    try await measure("mdoc in process, extended length", memory, reader: nil, extended: true)

    try await waitForCard(context, reader: pcscd.readerName, present: false)
    let link = VirtualCardLink(card: card, port: Int(pcscd.port))
    try await link.start()
    try await waitForCard(context, reader: pcscd.readerName)
    let pcsc = DocumentService(sources: [PCSCReaderSource(context: context)], trustStore: nil)
    do {
        try await measure("mdoc pcscd + vpcd, short APDUs", pcsc, reader: pcscd.readerName, extended: false)
        try await measure("mdoc pcscd + vpcd, extended length", pcsc, reader: pcscd.readerName, extended: true)
    } catch {
        await link.remove()
        throw error
    }
    await link.remove()
}
