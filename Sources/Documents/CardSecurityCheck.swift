import ICAO
import TesseraCore

extension DocumentVerdict {
    /// Adds the EF.CardSecurity check: an invalid one is `CARD_SECURITY_INVALID` and makes the document
    /// `notAuthentic` (its chip authentication keys cannot be trusted); valid, unverified (the SOD's missing
    /// trust anchor already says so) and not present change nothing.
    public mutating func include(cardSecurity: CardSecurityResult?) {
        guard cardSecurity?.status == .invalid, !reasons.contains(.cardSecurityInvalid) else { return }
        let found = Set(reasons + [.cardSecurityInvalid])
        reasons = Reason.allCases.filter(found.contains)
        verdict = .notAuthentic
    }
}

extension DocumentService {
    /// PACE-CAM verdict with the chip authentication key taken from EF.CardSecurity when it has one (where real
    /// chips keep it), which must then carry a valid signature; otherwise from DG14 (`checkChipAuthenticationMapping`).
    static func checkChipAuthenticationMapping(
        _ cam: PACEChipAuthenticationData, cardSecurity bytes: [UInt8]?,
        cardSecurityResult: CardSecurityResult?, dg14: [UInt8]?,
        passive: PassiveAuthenticationResult?
    ) -> ChipAuthenticationResult {
        guard let bytes, let parsed = try? CardSecurity(parsing: bytes),
            parsed.securityInfos.chipAuthenticationPublicKeyInfos.contains(where: {
                $0.protocolOID == ChipAuthenticationMapping.idPKECDH
            })
        else { return checkChipAuthenticationMapping(cam, dg14: dg14, passive: passive) }
        var result = ChipAuthenticationMapping.verify(cam, securityInfos: parsed.securityInfos)
        if result.status == .valid, cardSecurityResult?.check.signature != .valid {
            result = ChipAuthenticationResult(
                status: .invalid,
                reason: "EF.CardSecurity, which holds the chip authentication key, is not validly signed",
                keyId: result.keyId)
        }
        return result
    }
}
