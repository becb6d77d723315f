import APDU
import Documents
import Enrollment
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import X509Support

extension MethodTable {
    /// Registers `mdoc.read` (docs/API.md, "Mobile documents"): NFC engagement and retrieval of an mdoc in a
    /// reader of the document service, verified against the IACA anchors.
    func registerMDoc(_ documents: DocumentService, iacas: [ParsedCertificate], readerAuth: ReaderAuthKey?) {
        register("mdoc.read", .enroll) { p, connection in
            let request = try Self.mdocReadRequest(p)
            let started = ContinuousClock.now
            // `mdoc.progress` goes out in order through one forwarding task, before the result.
            let (events, sink) = AsyncStream.makeStream(of: JSONValue.self, bufferingPolicy: .bufferingNewest(64))
            let forwarder = Task { for await event in events { await connection.notify("mdoc.progress", event) } }
            defer { forwarder.cancel() }
            let read: MDocRead
            do {
                read = try await Self.readMDoc(documents, iacas: iacas, readerAuth: readerAuth, request) {
                    sink.yield($0)
                }
                sink.finish()
                await forwarder.value
            } catch {
                sink.finish()
                await forwarder.value
                throw error
            }
            let results = read.documents
            let elapsed = ContinuousClock.now - started
            let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
            return [
                "reader": .string(read.reader), "status": .number(Double(read.value.response.status)),
                "documents": .array(results.map(\.json)),
                "statistics": [
                    "apdus": .number(Double(read.apdus)), "bytes": .number(Double(read.bytes)),
                    "responseBytes": .number(Double(read.value.responseBytes.count)),
                    "durationMs": .number(ms.rounded()),
                ],
            ]
        }
    }

    /// One mdoc read in a reader of the document service, verified: the retrieval with its counters and the
    /// verification of each returned Document.
    struct MDocRead: Sendable {
        var value: MDocRetrieval
        var reader: String
        var apdus: Int
        var bytes: Int
        var documents: [MDocVerification]
    }

    /// Retrieves an mdoc (`mdoc.progress`-shaped objects to `progress`, `verify` last) and verifies it against the
    /// IACAs: the path of `mdoc.read` and of enrollment's MDOC_PHASE.
    static func readMDoc(
        _ documents: DocumentService, iacas: [ParsedCertificate], readerAuth: ReaderAuthKey?,
        _ request: MDocReadRequest, progress: @escaping @Sendable (JSONValue) -> Void
    ) async throws(TesseraError) -> MDocRead {
        let read = try await documents.withCard(reader: request.reader, extendedLength: request.extendedLength) {
            (transport: any APDUTransport) async throws(TesseraError) -> MDocRetrieval in
            try await Self.retrieve(
                transport, docType: request.docType, elements: request.elements, readerAuth: readerAuth
            ) { phase in
                let counted = (transport as? any APDUExchangeCounting)?.exchanged
                progress(Self.mdocProgress(phase, apdus: counted?.apdus, bytes: counted?.bytes))
            }
        }
        progress(Self.mdocProgress(.verify, apdus: read.apdus, bytes: read.bytes))
        let results = MDocVerifier.verify(
            response: read.value.response,
            session: .init(transcript: read.value.transcript, eReaderKey: read.value.eReaderKey),
            iacas: iacas, now: Date(), expectedDocType: request.docType)
        return MDocRead(
            value: read.value, reader: read.reader, apdus: read.apdus, bytes: read.bytes, documents: results)
    }

    /// MDOC_PHASE's mdoc reader: `readMDoc` with the daemon's IACAs and readerAuth key.
    static func mdocReading(
        _ documents: DocumentService, iacas: [ParsedCertificate], readerAuth: ReaderAuthKey?
    ) -> MDocReading {
        { order, progress throws(TesseraError) in
            let read = try await readMDoc(
                documents, iacas: iacas, readerAuth: readerAuth,
                MDocReadRequest(
                    reader: order.reader, docType: order.docType, elements: order.elements, extendedLength: true),
                progress: progress)
            return MDocReadOutcome(reader: read.reader, documents: read.documents)
        }
    }

    static func retrieve<T: APDUTransport>(
        _ transport: T, docType: String, elements: [String: [String]],
        readerAuth: ReaderAuthKey?, progress: @Sendable (MDocReadPhase) -> Void = { _ in }
    ) async throws(TesseraError) -> MDocRetrieval {
        try await MDocNFCReader(transport: transport).retrieve(
            docType: docType, elements: elements, readerAuth: readerAuth.map { ($0.chain, $0.algorithm, $0.signer) },
            progress: progress)
    }

    /// An `mdoc.progress` notification: `{phase, apdus?, bytes?}` (APDUs and bytes exchanged so far).
    static func mdocProgress(_ phase: MDocReadPhase, apdus: Int?, bytes: Int?) -> JSONValue {
        var out: [String: JSONValue] = ["phase": .string(phase.rawValue)]
        if let apdus { out["apdus"] = .number(Double(apdus)) }
        if let bytes { out["bytes"] = .number(Double(bytes)) }
        return .object(out)
    }

    /// readerAuth from `--mdoc-reader-key` and `--mdoc-reader-cert` (both or neither).
    static func loadReaderAuth(key: String?, chain: String?) throws(TesseraError) -> ReaderAuthKey? {
        guard key != nil || chain != nil else { return nil }
        guard let key, let chain else { throw .invalidInput("--mdoc-reader-key and --mdoc-reader-cert go together") }
        guard let keyData = FileManager.default.contents(atPath: key),
            let chainData = FileManager.default.contents(atPath: chain)
        else {
            throw TesseraError(.storageError, "cannot read --mdoc-reader-key or --mdoc-reader-cert")
        }
        let certificates = PEM.blocks([UInt8](chainData), label: "CERTIFICATE")
        return try ReaderAuthKey(
            privateKey: [UInt8](keyData), chain: certificates.isEmpty ? [[UInt8](chainData)] : certificates)
    }

    struct MDocReadRequest: Sendable {
        var reader: String?
        var docType: String
        var elements: [String: [String]]
        var extendedLength: Bool
    }

    /// `{reader?, docType?, elements? ["family_name" | "namespace/identifier", …], extendedLength?}`.
    static func mdocReadRequest(_ p: Params) throws(TesseraError) -> MDocReadRequest {
        var elements: [String: [String]] = [:]
        let items = try p.optionalArray("elements") ?? MDL.defaultElements.map { JSONValue.string($0) }
        for item in items {
            guard let text = item.stringValue, !text.isEmpty else {
                throw TesseraError(.invalidInput, "elements items must be strings", details: ["field": "elements"])
            }
            if let slash = text.lastIndex(of: "/") {
                elements[String(text[..<slash]), default: []].append(String(text[text.index(after: slash)...]))
            } else {
                elements[MDL.namespace, default: []].append(text)
            }
        }
        return MDocReadRequest(
            reader: try p.optionalString("reader"), docType: try p.optionalString("docType") ?? MDL.docType,
            elements: elements, extendedLength: try p.optionalBool("extendedLength") ?? true)
    }

    /// The certificates of `--iaca` (IACA anchors) or `--mdoc-reader-root` paths (PEM files with one or more
    /// certificates, or DER); `option` names the flag in errors.
    static func loadCertificates(_ paths: [String], option: String) throws(TesseraError) -> [ParsedCertificate] {
        var out: [ParsedCertificate] = []
        for path in paths {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw TesseraError(.storageError, "cannot read \(option) \(path)")
            }
            let bytes = [UInt8](data)
            let pem = PEM.blocks(bytes, label: "CERTIFICATE")
            for der in pem.isEmpty ? [bytes] : pem { out.append(try ParsedCertificate(der: der)) }
        }
        return out
    }
}
