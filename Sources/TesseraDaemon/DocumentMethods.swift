import AccessControl
import Documents
import Enrollment
import FoundationEssentials
import MRZ
import RPC
import TesseraCore

extension MethodTable {
    /// Registers `readers.list` and `documents.read` (docs/API.md, "Documents").
    /// `verifiedReads`: where an authentic read's identity is kept for `passkey.enroll {documentBinding}`.
    func registerDocumentReading(_ service: DocumentService, verifiedReads: VerifiedDocumentReads? = nil) {
        if let verifiedReads { onClose { verifiedReads.forget($0) } }
        register("readers.list", .read) { _, _ in
            ["readers": .array(try await service.readers().map(Views.reader))]
        }
        register("documents.read", .enroll) { p, connection in
            let request = try Self.documentReadRequest(p)
            // Progress goes out in order through one forwarding task; the result is sent after the last event.
            let (events, sink) = AsyncStream.makeStream(
                of: DocumentReadProgress.self, bufferingPolicy: .bufferingNewest(1024))
            let forwarder = Task {
                for await event in events { await connection.notify("documents.progress", event.json) }
            }
            defer { forwarder.cancel() }
            do {
                let result = try await service.read(request) { sink.yield($0) }
                sink.finish()
                await forwarder.value
                verifiedReads?.record(
                    connection,
                    result.verdict.verdict == .authentic
                        ? result.mrz.map {
                            AuthenticRead(mrz: $0, chipAuthenticity: result.verdict.chipAuthenticity, at: Date())
                        } : nil)
                return result.json
            } catch {
                sink.finish()
                await forwarder.value
                throw error
            }
        }
    }

    /// Registers `trust.status` (read) and `trust.reload` (admin) (docs/API.md, "Trust anchors"): the documents'
    /// anchors and CRLs, and the badges' (`badges`) when `accessControl` is configured.
    func registerTrust(_ service: DocumentService, badges: AccessDoor? = nil) {
        @Sendable func status() -> JSONValue {
            guard let badges, case .object(var o) = service.trustStatus() else { return service.trustStatus() }
            o["badges"] = badges.trustStatus()
            return .object(o)
        }
        register("trust.status", .read) { _, _ in status() }
        register("trust.reload", .admin) { _, _ in
            // Without document trust files, a daemon with badges reloads the badges' alone.
            let documentFiles = service.trustSources.map {
                !($0.cscaPaths.isEmpty && $0.masterListTrustPaths.isEmpty && $0.crlPaths.isEmpty)
            }
            if documentFiles == true || badges == nil { try await service.reloadTrust() }
            try await badges?.reloadTrust()
            return status()
        }
    }

    /// Parses `documents.read` params: exactly one of `mrz`, `documentNumber`+`dateOfBirth`+`dateOfExpiry`, `can`.
    static func documentReadRequest(_ p: Params) throws(TesseraError) -> DocumentReadRequest {
        let key = try DocumentAccessKey(params: p)
        var groups: [Int]?
        if let list = try p.optionalArray("dataGroups") {
            var out: [Int] = []
            for item in list {
                guard let name = item.stringValue, let n = Self.dataGroupNumber(name) else {
                    throw TesseraError(
                        .invalidInput, "dataGroups items must be \"DG1\"…\"DG16\"", details: ["field": "dataGroups"])
                }
                out.append(n)
            }
            groups = out
        }
        var request = DocumentReadRequest(
            reader: try p.optionalString("reader"), key: key, dataGroups: groups,
            verify: try p.optionalBool("verify") ?? true,
            extendedLength: try p.optionalBool("extendedLength") ?? false,
            allowClonable: try p.optionalBool("allowClonable") ?? false)
        request.evidence = try p.optionalBool("evidence") ?? false
        if let challenge = try p.optionalString("aaChallenge") {
            guard let bytes = Base64URL.decode(challenge), bytes.count == 8 else {
                throw TesseraError(
                    .invalidInput, "aaChallenge must be 8 bytes, base64url", details: ["field": "aaChallenge"])
            }
            request.aaChallenge = bytes
        }
        return request
    }

    /// "DG2", "dg2" or "2" → 2.
    static func dataGroupNumber(_ name: String) -> Int? {
        let upper = name.uppercased()
        let digits = upper.hasPrefix("DG") ? String(upper.dropFirst(2)) : upper
        guard let n = Int(digits), (1...16).contains(n) else { return nil }
        return n
    }
}

extension Views {
    /// {name, stack, cardPresent, atr? (base64url)}
    static func reader(_ r: ReaderInfo) -> JSONValue {
        var o: [String: JSONValue] = [
            "name": .string(r.name), "stack": .string(r.stack), "cardPresent": .bool(r.cardPresent),
        ]
        if let atr = r.atr { o["atr"] = .string(Base64URL.encode(atr)) }
        return .object(o)
    }
}
