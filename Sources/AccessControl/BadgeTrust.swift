import FoundationEssentials
import ICAO
import SwiftASN1
import TesseraCore
@_spi(FixedExpiryValidationTime) import X509
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// The trust a door checks badges against: the badge CA anchors and the CRLs (`accessControl.anchors`, `crls`).
public struct BadgeTrust: Sendable {
    public let anchors: [ParsedCertificate]
    public let crls: [CertificateRevocationList]
    /// The files `load` read (to read them again); `crlFiles[i]` is the file of `crls[i]`.
    public let anchorFiles: [String]
    public let crlFiles: [String]
    /// When the set was loaded.
    public let loadedAt: Date

    public init(
        anchors: [ParsedCertificate], crls: [CertificateRevocationList] = [], anchorFiles: [String] = [],
        crlFiles: [String] = []
    ) {
        self.anchors = anchors; self.crls = crls; self.anchorFiles = anchorFiles; self.crlFiles = crlFiles
        loadedAt = Date()
    }

    /// The same files read again (INVALID_INPUT naming a file that does not parse or cannot be read).
    public func reloaded() throws(TesseraError) -> BadgeTrust {
        try Self.load(anchorFiles: anchorFiles, crlFiles: crlFiles)
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
        return BadgeTrust(anchors: anchors, crls: crls, anchorFiles: anchorFiles, crlFiles: crlFiles)
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
        switch revocation(of: leaf, now: now).status {
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

    /// `leaf`'s status by the CRLs its issuer (an anchor with that name) signed, and the index of the CRL that
    /// answered: revoked when one lists its serial (that one); unknown when every such CRL is past its nextUpdate (the
    /// newest); good otherwise (the newest current one); not checked without any.
    func revocation(of leaf: ParsedCertificate, now: Date) -> (status: Revocation, crl: Int?) {
        // An anchor (the CA signing CHUIDs itself) is trusted as configured, not through its own CRL.
        if anchors.contains(where: { $0.der == leaf.der }) { return (.notChecked, nil) }
        let signed = crls.indices.filter { i in
            crls[i].covers(leaf)
                && anchors.contains { anchor in
                    anchor.subject == crls[i].issuer && (try? crls[i].isSigned(by: anchor)) == true
                }
        }
        if signed.isEmpty { return (.notChecked, nil) }
        if let i = signed.first(where: { crls[$0].revokedSerialNumbers.contains(leaf.serialNumber) }) {
            return (.revoked, i)
        }
        let current = signed.filter { !crls[$0].isStale(at: now) }
        let newest = { (list: [Int]) in list.max { crls[$0].thisUpdate < crls[$1].thisUpdate } }
        return current.isEmpty ? (.unknown, newest(signed)) : (.good, newest(current))
    }

    /// The CRL that answered for `leaf` at `now` (what the decision reports as `crl`); nil when none was consulted.
    public func answeringCRL(for leaf: ParsedCertificate, now: Date) -> CRLSource? {
        revocation(of: leaf, now: now).crl.map(source)
    }

    /// The CRL at `index` with its file.
    func source(_ index: Int) -> CRLSource {
        let crl = crls[index]
        let issuer = (try? DistinguishedName(derEncoded: DER.parse(crl.issuer))).map { String(describing: $0) }
        return CRLSource(
            issuer: issuer ?? Hex.encode(crl.issuer), thisUpdate: crl.thisUpdate, nextUpdate: crl.nextUpdate,
            file: index < crlFiles.count ? crlFiles[index] : nil)
    }

    /// Every configured CRL with its file (`trust.status`).
    public var crlSources: [CRLSource] { crls.indices.map(source) }
}

/// A badge CRL as decisions and `trust.status` name it: its issuer, its updates and the file it was read from.
public struct CRLSource: Sendable, Equatable, Codable {
    public var issuer: String
    public var thisUpdate: Date
    public var nextUpdate: Date?
    public var file: String?

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "issuer": .string(issuer), "thisUpdate": .string(thisUpdate.iso8601Seconds),
        ]
        if let nextUpdate { o["nextUpdate"] = .string(nextUpdate.iso8601Seconds) }
        if let file { o["file"] = .string(file) }
        return .object(o)
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
