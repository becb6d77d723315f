import CryptoPrimitives
import FoundationEssentials
import MRZ
import TesseraCore
import X509Support

/// The outcome of passive authentication, each check reported on its own.
public struct PassiveAuthenticationResult: Sendable, Equatable {
    /// valid: everything checks out to a trust anchor. unverified: the SOD signature and hashes are right but no
    /// trust anchor matched (or none was configured). invalid: any check failed.
    public enum Status: String, Sendable { case valid, invalid, unverified }
    public enum SignatureCheck: String, Sendable {
        case valid, invalid
        /// The document signer certificate is neither in the SOD nor found otherwise.
        case signerNotFound
        /// An algorithm or key type this implementation does not support.
        case unsupported
        /// The SOD could not be parsed.
        case notChecked
    }
    public enum ChainCheck: String, Sendable {
        case valid, invalid, noTrustAnchor, notChecked
    }
    /// Validity of the document signer and CSCA certificates at the reference date. Informational unless
    /// `PassiveAuthentication.Options.enforceValidityPeriod` is set: an expired document signer is normal
    /// on documents issued years ago.
    public enum ValidityCheck: String, Sendable { case valid, expired, notYetValid, notChecked }
    /// Whether the CSCA's and the document signer's country (their C attribute) is the document's issuing state
    /// (DG1's MRZ, mapped to ISO 3166-1 alpha-2 by `IssuingStateCodes`; Doc 9303 Part 12 §7.1.1).
    public enum IssuingStateCheck: String, Sendable {
        case valid
        /// A certificate names another country: not this state's document.
        case mismatch
        /// DG1's issuing state has no ISO 3166-1 mapping (or DG1's MRZ does not parse): nothing to compare.
        case unknown
        /// No DG1 whose hash checks out, or no trust anchor issued the document signer.
        case notChecked
    }
    public enum HashCheck: String, Sendable {
        case valid, invalid
        /// Listed in the SOD but not read (e.g. DG3/DG4 without EAC).
        case notRead
        /// Read from the chip but absent from the SOD (counts as invalid).
        case notInSecurityObject
        /// Listed in the SOD but the chip did not deliver it (counts as invalid: the SOD decides what exists).
        case missing
    }

    public var status: Status
    public var signature: SignatureCheck
    public var certificateChain: ChainCheck
    public var certificateValidity: ValidityCheck
    public var dataGroupHashes: [Int: HashCheck]
    /// Data groups listed in the SOD that could not be read (ascending).
    public var missingDataGroups: [Int] {
        dataGroupHashes.filter { $0.value == .missing }.map(\.key).sorted()
    }
    /// Why the status is not `valid` (first problem found), or a note such as an expired certificate.
    public var reason: String?
    /// Subject of the document signer and the matched CSCA.
    public var documentSigner: String?
    public var trustAnchor: String?
    /// Whether the document signer was looked up in a CRL of its CSCA.
    public var revocation: CSCATrustStore.Revocation = .notChecked
    /// A CRL used for `revocation` is past its nextUpdate.
    public var crlStale = false
    public var issuingStateCheck: IssuingStateCheck = .notChecked

    public init(
        status: Status, signature: SignatureCheck, certificateChain: ChainCheck, certificateValidity: ValidityCheck,
        dataGroupHashes: [Int: HashCheck], reason: String? = nil, documentSigner: String? = nil,
        trustAnchor: String? = nil
    ) {
        self.status = status; self.signature = signature; self.certificateChain = certificateChain
        self.certificateValidity = certificateValidity; self.dataGroupHashes = dataGroupHashes; self.reason = reason
        self.documentSigner = documentSigner; self.trustAnchor = trustAnchor
    }

    /// {"status", "signature", "certificateChain", "certificateValidity", "dataGroupHashes": {"DG1": "valid"}, "reason"}.
    public var json: JSONValue {
        var hashes = [String: JSONValue]()
        for (n, h) in dataGroupHashes { hashes["DG\(n)"] = .string(h.rawValue) }
        var o: [String: JSONValue] = [
            "status": .string(status.rawValue), "signature": .string(signature.rawValue),
            "certificateChain": .string(certificateChain.rawValue),
            "certificateValidity": .string(certificateValidity.rawValue),
            "dataGroupHashes": .object(hashes), "reason": reason.map(JSONValue.string) ?? .null,
            "missingDataGroups": .array(missingDataGroups.map { .number(Double($0)) }),
        ]
        if let documentSigner { o["documentSigner"] = .string(documentSigner) }
        if let trustAnchor { o["trustAnchor"] = .string(trustAnchor) }
        o["revocation"] = .string(revocation.rawValue)
        if crlStale { o["crlStale"] = .bool(true) }
        o["issuingStateCheck"] = .string(issuingStateCheck.rawValue)
        return .object(o)
    }
}

/// Passive authentication (Doc 9303 Part 11 §5.1, Part 12): SOD signature, document signer chain to a CSCA,
/// and data group hashes.
public enum PassiveAuthentication {
    public struct Options: Sendable {
        /// Date for certificate validity; default now.
        public var referenceDate: Date
        /// When true, a document signer or CSCA outside its validity period makes the chain invalid.
        public var enforceValidityPeriod: Bool
        public init(referenceDate: Date = Date(), enforceValidityPeriod: Bool = false) {
            self.referenceDate = referenceDate
            self.enforceValidityPeriod = enforceValidityPeriod
        }
    }

    /// Checks EF.SOD against the data groups read (`dataGroups`: number → complete file bytes). `missing`
    /// names groups the reader tried and could not read: those the SOD lists are `missing` and make the
    /// status invalid; other listed groups that were not read are `notRead`.
    /// Never throws: a malformed SOD yields status invalid with the reason.
    public static func verify(
        sod: [UInt8], dataGroups: [Int: [UInt8]], missing: Set<Int> = [],
        trustStore: CSCATrustStore?, options: Options = Options()
    ) -> PassiveAuthenticationResult {
        var result = PassiveAuthenticationResult(
            status: .invalid, signature: .notChecked, certificateChain: .notChecked,
            certificateValidity: .notChecked, dataGroupHashes: [:])
        let so: SecurityObject
        do { so = try SecurityObject(parsing: sod) } catch {
            result.reason = "EF.SOD unusable: \(error.message)"
            return result
        }
        var problems = [String]()
        var notes = [String]()

        // Data group hashes.
        for (n, expected) in so.dataGroupHashes.sorted(by: { $0.key < $1.key }) {
            guard let bytes = dataGroups[n] else {
                if missing.contains(n) {
                    result.dataGroupHashes[n] = .missing
                    problems.append("DG\(n) is listed in EF.SOD but could not be read")
                } else {
                    result.dataGroupHashes[n] = .notRead
                }
                continue
            }
            let actual = try? Signatures.digest(so.hashAlgorithm, bytes)
            result.dataGroupHashes[n] = actual == expected ? .valid : .invalid
            if actual != expected { problems.append("DG\(n) hash does not match the SOD") }
        }
        for n in dataGroups.keys where so.dataGroupHashes[n] == nil {
            result.dataGroupHashes[n] = .notInSecurityObject
            problems.append("DG\(n) is not covered by the SOD")
        }

        let (signerCert, anchor, unanchored) = checkSigner(
            of: so.signedData, label: "SOD", trustStore: trustStore, options: options,
            result: &result, problems: &problems, notes: &notes)
        // DG1 is compared only when the SOD vouches for it (a tampered one is already invalid).
        if let signerCert, let anchor, let dg1 = dataGroups[1], result.dataGroupHashes[1] == .valid {
            checkIssuingState(
                dg1: dg1, signer: signerCert, anchor: anchor, result: &result, problems: &problems, notes: &notes)
        }

        conclude(&result, problems: problems, notes: notes, unanchored: unanchored, signer: signerCert)
        return result
    }

    /// The signature and certificate-chain part of passive authentication for any signed security object
    /// (EF.SOD, EF.CardSecurity): signer certificate, CMS signature, chain to a CSCA, key usages, validity and
    /// revocation. Fills `result` and the problem/note lists; returns the signer certificate, the CSCA that
    /// issued it and whether no trust anchor matched.
    static func checkSigner(
        of signedData: CMSSignedData, label: String, trustStore: CSCATrustStore?, options: Options,
        result: inout PassiveAuthenticationResult, problems: inout [String],
        notes: inout [String]
    ) -> (signer: ParsedCertificate?, anchor: ParsedCertificate?, unanchored: Bool) {
        // Signature.
        var signerCert: ParsedCertificate?
        if let signer = signedData.signerInfos.first {
            signerCert = signedData.certificate(for: signer)
            if let cert = signerCert {
                result.documentSigner = cert.subjectDescription
                switch signedData.verify(signer, signerKey: cert.subjectPublicKeyInfo) {
                case .valid: result.signature = .valid
                case .invalid(let why): result.signature = .invalid; problems.append("\(label) signature: \(why)")
                case .unsupported(let why):
                    result.signature = .unsupported; problems.append("\(label) signature: \(why)")
                }
            } else {
                result.signature = .signerNotFound
                problems.append("document signer certificate not in the \(label)")
            }
        } else {
            result.signature = .invalid
            problems.append("\(label) has no SignerInfo")
        }

        // Chain to a CSCA.
        var unanchored = false
        var anchor: ParsedCertificate?
        if let ds = signerCert {
            result.certificateValidity = validity(ds, at: options.referenceDate)
            if let ku = ds.keyUsage, ku & ParsedCertificate.digitalSignature == 0 {
                result.certificateChain = .invalid
                problems.append("document signer certificate lacks digitalSignature key usage")
            } else {
                let (candidates, byKeyID) = trustStore?.candidates(forIssuerOf: ds) ?? ([], false)
                let issuer = candidates.first { (try? ds.isSigned(by: $0)) == true }
                if issuer == nil && !byKeyID {
                    // Same name but another key (e.g. before a CSCA key rollover): not this document's anchor.
                    result.certificateChain = .noTrustAnchor
                    unanchored = true
                    if !candidates.isEmpty {
                        notes.append(
                            "a CSCA with the issuer's name is trusted but its key did not sign the document signer")
                    }
                } else if let csca = issuer {
                    anchor = csca
                    result.trustAnchor = csca.subjectDescription
                    if let ku = csca.keyUsage, ku & ParsedCertificate.keyCertSign == 0 {
                        result.certificateChain = .invalid
                        problems.append("CSCA certificate lacks keyCertSign key usage")
                    } else if csca.isCA == false {
                        result.certificateChain = .invalid
                        problems.append("CSCA certificate is not a CA")
                    } else {
                        result.certificateChain = .valid
                    }
                    let cv = validity(csca, at: options.referenceDate)
                    if result.certificateValidity == .valid { result.certificateValidity = cv }
                    if let store = trustStore {
                        (result.revocation, result.crlStale) = store.revocation(of: ds, at: options.referenceDate)
                        if result.revocation == .revoked {
                            result.certificateChain = .invalid
                            problems.append(
                                "document signer certificate is revoked by a CRL of \(csca.subjectDescription)")
                        }
                        if result.crlStale {
                            notes.append("a CRL of \(csca.subjectDescription) is past its nextUpdate")
                        }
                    }
                } else {
                    result.certificateChain = .invalid
                    problems.append(
                        "document signer certificate is not signed by the CSCA its authority key identifier names")
                }
            }
            if result.certificateValidity != .valid {
                let text = "a certificate in the chain is \(result.certificateValidity.rawValue) at the reference date"
                if options.enforceValidityPeriod {
                    if result.certificateChain == .valid { result.certificateChain = .invalid }
                    problems.append(text)
                } else {
                    notes.append(text)
                }
            }
        }
        return (signerCert, anchor, unanchored)
    }

    /// Compares the C attribute of the document signer and of its CSCA with DG1's issuing state: another
    /// country is a problem (a CSCA vouches only for its own state's documents), a state without an ISO 3166-1
    /// mapping a note.
    static func checkIssuingState(
        dg1: [UInt8], signer: ParsedCertificate, anchor: ParsedCertificate,
        result: inout PassiveAuthenticationResult, problems: inout [String], notes: inout [String]
    ) {
        guard let state = try? DG1(parsing: dg1).parsedMRZ().issuingState else {
            result.issuingStateCheck = .unknown
            notes.append("DG1's MRZ does not parse: its issuing state was not compared with the CSCA's country")
            return
        }
        guard let alpha2 = IssuingStateCodes.alpha2(docCode: state) else {
            result.issuingStateCheck = .unknown
            notes.append("the issuing state '\(state)' has no ISO 3166-1 code to compare with the CSCA's country")
            return
        }
        var wrong: [String] = []
        for (what, cert) in [("CSCA", anchor), ("document signer", signer)]
        where cert.subjectCountry?.uppercased() != alpha2 {
            wrong.append("the \(what)'s country (C=\(cert.subjectCountry ?? "none"))")
        }
        if wrong.isEmpty {
            result.issuingStateCheck = .valid
        } else {
            result.issuingStateCheck = .mismatch
            problems.append(
                wrong.joined(separator: " and ") + " is not the document's issuing state \(state) (\(alpha2))")
        }
    }

    /// Sets status and reason from the problems (invalid), a missing trust anchor (unverified) or neither (valid).
    static func conclude(
        _ result: inout PassiveAuthenticationResult, problems: [String], notes: [String], unanchored: Bool,
        signer signerCert: ParsedCertificate?
    ) {
        if !problems.isEmpty {
            result.status = .invalid
            result.reason = problems.joined(separator: "; ")
        } else if unanchored {
            result.status = .unverified
            result.reason =
                (["no trusted CSCA matches the document signer (issuer \(signerCert?.issuerDescription ?? "?"))"]
                + notes).joined(separator: "; ")
        } else {
            result.status = .valid
            result.reason = notes.isEmpty ? nil : notes.joined(separator: "; ")
        }
    }

    static func validity(_ c: ParsedCertificate, at date: Date) -> PassiveAuthenticationResult.ValidityCheck {
        if date < c.notBefore { return .notYetValid }
        if date > c.notAfter { return .expired }
        return .valid
    }
}
