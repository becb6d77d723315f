import CryptoPrimitives
import FoundationEssentials
import ICAO
import TesseraCore

/// What a read saw, self-contained, so a backend can re-check it offline with the same code (`documents.read`
/// with `evidence: true`; `tessera passport verify`): EF.SOD, every data group read, the active authentication
/// challenge and the chip's signature, EF.CardSecurity, the PACE-CAM values (PK_Map,IC and CA_IC) or the Chip
/// Authentication record, the access protocol and a
/// reader-side timestamp.
public struct DocumentEvidence: Sendable, Equatable {
    public var sod: [UInt8]?
    public var dataGroups: [Int: [UInt8]]
    /// EF.CardSecurity, when the read found one.
    public var cardSecurity: [UInt8]? = nil
    public var aaChallenge: [UInt8]?
    public var aaSignature: [UInt8]?
    /// "PACE" or "BAC".
    public var accessProtocol: String
    /// The PACE mapping used ("GM", "IM", "CAM").
    public var paceMapping: String?
    /// Outcome of PACE-CAM or Chip Authentication as the reader saw it.
    public var chipAuthenticationStatus: String?
    /// "PACE-CAM" or "CA".
    public var chipAuthenticationMechanism: String?
    /// What the chip sent in PACE-CAM (EC only), re-checked against DG14 offline.
    public var chipAuthenticationData: PACEChipAuthenticationData?
    /// Chip Authentication v1 as the reader ran it (the key from DG14, the terminal's ephemeral key).
    public var chipAuthenticationRun: ChipAuthenticationRun? = nil
    public var readAt: Date

    public init(_ result: DocumentReadResult, chipAuthenticationData: PACEChipAuthenticationData? = nil, readAt: Date) {
        if case .ec = chipAuthenticationData?.domain { self.chipAuthenticationData = chipAuthenticationData }
        sod = result.files[.sod]
        cardSecurity = result.cardSecurityBytes
        var groups: [Int: [UInt8]] = [:]
        for (file, bytes) in result.files { if let n = file.dataGroupNumber { groups[n] = bytes } }
        dataGroups = groups
        aaChallenge = result.activeAuthentication?.challenge
        aaSignature = result.activeAuthentication?.signature
        accessProtocol = result.accessProtocol == .pace ? "PACE" : "BAC"
        paceMapping = result.paceMapping?.rawValue
        chipAuthenticationStatus = result.chipAuthentication?.status.rawValue
        chipAuthenticationMechanism = result.chipAuthentication?.mechanism.rawValue
        self.readAt = readAt
    }

    /// {version: 1, sod, dataGroups: {"DG1": base64url}, activeAuthentication?: {challenge, signature},
    /// accessProtocol, paceMapping?, chipAuthentication?: {status, mechanism, …}, readAt}. For CA the object also holds
    /// protocol, keyId, chipPublicKey (SubjectPublicKeyInfo), terminalEphemeralPublicKey and proof "online".
    public var json: JSONValue {
        var groups: [String: JSONValue] = [:]
        for (n, bytes) in dataGroups { groups["DG\(n)"] = .string(Base64URL.encode(bytes)) }
        var o: [String: JSONValue] = [
            "version": 1, "dataGroups": .object(groups), "accessProtocol": .string(accessProtocol),
            "readAt": .string(readAt.iso8601Seconds),
        ]
        if let sod { o["sod"] = .string(Base64URL.encode(sod)) }
        if let cardSecurity { o["cardSecurity"] = .string(Base64URL.encode(cardSecurity)) }
        if let aaChallenge, let aaSignature {
            o["activeAuthentication"] = [
                "challenge": .string(Base64URL.encode(aaChallenge)),
                "signature": .string(Base64URL.encode(aaSignature)),
            ]
        }
        if let paceMapping { o["paceMapping"] = .string(paceMapping) }
        if let chipAuthenticationStatus {
            var c: [String: JSONValue] = ["status": .string(chipAuthenticationStatus)]
            if let chipAuthenticationMechanism { c["mechanism"] = .string(chipAuthenticationMechanism) }
            if let run = chipAuthenticationRun {
                c["protocol"] = .string(run.algorithm.oid)
                if let keyId = run.keyId { c["keyId"] = .number(Double(keyId)) }
                c["chipPublicKey"] = .string(Base64URL.encode(run.chipPublicKeyInfo))
                c["terminalEphemeralPublicKey"] = .string(Base64URL.encode(run.terminalEphemeralPublicKey))
                c["proof"] = "online"
            }
            if let cam = chipAuthenticationData, case .ec(let curve) = cam.domain {
                c["proof"] = "online"
                c["curve"] = .string(curve.name)
                c["chipMappingPublicKey"] = .string(Base64URL.encode(cam.chipMappingPublicKey))
                if let ca = cam.chipAuthenticationData { c["chipAuthenticationData"] = .string(Base64URL.encode(ca)) }
            }
            o["chipAuthentication"] = .object(c)
        }
        return .object(o)
    }

    /// Parses `json` (the evidence object, or a whole `documents.read` result holding one). Throws INVALID_INPUT.
    public init(json: JSONValue) throws(TesseraError) {
        let e = json["evidence"] ?? json
        func bytes(_ v: JSONValue?, _ field: String) throws(TesseraError) -> [UInt8]? {
            guard let v else { return nil }
            guard let s = v.stringValue, let b = Base64URL.decode(s) else {
                throw TesseraError(.invalidInput, "evidence: \(field) is not base64url")
            }
            return b
        }
        guard e["version"]?.intValue == 1 else { throw TesseraError(.invalidInput, "evidence: version 1 expected") }
        sod = try bytes(e["sod"], "sod")
        cardSecurity = try bytes(e["cardSecurity"], "cardSecurity")
        var groups: [Int: [UInt8]] = [:]
        for (name, value) in e["dataGroups"]?.objectValue ?? [:] {
            guard name.hasPrefix("DG"), let n = Int(name.dropFirst(2)), (1...16).contains(n),
                let b = try bytes(value, name)
            else { throw TesseraError(.invalidInput, "evidence: bad data group \(name)") }
            groups[n] = b
        }
        dataGroups = groups
        aaChallenge = try bytes(e["activeAuthentication"]?["challenge"], "activeAuthentication.challenge")
        aaSignature = try bytes(e["activeAuthentication"]?["signature"], "activeAuthentication.signature")
        guard let access = e["accessProtocol"]?.stringValue else {
            throw TesseraError(.invalidInput, "evidence: accessProtocol missing")
        }
        accessProtocol = access
        paceMapping = e["paceMapping"]?.stringValue
        chipAuthenticationStatus = e["chipAuthentication"]?["status"]?.stringValue
        chipAuthenticationMechanism = e["chipAuthentication"]?["mechanism"]?.stringValue
        if let oid = e["chipAuthentication"]?["protocol"]?.stringValue {
            guard let algorithm = ChipAuthenticationAlgorithm(oid: oid),
                let key = try bytes(e["chipAuthentication"]?["chipPublicKey"], "chipAuthentication.chipPublicKey"),
                let ephemeral = try bytes(
                    e["chipAuthentication"]?["terminalEphemeralPublicKey"],
                    "chipAuthentication.terminalEphemeralPublicKey")
            else {
                throw TesseraError(.invalidInput, "evidence: bad Chip Authentication record")
            }
            chipAuthenticationRun = ChipAuthenticationRun(
                algorithm: algorithm, keyId: e["chipAuthentication"]?["keyId"]?.intValue,
                chipPublicKeyInfo: key, terminalEphemeralPublicKey: ephemeral)
        }
        if let name = e["chipAuthentication"]?["curve"]?.stringValue {
            guard let curve = ECCurve.named(name),
                let pk = try bytes(
                    e["chipAuthentication"]?["chipMappingPublicKey"], "chipAuthentication.chipMappingPublicKey")
            else {
                throw TesseraError(.invalidInput, "evidence: bad chipAuthentication")
            }
            chipAuthenticationData = PACEChipAuthenticationData(
                domain: .ec(curve), chipMappingPublicKey: pk,
                chipAuthenticationData: try bytes(
                    e["chipAuthentication"]?["chipAuthenticationData"], "chipAuthentication.chipAuthenticationData"))
        }
        guard let at = e["readAt"]?.stringValue, let date = Date(rfc3339: at) else {
            throw TesseraError(.invalidInput, "evidence: readAt missing")
        }
        readAt = date
    }

    /// Re-checks the evidence as a read does: passive authentication against `trustStore`, active authentication
    /// from the recorded challenge and signature when the SOD lists DG15, PACE-CAM from the recorded PK_Map,IC and
    /// CA_IC against DG14 (`notChecked` when they are not in the evidence), and the verdict. With `aaChallenge` (the
    /// nonce the verifier gave the read), an active authentication signature over another challenge is invalid.
    public func verify(
        trustStore: CSCATrustStore?, allowClonable: Bool = false,
        referenceDate: Date = Date(), aaChallenge expectedChallenge: [UInt8]? = nil
    ) -> (
        passive: PassiveAuthenticationResult, active: ActiveAuthenticationResult?,
        chip: ChipAuthenticationResult?, verdict: DocumentVerdict
    ) {
        var passive: PassiveAuthenticationResult
        if let sod {
            passive = PassiveAuthentication.verify(
                sod: sod, dataGroups: dataGroups, trustStore: trustStore,
                options: PassiveAuthentication.Options(referenceDate: referenceDate))
        } else {
            passive = PassiveAuthentication.verify(sod: [], dataGroups: [:], trustStore: nil)
            passive.reason = "the evidence has no EF.SOD"
        }
        let listed = sod.flatMap { try? SecurityObject(parsing: $0) }.map { Set($0.dataGroupHashes.keys) } ?? []
        var active: ActiveAuthenticationResult?
        let activeRequired = listed.contains(15) || dataGroups[15] != nil
        if activeRequired {
            if let expectedChallenge, let aaChallenge, aaSignature != nil, expectedChallenge != aaChallenge {
                active = ActiveAuthenticationResult(
                    status: .invalid, reason: "the recorded signature is not over the verifier's nonce")
            } else if let dg15bytes = dataGroups[15], let dg15 = try? DG15(parsing: dg15bytes), let aaChallenge,
                let aaSignature
            {
                let dg14 = dataGroups[14].flatMap { try? DG14(parsing: $0) }
                active = ActiveAuthentication.verify(
                    challenge: aaChallenge, response: aaSignature,
                    publicKeyInfo: dg15.publicKeyInfo, hashHint: dg14?.activeAuthenticationHash)
            } else {
                active = ActiveAuthenticationResult(
                    status: .invalid, reason: "the SOD lists DG15 but the evidence lacks DG15 or the AA signature")
            }
        }
        let cardSecurityCheck = cardSecurity.map {
            CardSecurity.verify(
                $0, trustStore: trustStore, options: PassiveAuthentication.Options(referenceDate: referenceDate))
        }
        var chip: ChipAuthenticationResult?
        let chipRequired =
            paceMapping == PACEMapping.chipAuthentication.rawValue
            || DocumentService.announcedChipAuthenticationMapping(dg14: dataGroups[14]) != nil
            || DocumentService.announcedChipAuthentication(dg14: dataGroups[14]) != nil
        if chipRequired {
            if let cam = chipAuthenticationData {
                chip = DocumentService.checkChipAuthenticationMapping(
                    cam, cardSecurity: cardSecurity, cardSecurityResult: cardSecurityCheck,
                    dg14: dataGroups[14], passive: passive)
            } else if let run = chipAuthenticationRun {
                chip = DocumentService.recheckChipAuthentication(
                    status: chipAuthenticationStatus, run: run, dg14: dataGroups[14],
                    passive: passive)
            } else if chipAuthenticationStatus == ChipAuthenticationResult.Status.invalid.rawValue {
                chip = ChipAuthenticationResult(status: .invalid, reason: "the reader recorded a failed PACE-CAM")
            } else {
                chip = ChipAuthenticationResult(
                    status: .notChecked, reason: "the evidence holds no PACE-CAM or Chip Authentication data")
            }
        }
        var verdict = DocumentVerdict.evaluate(
            passive: passive, activeRequired: activeRequired, active: active,
            chipRequired: chipRequired, chip: chip, allowClonable: allowClonable)
        verdict.include(cardSecurity: cardSecurityCheck)
        return (passive, active, chip, verdict)
    }

    /// How a chip proof in the evidence stands offline.
    public enum OfflineBasis: String, Sendable {
        /// Checked again here over the verifier's own nonce: an active authentication signature over the
        /// `aaChallenge` the verifier gave the read.
        case reverified
        /// What the reader saw during the read. Chip Authentication and PACE-CAM are online proofs (the chip
        /// answered under session keys only its private key gives; a recorded PK_Map,IC and CA_IC can be made up
        /// for any public key), and an active authentication signature over a challenge the verifier did not
        /// choose may be a replay: the re-check only shows the record is consistent with the signed DG14/DG15.
        case readerObserved
    }

    /// The re-check as JSON: {verdict, reasons, chipAuthenticity, passiveAuthentication, activeAuthentication?,
    /// chipAuthentication?, cardSecurity?}, the fields of a `documents.read` result; `activeAuthentication` and
    /// `chipAuthentication` carry `offline` (an `OfflineBasis`), and `offline` lists which checks were
    /// re-verified here and which are the reader's observation.
    public func verificationJSON(
        trustStore: CSCATrustStore?, allowClonable: Bool = false, aaChallenge: [UInt8]? = nil
    ) -> JSONValue {
        let r = verify(trustStore: trustStore, allowClonable: allowClonable, aaChallenge: aaChallenge)
        var reverified: [JSONValue] = ["passiveAuthentication"]
        var observed: [JSONValue] = []
        var o: [String: JSONValue] = [
            "verdict": .string(r.verdict.verdict.rawValue),
            "reasons": .array(r.verdict.reasons.map { .string($0.rawValue) }),
            "chipAuthenticity": .string(r.verdict.chipAuthenticity.rawValue),
            "passiveAuthentication": DocumentReadResult.passiveJSON(r.passive),
        ]
        if let a = r.active {
            let basis: OfflineBasis =
                aaChallenge != nil && aaChallenge == self.aaChallenge && a.status == .valid
                ? .reverified : .readerObserved
            var j = a.json.objectValue ?? [:]
            j["offline"] = .string(basis.rawValue)
            o["activeAuthentication"] = .object(j)
            if basis == .reverified {
                reverified.append("activeAuthentication")
            } else {
                observed.append("activeAuthentication")
            }
        }
        if let cardSecurity {
            o["cardSecurity"] = CardSecurity.verify(cardSecurity, trustStore: trustStore).json
            reverified.append("cardSecurity")
        }
        if let c = r.chip {
            var j: [String: JSONValue] = [
                "status": .string(c.status.rawValue), "mechanism": .string(c.mechanism.rawValue),
                "offline": .string(OfflineBasis.readerObserved.rawValue),
            ]
            if let reason = c.reason { j["reason"] = .string(reason) }
            o["chipAuthentication"] = .object(j)
            observed.append("chipAuthentication")
        }
        o["offline"] = ["reverified": .array(reverified), "readerObserved": .array(observed)]
        return .object(o)
    }
}
