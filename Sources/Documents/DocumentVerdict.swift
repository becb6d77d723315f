import ICAO
import TesseraCore

/// The one summary of a document read a client can branch on: passive authentication (is the data what the
/// issuer signed?) combined with the chip's anti-clone proofs (active authentication, PACE-CAM).
public struct DocumentVerdict: Sendable, Equatable {
    public enum Verdict: String, Sendable {
        /// Signed data checked to a trust anchor, and the chip proved its keys (or `allowClonable` accepted
        /// a chip without any anti-clone mechanism).
        case authentic
        /// A check failed: the data or the chip is not what the issuer made (tampered data, a clone).
        case notAuthentic
        /// Nothing failed, but something could not be established (no trust anchor, no anti-clone support,
        /// verification not requested).
        case unverified
    }

    /// Whether the chip proved it holds the issuer's private keys.
    public enum ChipAuthenticity: String, Sendable {
        /// Every anti-clone mechanism the signed data announces ran and passed.
        case valid
        /// An announced mechanism failed or did not run.
        case invalid
        /// The document has no anti-clone mechanism (old BAC-only documents): a copy of its data is indistinguishable.
        case notSupported
        /// Not checked (verification not requested, or announced with parameters this reader cannot run).
        case notChecked
    }

    /// Stable reason codes (docs/API.md, "documents.read").
    public enum Reason: String, Sendable, CaseIterable {
        /// EF.SOD is absent or malformed, its signature or certificate chain fails, or a data group hash does not match.
        case passiveAuthInvalid = "PASSIVE_AUTH_INVALID"
        /// A CRL of the CSCA (`--crl`) revokes the document signer certificate (passive authentication is invalid too).
        case dsRevoked = "DS_REVOKED"
        /// A data group the SOD lists could not be read.
        case dataGroupMissing = "DATA_GROUP_MISSING"
        /// Signature and hashes are right, but no configured CSCA issued the document signer.
        case noTrustAnchor = "NO_TRUST_ANCHOR"
        /// The SOD lists DG15 and active authentication failed, was refused or could not run.
        case activeAuthInvalid = "ACTIVE_AUTH_INVALID"
        /// PACE-CAM or Chip Authentication ran or is announced in DG14, and the chip did not prove its chip authentication key.
        case chipAuthInvalid = "CHIP_AUTH_INVALID"
        /// PACE-CAM is announced with parameters this reader does not support.
        case chipAuthNotChecked = "CHIP_AUTH_NOT_CHECKED"
        /// The chip offers no anti-clone mechanism (no DG15, no PACE-CAM, no Chip Authentication).
        case chipAuthNotSupported = "CHIP_AUTH_NOT_SUPPORTED"
        /// The read was made with `verify: false`.
        case notVerified = "NOT_VERIFIED"
        /// EF.CardSecurity is malformed, its signature or document signer chain fails, or its signer is revoked.
        case cardSecurityInvalid = "CARD_SECURITY_INVALID"
        /// The CSCA's or the document signer's country (C) is not DG1's issuing state (passive authentication is
        /// invalid too).
        case issuingStateMismatch = "ISSUING_STATE_MISMATCH"
        /// DG1's issuing state has no ISO 3166-1 code (or its MRZ does not parse): the CSCA's country could not be
        /// compared with it.
        case issuingStateUnknown = "ISSUING_STATE_UNKNOWN"

        /// A short English description for messages.
        public var text: String {
            switch self {
            case .passiveAuthInvalid: "passive authentication failed"
            case .dsRevoked: "the document signer certificate is revoked"
            case .issuingStateMismatch: "the CSCA or document signer is of another country than the issuing state"
            case .dataGroupMissing: "a data group listed in EF.SOD could not be read"
            case .noTrustAnchor: "no trusted CSCA issued the document signer"
            case .issuingStateUnknown: "the issuing state could not be compared with the CSCA's country"
            case .activeAuthInvalid: "active authentication failed"
            case .chipAuthInvalid: "chip authentication (PACE-CAM or CA) failed"
            case .chipAuthNotChecked: "chip authentication could not be checked"
            case .chipAuthNotSupported: "the chip offers no anti-clone mechanism"
            case .notVerified: "verification was not requested"
            case .cardSecurityInvalid: "EF.CardSecurity is not validly signed"
            }
        }

        /// Reasons that make a document `notAuthentic`.
        public var isFailure: Bool {
            switch self {
            case .passiveAuthInvalid, .dsRevoked, .issuingStateMismatch, .dataGroupMissing, .activeAuthInvalid,
                .chipAuthInvalid, .cardSecurityInvalid:
                true
            case .noTrustAnchor, .issuingStateUnknown, .chipAuthNotChecked, .chipAuthNotSupported, .notVerified:
                false
            }
        }
    }

    public var verdict: Verdict
    public var chipAuthenticity: ChipAuthenticity
    /// Every reason found, in `Reason` declaration order; empty for a plain `authentic`.
    public var reasons: [Reason]

    public init(verdict: Verdict, chipAuthenticity: ChipAuthenticity, reasons: [Reason]) {
        self.verdict = verdict; self.chipAuthenticity = chipAuthenticity; self.reasons = reasons
    }

    /// Combines the checks of one read. `passive` nil means verification was not requested.
    /// `activeRequired`: the SOD lists DG15 (or DG15 was read), so active authentication must be valid.
    /// `chipRequired`: PACE-CAM ran or DG14 announces it, so `chip` must be valid.
    /// `allowClonable`: a chip without any anti-clone mechanism may still be `authentic`.
    public static func evaluate(
        passive: PassiveAuthenticationResult?, activeRequired: Bool,
        active: ActiveAuthenticationResult?, chipRequired: Bool,
        chip: ChipAuthenticationResult?, allowClonable: Bool
    ) -> DocumentVerdict {
        guard let passive else {
            return DocumentVerdict(verdict: .unverified, chipAuthenticity: .notChecked, reasons: [.notVerified])
        }
        var found = Set<Reason>()
        if !passive.missingDataGroups.isEmpty { found.insert(.dataGroupMissing) }
        let hashesFail = passive.dataGroupHashes.values.contains { $0 == .invalid || $0 == .notInSecurityObject }
        if passive.status == .invalid
            && (passive.missingDataGroups.isEmpty || hashesFail || passive.signature != .valid
                || passive.certificateChain == .invalid)
        {
            found.insert(.passiveAuthInvalid)
        }
        if passive.status == .unverified { found.insert(.noTrustAnchor) }
        if passive.revocation == .revoked { found.insert(.dsRevoked) }
        switch passive.issuingStateCheck {
        case .mismatch: found.insert(.issuingStateMismatch)
        case .unknown: found.insert(.issuingStateUnknown)
        case .valid, .notChecked: break
        }

        var mechanisms: [ChipAuthenticity] = []
        if activeRequired {
            let ok = active?.status == .valid
            mechanisms.append(ok ? .valid : .invalid)
            if !ok { found.insert(.activeAuthInvalid) }
        }
        if chipRequired {
            switch chip?.status {
            case .valid: mechanisms.append(.valid)
            case .notChecked: mechanisms.append(.notChecked); found.insert(.chipAuthNotChecked)
            case .invalid, nil: mechanisms.append(.invalid); found.insert(.chipAuthInvalid)
            }
        }
        let authenticity: ChipAuthenticity
        if mechanisms.contains(.invalid) {
            authenticity = .invalid
        } else if mechanisms.isEmpty {
            authenticity = .notSupported
            found.insert(.chipAuthNotSupported)
        } else if mechanisms.contains(.notChecked) {
            authenticity = .notChecked
        } else {
            authenticity = .valid
        }

        let reasons = Reason.allCases.filter(found.contains)
        let verdict: Verdict
        if reasons.contains(where: \.isFailure) {
            verdict = .notAuthentic
        } else if found.contains(.noTrustAnchor) || found.contains(.issuingStateUnknown)
            || found.contains(.chipAuthNotChecked)
            || (found.contains(.chipAuthNotSupported) && !allowClonable)
        {
            verdict = .unverified
        } else {
            verdict = .authentic
        }
        return DocumentVerdict(verdict: verdict, chipAuthenticity: authenticity, reasons: reasons)
    }
}

extension DocumentReadResult {
    /// `DOCUMENT_NOT_AUTHENTIC` for this read: the verdict and its reasons in the message and details.
    public var notAuthenticError: TesseraError {
        TesseraError(
            .documentNotAuthentic,
            "the document is \(verdict.verdict.rawValue): " + verdict.reasons.map(\.text).joined(separator: "; "),
            details: [
                "verdict": .string(verdict.verdict.rawValue),
                "reasons": .array(verdict.reasons.map { .string($0.rawValue) }),
                "chipAuthenticity": .string(verdict.chipAuthenticity.rawValue),
                "passiveAuthentication": DocumentReadResult.passiveJSON(passiveAuthentication),
            ])
    }
}
