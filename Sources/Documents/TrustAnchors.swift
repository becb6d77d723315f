import FoundationEssentials
import ICAO
import TesseraCore
import TesseraRuntime
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// The files trust anchors are loaded from (`tesserad --csca`, `--master-list-trust`, `--crl`).
public struct TrustSources: Sendable, Equatable {
    public var cscaPaths: [String]
    public var masterListTrustPaths: [String]
    public var crlPaths: [String]

    public init(cscaPaths: [String], masterListTrustPaths: [String] = [], crlPaths: [String] = []) {
        self.cscaPaths = cscaPaths; self.masterListTrustPaths = masterListTrustPaths; self.crlPaths = crlPaths
    }
}

struct TrustState: Sendable {
    var store: CSCATrustStore?
    var loadedAt: Date
    /// Issuer countries of document signers read that no anchor matched.
    var unanchoredIssuers: Set<String> = []
}

extension DocumentService {
    /// Reloads every trust anchor and CRL from `trustSources` and swaps them in as a whole; on any error the
    /// anchors in force stay and the error (naming the file) is thrown. Files are read on a thread of their own.
    public func reloadTrust() async throws(TesseraError) {
        guard let sources = trustSources else {
            throw TesseraError(.invalidInput, "no trust anchor files are configured (--csca, --crl)")
        }
        let store = try await DedicatedThread.run(name: "tessera.trust") { () throws(TesseraError) -> CSCATrustStore? in
            try DocumentService.trustStore(
                paths: sources.cscaPaths, masterListTrust: sources.masterListTrustPaths,
                crls: sources.crlPaths)
        }
        trust.withLock {
            $0.store = store; $0.loadedAt = Date()
        }
    }

    /// `trust.status`: anchors per country, CRLs, and the issuing states of documents read without an anchor.
    public func trustStatus(now: Date = Date()) -> JSONValue {
        let state = trust.current
        let store = state.store ?? CSCATrustStore()
        func time(_ d: Date) -> JSONValue { .string(d.iso8601Seconds) }
        var byCountry: [String: [ParsedCertificate]] = [:]
        for c in store.certificates { byCountry[c.subjectCountry?.uppercased() ?? "??", default: []].append(c) }
        let anchors: [JSONValue] = byCountry.keys.sorted().map { country in
            let certs = byCountry[country] ?? []
            return [
                "country": .string(country), "count": .number(Double(certs.count)),
                "certificates": .array(
                    certs.map { c in
                        var o: [String: JSONValue] = [
                            "subject": .string(c.subjectDescription), "notBefore": time(c.notBefore),
                            "notAfter": time(c.notAfter),
                            "validity": .string(
                                now < c.notBefore ? "notYetValid" : now > c.notAfter ? "expired" : "valid"),
                        ]
                        if let source = store.sources[c.der] { o["source"] = .string(source) }
                        return .object(o)
                    }),
            ]
        }
        let crls: [JSONValue] = store.crls.map { crl in
            var o: [String: JSONValue] = [
                "issuer": .string(crl.issuerDescription), "thisUpdate": time(crl.thisUpdate),
                "nextUpdate": crl.nextUpdate.map(time) ?? .null, "stale": .bool(crl.isStale(at: now)),
                "revoked": .number(Double(crl.revokedSerialNumbers.count)),
            ]
            if let source = store.sources[crl.der] { o["source"] = .string(source) }
            return .object(o)
        }
        let masterLists: [JSONValue] = store.masterLists.map { list in
            var o: [String: JSONValue] = [
                "signer": .string(list.signer), "signerNotAfter": time(list.signerNotAfter),
                "signedAt": list.signedAt.map(time) ?? .null, "stale": .bool(list.isStale(at: now)),
                "count": .number(Double(list.certificateCount)),
            ]
            if let source = list.source { o["source"] = .string(source) }
            return .object(o)
        }
        let anchored = Set(byCountry.keys)
        return [
            "anchors": .array(anchors), "anchorCount": .number(Double(store.certificates.count)),
            "masterListTrustCount": .number(Double(store.masterListTrust.count)),
            "crls": .array(crls), "masterLists": .array(masterLists), "loadedAt": time(state.loadedAt),
            "unanchoredIssuingStates": .array(
                state.unanchoredIssuers.subtracting(anchored).sorted().map(JSONValue.string)),
        ]
    }
}
