import Documents
import ICAO
import Testing

/// The pure verdict: passive authentication plus the anti-clone proofs the signed data announces.
@Suite struct DocumentVerdictTests {
    static func pa(
        _ status: PassiveAuthenticationResult.Status, chain: PassiveAuthenticationResult.ChainCheck = .valid,
        signature: PassiveAuthenticationResult.SignatureCheck = .valid,
        hashes: [Int: PassiveAuthenticationResult.HashCheck] = [1: .valid, 2: .valid]
    ) -> PassiveAuthenticationResult {
        PassiveAuthenticationResult(
            status: status, signature: signature, certificateChain: chain, certificateValidity: .valid,
            dataGroupHashes: hashes)
    }

    static let aaValid = ActiveAuthenticationResult(status: .valid)
    static let aaInvalid = ActiveAuthenticationResult(status: .invalid, reason: "signature does not verify")

    static func evaluate(
        _ passive: PassiveAuthenticationResult?, aa: ActiveAuthenticationResult?? = nil,
        cam: ChipAuthenticationResult?? = nil, allowClonable: Bool = false
    ) -> DocumentVerdict {
        DocumentVerdict.evaluate(
            passive: passive, activeRequired: aa != nil, active: aa ?? nil,
            chipRequired: cam != nil, chip: cam ?? nil, allowClonable: allowClonable)
    }

    @Test func authenticNeedsValidPassiveAndEveryAnnouncedMechanism() {
        #expect(
            Self.evaluate(Self.pa(.valid), aa: Self.aaValid)
                == DocumentVerdict(verdict: .authentic, chipAuthenticity: .valid, reasons: []))
        #expect(
            Self.evaluate(Self.pa(.valid), aa: Self.aaValid, cam: ChipAuthenticationResult(status: .valid))
                == DocumentVerdict(verdict: .authentic, chipAuthenticity: .valid, reasons: []))
        // One valid mechanism does not excuse the other.
        #expect(
            Self.evaluate(Self.pa(.valid), aa: Self.aaValid, cam: ChipAuthenticationResult(status: .invalid))
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.chipAuthInvalid]))
    }

    @Test func aRequiredMechanismThatDidNotRunIsInvalid() {
        // DG15 listed but no AA result (not delivered); CAM announced but no result.
        #expect(
            Self.evaluate(Self.pa(.valid), aa: .some(nil))
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.activeAuthInvalid]))
        #expect(
            Self.evaluate(Self.pa(.valid), cam: .some(nil))
                == DocumentVerdict(verdict: .notAuthentic, chipAuthenticity: .invalid, reasons: [.chipAuthInvalid]))
        #expect(
            Self.evaluate(Self.pa(.valid), aa: ActiveAuthenticationResult(status: .notSupported)).verdict
                == .notAuthentic)
    }

    /// A CSCA of another country than DG1's issuing state does not make a document authentic (issue #27); an
    /// issuing state that cannot be compared leaves it unverified.
    @Test func issuingStateOfTheCSCA() {
        var mismatch = Self.pa(.invalid)
        mismatch.issuingStateCheck = .mismatch
        #expect(
            Self.evaluate(mismatch, aa: Self.aaValid)
                == DocumentVerdict(
                    verdict: .notAuthentic, chipAuthenticity: .valid,
                    reasons: [.passiveAuthInvalid, .issuingStateMismatch]))
        var unknown = Self.pa(.valid)
        unknown.issuingStateCheck = .unknown
        #expect(
            Self.evaluate(unknown, aa: Self.aaValid)
                == DocumentVerdict(verdict: .unverified, chipAuthenticity: .valid, reasons: [.issuingStateUnknown]))
        var valid = Self.pa(.valid)
        valid.issuingStateCheck = .valid
        #expect(Self.evaluate(valid, aa: Self.aaValid).verdict == .authentic)
    }

    @Test func passiveFailuresAreNotAuthentic() {
        #expect(
            Self.evaluate(Self.pa(.invalid, hashes: [1: .valid, 2: .invalid]), aa: Self.aaValid).reasons == [
                .passiveAuthInvalid
            ])
        #expect(Self.evaluate(Self.pa(.invalid, signature: .invalid), aa: Self.aaValid).verdict == .notAuthentic)
        #expect(
            Self.evaluate(Self.pa(.invalid, hashes: [1: .valid, 15: .missing]), aa: Self.aaInvalid)
                == DocumentVerdict(
                    verdict: .notAuthentic, chipAuthenticity: .invalid,
                    reasons: [.dataGroupMissing, .activeAuthInvalid]))
        // A missing group next to a bad hash reports both.
        #expect(
            Self.evaluate(Self.pa(.invalid, hashes: [1: .invalid, 11: .missing]), aa: Self.aaValid).reasons
                == [.passiveAuthInvalid, .dataGroupMissing])
        // allowClonable never excuses a failure.
        #expect(Self.evaluate(Self.pa(.invalid, hashes: [1: .invalid]), allowClonable: true).verdict == .notAuthentic)
    }

    @Test func unverifiedCases() {
        #expect(
            Self.evaluate(Self.pa(.unverified, chain: .noTrustAnchor), aa: Self.aaValid)
                == DocumentVerdict(verdict: .unverified, chipAuthenticity: .valid, reasons: [.noTrustAnchor]))
        #expect(
            Self.evaluate(Self.pa(.valid))
                == DocumentVerdict(
                    verdict: .unverified, chipAuthenticity: .notSupported, reasons: [.chipAuthNotSupported]))
        #expect(
            Self.evaluate(Self.pa(.valid), allowClonable: true)
                == DocumentVerdict(
                    verdict: .authentic, chipAuthenticity: .notSupported, reasons: [.chipAuthNotSupported]))
        #expect(Self.evaluate(Self.pa(.unverified, chain: .noTrustAnchor), allowClonable: true).verdict == .unverified)
        #expect(
            Self.evaluate(Self.pa(.valid), cam: ChipAuthenticationResult(status: .notChecked))
                == DocumentVerdict(verdict: .unverified, chipAuthenticity: .notChecked, reasons: [.chipAuthNotChecked]))
        #expect(
            Self.evaluate(nil)
                == DocumentVerdict(verdict: .unverified, chipAuthenticity: .notChecked, reasons: [.notVerified]))
    }

    @Test func passiveJSONReportsMissingAndEACGroups() {
        let pa = Self.pa(.invalid, hashes: [1: .valid, 3: .notRead, 4: .notRead, 15: .missing])
        let json = DocumentReadResult.passiveJSON(pa)
        #expect(json["dataGroupHashes"] == ["DG1": "valid"])
        #expect(json["missingDataGroups"] == [15])
        #expect(json["notRead"] == ["DG3", "DG4"])
        #expect(json["notReadReasons"] == ["DG3": "accessDenied", "DG4": "accessDenied"])
        // Unread EAC groups alone do not fail anything.
        #expect(
            Self.evaluate(Self.pa(.valid, hashes: [1: .valid, 3: .notRead]), aa: Self.aaValid).verdict == .authentic)
    }

    @Test func revokedDocumentSignerIsNotAuthentic() {
        var revoked = Self.pa(.invalid, chain: .invalid)
        revoked.revocation = .revoked
        #expect(
            Self.evaluate(revoked, aa: Self.aaValid)
                == DocumentVerdict(
                    verdict: .notAuthentic, chipAuthenticity: .valid, reasons: [.passiveAuthInvalid, .dsRevoked]))
        var checked = Self.pa(.valid)
        checked.revocation = .checked
        #expect(Self.evaluate(checked, aa: Self.aaValid).reasons.isEmpty)
    }

    @Test func reasonCodesAreStable() {
        #expect(
            DocumentVerdict.Reason.allCases.map(\.rawValue) == [
                "PASSIVE_AUTH_INVALID", "DS_REVOKED", "DATA_GROUP_MISSING", "NO_TRUST_ANCHOR", "ACTIVE_AUTH_INVALID",
                "CHIP_AUTH_INVALID",
                "CHIP_AUTH_NOT_CHECKED", "CHIP_AUTH_NOT_SUPPORTED", "NOT_VERIFIED", "CARD_SECURITY_INVALID",
                "ISSUING_STATE_MISMATCH", "ISSUING_STATE_UNKNOWN",
            ])
    }
}
