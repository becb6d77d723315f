import Foundation
import ICAO
import SwiftASN1
import TesseraCore
@_spi(FixedExpiryValidationTime) import X509
import X509Support

/// The trust a door checks badges against: the badge CA anchors and the CRLs (`accessControl.anchors`, `crls`).
public struct BadgeTrust: Sendable {
    public let anchors: [ParsedCertificate]
    public let crls: [CertificateRevocationList]

    public init(anchors: [ParsedCertificate], crls: [CertificateRevocationList] = []) {
        self.anchors = anchors; self.crls = crls
    }

    /// Loads PEM or DER certificate files and CRL files. Throws INVALID_INPUT naming the file that does not parse.
    public static func load(anchorFiles: [String], crlFiles: [String]) throws(TesseraError) -> BadgeTrust {
        var anchors: [ParsedCertificate] = []
        for path in anchorFiles {
            let bytes = try read(path)
            let blocks = PEM.blocks(bytes, label: "CERTIFICATE")
            do {
                if blocks.isEmpty {
                    anchors.append(try ParsedCertificate(der: bytes))
                } else {
                    for der in blocks { anchors.append(try ParsedCertificate(der: der)) }
                }
            } catch {
                throw TesseraError.invalidInput(
                    "accessControl.anchors: \(path) is not a certificate (\(error.message))")
            }
        }
        var crls: [CertificateRevocationList] = []
        for path in crlFiles {
            let bytes = try read(path)
            let der = PEM.blocks(bytes, label: "X509 CRL").first ?? bytes
            do {
                crls.append(try CertificateRevocationList(der: der))
            } catch {
                throw TesseraError.invalidInput("accessControl.crls: \(path) is not a CRL (\(error.message))")
            }
        }
        return BadgeTrust(anchors: anchors, crls: crls)
    }

    private static func read(_ path: String) throws(TesseraError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError.invalidInput("cannot read \(path)")
        }
        return Array(data)
    }

    /// What is wrong with `leaf` at `now` for a badge slot, in the order a door reports it: validity period,
    /// revocation by a CRL its issuer signed, then RFC 5280 path validation to an anchor with `requiredEKU` (when the
    /// certificate has an EKU extension) and digitalSignature key usage. Empty when the certificate is trusted.
    public func problems(
        leaf: ParsedCertificate, intermediates: [ParsedCertificate] = [], requiredEKU: String?, now: Date
    ) async -> [AccessReason] {
        if now > leaf.notAfter { return [.certExpired] }
        if now < leaf.notBefore { return [.certNotYetValid] }
        switch revocation(of: leaf, now: now) {
        case .revoked: return [.certRevoked]
        case .unknown: return [.certRevocationUnknown]
        case .good, .notChecked: break
        }
        guard let certificate = try? Certificate(derEncoded: leaf.der) else { return [.certUntrusted] }
        let roots = anchors.compactMap { try? Certificate(derEncoded: $0.der) }
        let others = intermediates.compactMap { try? Certificate(derEncoded: $0.der) }
        guard !roots.isEmpty else { return [.certUntrusted] }
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            RFC5280Policy(fixedExpiryValidationTime: now)
            PIVLeafPolicy(requiredEKU: requiredEKU)
        }
        let result = await verifier.validate(leaf: certificate, intermediates: CertificateStore(others))
        guard case .validCertificate = result else { return [.certUntrusted] }
        return []
    }

    enum Revocation { case good, revoked, unknown, notChecked }

    /// `leaf`'s status by the CRLs its issuer (an anchor with that name) signed: revoked when one lists its serial;
    /// unknown when every such CRL is past its nextUpdate; not checked without any.
    func revocation(of leaf: ParsedCertificate, now: Date) -> Revocation {
        // An anchor (the CA signing CHUIDs itself) is trusted as configured, not through its own CRL.
        if anchors.contains(where: { $0.der == leaf.der }) { return .notChecked }
        let signed = crls.filter { crl in
            crl.covers(leaf)
                && anchors.contains { anchor in
                    anchor.subject == crl.issuer && (try? crl.isSigned(by: anchor)) == true
                }
        }
        if signed.isEmpty { return .notChecked }
        if signed.contains(where: { $0.revokedSerialNumbers.contains(leaf.serialNumber) }) { return .revoked }
        return signed.allSatisfy { $0.isStale(at: now) } ? .unknown : .good
    }
}

/// The leaf of a badge slot signs (digitalSignature key usage) and, when it has an EKU extension, carries
/// `requiredEKU` (id-PIV-cardAuth for 9E, id-PIV-content-signing for the CHUID signer).
struct PIVLeafPolicy: VerifierPolicy {
    let requiredEKU: String?
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [.X509ExtensionID.extendedKeyUsage]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) -> PolicyEvaluationResult {
        if let usage = try? chain.leaf.extensions.keyUsage, !usage.digitalSignature {
            return .failsToMeetPolicy(reason: "the badge certificate's key usage lacks digitalSignature")
        }
        if let requiredEKU, let usages = try? chain.leaf.extensions.extendedKeyUsage,
            let oid = try? ASN1ObjectIdentifier(dotRepresentation: requiredEKU),
            !usages.contains(ExtendedKeyUsage.Usage(oid: oid))
        {
            return .failsToMeetPolicy(reason: "the badge certificate lacks EKU \(requiredEKU)")
        }
        return .meetsPolicy
    }
}
