import APDU
import FoundationEssentials
import TesseraCore

/// EF.CardSecurity (FID 011D, SFI 1D, in the master file; BSI TR-03110 Part 3 §A.1.2, Doc 9303 Part 11 §9.2):
/// CMS SignedData with eContentType id-SecurityObject whose content is the chip's SecurityInfos, signed by a
/// document signer. PACE-CAM chips keep their chip authentication public key here.
public struct CardSecurity: Sendable {
    /// id-SecurityObject (bsi-de 3.2.1).
    public static let contentType = "0.4.0.127.0.7.3.2.1"
    public static let fileID: UInt16 = 0x011D
    public static let shortFileID: UInt8 = 0x1D

    public let signedData: CMSSignedData
    public let securityInfos: SecurityInfos

    /// Parses the ContentInfo. MALFORMED_DATA when it is not SignedData over SecurityInfos.
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        signedData = try CMSSignedData(contentInfo: bytes)
        guard signedData.contentType == Self.contentType else {
            throw TesseraError(
                .malformedData, "EF.CardSecurity content is \(signedData.contentType), not id-SecurityObject")
        }
        securityInfos = try SecurityInfos(encoded: signedData.content)
    }

    /// Checks the signature and the document signer's chain exactly as passive authentication checks EF.SOD's
    /// (same trust store, CRLs and validity options). Never throws: a malformed file is `invalid` with the reason.
    public static func verify(
        _ bytes: [UInt8], trustStore: CSCATrustStore?,
        options: PassiveAuthentication.Options = .init()
    ) -> CardSecurityResult {
        var check = PassiveAuthenticationResult(
            status: .invalid, signature: .notChecked, certificateChain: .notChecked,
            certificateValidity: .notChecked, dataGroupHashes: [:])
        let parsed: CardSecurity
        do { parsed = try CardSecurity(parsing: bytes) } catch {
            return CardSecurityResult(
                status: .invalid, check: check, reason: "EF.CardSecurity unusable: \(error.message)")
        }
        var problems: [String] = [], notes: [String] = []
        let (signer, _, unanchored) = PassiveAuthentication.checkSigner(
            of: parsed.signedData, label: "EF.CardSecurity", trustStore: trustStore, options: options,
            result: &check, problems: &problems, notes: &notes)
        PassiveAuthentication.conclude(&check, problems: problems, notes: notes, unanchored: unanchored, signer: signer)
        let status: CardSecurityResult.Status =
            switch check.status {
            case .valid: .valid
            case .invalid: .invalid
            case .unverified: .unverified
            }
        return CardSecurityResult(status: status, check: check, reason: check.reason)
    }
}

/// Outcome of checking EF.CardSecurity.
public struct CardSecurityResult: Sendable, Equatable {
    /// valid: signed by a document signer that chains to a trusted CSCA; invalid: malformed, bad signature or
    /// chain, revoked signer; unverified: no trust anchor; notPresent: the chip has no EF.CardSecurity.
    public enum Status: String, Sendable { case valid, invalid, unverified, notPresent }
    public var status: Status
    /// Signature, chain, validity, signer and anchor as for EF.SOD (data group fields unused).
    public var check: PassiveAuthenticationResult
    public var reason: String?

    public init(status: Status, check: PassiveAuthenticationResult, reason: String? = nil) {
        self.status = status; self.check = check; self.reason = reason
    }

    /// A chip without EF.CardSecurity.
    public static let notPresent = CardSecurityResult(
        status: .notPresent,
        check: PassiveAuthenticationResult(
            status: .unverified, signature: .notChecked, certificateChain: .notChecked,
            certificateValidity: .notChecked, dataGroupHashes: [:]))

    /// {status, signature, certificateChain, certificateValidity, documentSigner?, trustAnchor?, revocation, reason?}
    public var json: JSONValue {
        var o: [String: JSONValue] = ["status": .string(status.rawValue)]
        if status != .notPresent {
            o["signature"] = .string(check.signature.rawValue)
            o["certificateChain"] = .string(check.certificateChain.rawValue)
            o["certificateValidity"] = .string(check.certificateValidity.rawValue)
            o["revocation"] = .string(check.revocation.rawValue)
            if let s = check.documentSigner { o["documentSigner"] = .string(s) }
            if let t = check.trustAnchor { o["trustAnchor"] = .string(t) }
        }
        if let reason { o["reason"] = .string(reason) }
        return .object(o)
    }
}
