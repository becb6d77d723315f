import ICAO
import MRZ
import TesseraCore

/// What `DocumentService.read` should do.
public struct DocumentReadRequest: Sendable {
    /// Reader name (`ReaderInfo.name`); nil picks the first reader holding a card.
    public var reader: String?
    /// MRZ information or CAN that unlocks the chip.
    public var key: DocumentAccessKey
    /// Data groups to return (1…16). nil: DG1 and DG2. With `verify`, groups EF.SOD does not list are skipped;
    /// without, groups EF.COM does not list.
    public var dataGroups: [Int]?
    /// Passive authentication (reads EF.SOD and every data group it lists), active authentication when the SOD
    /// lists DG15, PACE-CAM when access used it or DG14 announces it, Chip Authentication v1 when DG14 announces it
    /// and PACE-CAM did not run.
    public var verify: Bool
    /// A chip without any anti-clone mechanism (no DG15, no PACE-CAM) may be `authentic` instead of `unverified`.
    public var allowClonable: Bool
    /// Read with extended-length READ BINARY when the card announces support for it.
    public var extendedLength: Bool
    /// Return `DocumentReadResult.evidence` for offline re-checking.
    public var evidence: Bool = false
    /// The 8-byte active authentication challenge to use instead of a random one (a backend's nonce).
    public var aaChallenge: [UInt8]?

    public init(
        reader: String? = nil, key: DocumentAccessKey, dataGroups: [Int]? = nil, verify: Bool = true,
        extendedLength: Bool = false, allowClonable: Bool = false
    ) {
        self.reader = reader; self.key = key; self.dataGroups = dataGroups; self.verify = verify
        self.extendedLength = extendedLength; self.allowClonable = allowClonable
    }
}

/// A progress event of a read, forwarded to socket clients as `documents.progress`.
public struct DocumentReadProgress: Sendable, Equatable {
    public enum Step: String, Sendable { case connect, access, read, verify }
    public var step: Step
    /// "COM", "DG1", …, "SOD" while reading a file.
    public var file: String?
    public var bytesRead: Int?
    public var totalBytes: Int?

    public init(step: Step, file: String? = nil, bytesRead: Int? = nil, totalBytes: Int? = nil) {
        self.step = step; self.file = file; self.bytesRead = bytesRead; self.totalBytes = totalBytes
    }

    /// {step, file?, bytesRead?, totalBytes?}
    public var json: JSONValue {
        var o: [String: JSONValue] = ["step": .string(step.rawValue)]
        if let file { o["file"] = .string(file) }
        if let bytesRead { o["bytesRead"] = .number(Double(bytesRead)) }
        if let totalBytes { o["totalBytes"] = .number(Double(totalBytes)) }
        return .object(o)
    }
}

/// Wire-level counters of one read, access included.
public struct DocumentReadStatistics: Sendable, Equatable {
    /// Command APDUs sent to the card (access, SELECTs, READ BINARY, GET RESPONSE, retries, AA).
    public var apdus: Int
    /// Bytes on the wire: command plus response APDUs.
    public var bytes: Int
    /// File content bytes read (EF.COM, data groups, EF.SOD).
    public var fileBytes: Int
    /// Command APDUs spent reading files (after access was established, before verification).
    public var readAPDUs: Int
    /// Wall-clock time from opening the card to the end of verification, in milliseconds.
    public var durationMs: Double
}

/// Everything one read produced. `json` is the `documents.read` result (docs/API.md).
public struct DocumentReadResult: Sendable {
    public var reader: String
    public var accessProtocol: AccessProtocol
    /// The MRZ from DG1, parsed and check-digit verified; nil when DG1 was not read or does not parse.
    public var mrz: MRZ?
    /// Raw bytes of every file read: `.com`, `.dataGroup(n)`, `.sod`.
    public var files: [LDSFile: [UInt8]]
    /// The data groups the caller asked for; `json` returns only these of the groups read, plus DG14 and DG15.
    public var requestedDataGroups: Set<Int>
    public var faceImages: [LDSImage]
    /// nil when `verify` was false.
    public var passiveAuthentication: PassiveAuthenticationResult?
    /// nil unless verification ran and the SOD lists DG15 (or DG15 was read).
    public var activeAuthentication: ActiveAuthenticationResult?
    /// PACE-CAM checked against DG14, or Chip Authentication v1 (`mechanism`); nil unless access used PACE-CAM or
    /// DG14 announces either.
    public var chipAuthentication: ChipAuthenticationResult? = nil
    /// The PACE mapping (GM or CAM); nil after BAC.
    public var paceMapping: PACEMapping? = nil
    /// Requested data groups the chip does not have (not listed in EF.SOD, or in EF.COM without verification; or 6A82).
    public var notPresent: [Int]
    /// Requested data groups the chip refused (e.g. DG3/DG4 need extended access control).
    public var notReadable: [Int]
    /// The summary of every check; `unverified` with `NOT_VERIFIED` when verification was not requested.
    public var verdict: DocumentVerdict
    /// Problems that did not stop the read (a data group that does not parse, …).
    public var warnings: [String]
    public var statistics: DocumentReadStatistics
    /// Present when the request asked for evidence.
    public var evidence: DocumentEvidence? = nil
    /// The EF.CardSecurity check (after PACE, with verification); nil otherwise.
    public var cardSecurity: CardSecurityResult? = nil
    /// EF.CardSecurity as read (for the evidence).
    public var cardSecurityBytes: [UInt8]? = nil
    /// Why PACE failed when access fell back to BAC (`paceFallback` in JSON); nil otherwise.
    public var paceFailure: String? = nil
    /// Chip quirks the reader worked around (a refused DO'84', PACE falling back to BAC, …).
    public var workarounds: [String] = []

    /// The `documents.read` result object.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "reader": .string(reader),
            "accessProtocol": .string(accessProtocol == .pace ? "PACE" : "BAC"),
            "mrz": mrz.map { .object($0.jsonFields().mapValues { JSONValue.string($0) }) } ?? .null,
        ]
        var groups: [String: JSONValue] = [:]
        for (file, bytes) in files {
            if let n = file.dataGroupNumber, !requestedDataGroups.contains(n), n != 14, n != 15 { continue }
            groups[file.description] = .string(Base64URL.encode(bytes))
        }
        o["dataGroups"] = .object(groups)
        // Every file read from the chip, returned or not (a group read only to check its hash is among them).
        o["filesRead"] = .array(files.keys.sorted().map { .string($0.description) })
        o["faceImages"] = .array(
            faceImages.map { img in
                var f: [String: JSONValue] = [
                    "mimeType": .string(img.mimeType), "data": .string(Base64URL.encode(img.data)),
                ]
                if let w = img.width { f["width"] = .number(Double(w)) }
                if let h = img.height { f["height"] = .number(Double(h)) }
                return .object(f)
            })
        o["verdict"] = .string(verdict.verdict.rawValue)
        o["reasons"] = .array(verdict.reasons.map { .string($0.rawValue) })
        o["chipAuthenticity"] = .string(verdict.chipAuthenticity.rawValue)
        o["passiveAuthentication"] = Self.passiveJSON(passiveAuthentication)
        if let mapping = paceMapping { o["paceMapping"] = .string(mapping.rawValue) }
        if let ca = chipAuthentication {
            var c: [String: JSONValue] = [
                "status": .string(ca.status.rawValue), "mechanism": .string(ca.mechanism.rawValue),
            ]
            if let r = ca.reason { c["reason"] = .string(r) }
            if let k = ca.keyId { c["keyId"] = .number(Double(k)) }
            o["chipAuthentication"] = .object(c)
        }
        if let aa = activeAuthentication {
            var a: [String: JSONValue] = ["status": .string(aa.status.rawValue)]
            if let r = aa.reason { a["reason"] = .string(r) }
            o["activeAuthentication"] = .object(a)
        }
        if let evidence { o["evidence"] = evidence.json }
        if let cardSecurity { o["cardSecurity"] = cardSecurity.json }
        if let paceFailure {
            o["paceFallback"] = true
            o["paceFailure"] = .string(paceFailure)
        }
        if !workarounds.isEmpty { o["workarounds"] = .array(workarounds.map { .string($0) }) }
        o["notPresent"] = .array(notPresent.map { .string("DG\($0)") })
        if !notReadable.isEmpty { o["notReadable"] = .array(notReadable.map { .string("DG\($0)") }) }
        if !warnings.isEmpty { o["warnings"] = .array(warnings.map { .string($0) }) }
        o["stats"] = [
            "apdus": .number(Double(statistics.apdus)),
            "bytes": .number(Double(statistics.bytes)),
            "fileBytes": .number(Double(statistics.fileBytes)),
            "durationMs": .number((statistics.durationMs * 10).rounded() / 10),
        ]
        return .object(o)
    }

    /// PA as the contract shows it: `dataGroupHashes` holds only groups that were read ("valid"/"invalid");
    /// groups listed in the SOD that could not be read are in `missingDataGroups` (numbers); EAC-protected
    /// groups the chip refused (DG3/DG4) are in `notRead` with `notReadReasons` "accessDenied".
    public static func passiveJSON(_ pa: PassiveAuthenticationResult?) -> JSONValue {
        guard let pa else {
            return [
                "status": "unverified", "signature": "notChecked", "certificateChain": "notChecked",
                "certificateValidity": "notChecked", "dataGroupHashes": .object([:]),
                "reason": "verification was not requested",
            ]
        }
        var hashes: [String: JSONValue] = [:]
        var notRead: [Int] = []
        for (n, check) in pa.dataGroupHashes {
            switch check {
            case .valid: hashes["DG\(n)"] = "valid"
            case .invalid, .notInSecurityObject: hashes["DG\(n)"] = "invalid"
            case .notRead: notRead.append(n)
            case .missing: break
            }
        }
        var o: [String: JSONValue] = [
            "status": .string(pa.status.rawValue), "signature": .string(pa.signature.rawValue),
            "certificateChain": .string(pa.certificateChain.rawValue),
            "certificateValidity": .string(pa.certificateValidity.rawValue),
            "dataGroupHashes": .object(hashes),
            "notRead": .array(notRead.sorted().map { .string("DG\($0)") }),
            "missingDataGroups": .array(pa.missingDataGroups.map { .number(Double($0)) }),
        ]
        if !notRead.isEmpty {
            o["notReadReasons"] = .object(
                Dictionary(uniqueKeysWithValues: notRead.map { ("DG\($0)", JSONValue.string("accessDenied")) }))
        }
        if let r = pa.reason { o["reason"] = .string(r) }
        if let s = pa.documentSigner { o["documentSigner"] = .string(s) }
        if let t = pa.trustAnchor { o["trustAnchor"] = .string(t) }
        o["revocation"] = .string(pa.revocation.rawValue)
        if pa.crlStale { o["crlStale"] = true }
        o["issuingStateCheck"] = .string(pa.issuingStateCheck.rawValue)
        return .object(o)
    }
}
