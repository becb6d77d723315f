import APDU
import FoundationEssentials
import TesseraCore
import X509Support

/// Country signing CA certificates that anchor passive authentication.
///
/// Loads PEM (one or many certificates), DER certificates, and ICAO CSCA master lists (CMS SignedData with a
/// CscaMasterList, Doc 9303 Part 12 §9). A master list is accepted only when its CMS signature verifies and its
/// Master List Signer certificate carries the master list signing extended key usage, was valid when the list
/// was signed (its CMS signingTime), and is one of `masterListTrust` or is signed by one of them (a CSCA of the
/// issuing state); every certificate of an accepted list is kept, link certificates included. A list whose
/// signer has expired since still loads and is reported stale (`masterLists`). The master list signer
/// certificates are not added as anchors.
public struct CSCATrustStore: Sendable {
    public private(set) var certificates: [ParsedCertificate]
    /// Anchors that master lists must chain to (`tesserad --master-list-trust`).
    public var masterListTrust: [ParsedCertificate]
    /// CRLs whose signature a trusted CSCA verified.
    public private(set) var crls: [CertificateRevocationList] = []
    /// The master lists loaded.
    public private(set) var masterLists: [MasterList] = []
    /// The file each certificate and CRL (by DER) was first loaded from.
    public private(set) var sources: [[UInt8]: String] = [:]
    private var loading: String?

    public init(certificates: [ParsedCertificate] = [], masterListTrust: [ParsedCertificate] = []) {
        self.certificates = certificates
        self.masterListTrust = masterListTrust
    }

    /// Loads a file or every file in a directory (non-recursive; unreadable or non-certificate files in a
    /// directory are skipped, a bad single file or a master list that is not trusted throws).
    public init(contentsOf path: String, masterListTrust: [ParsedCertificate] = []) throws(TesseraError) {
        certificates = []
        self.masterListTrust = masterListTrust
        try load(path: path)
    }

    /// Adds a certificate.
    public mutating func add(_ certificate: ParsedCertificate) {
        guard !certificates.contains(certificate) else { return }
        certificates.append(certificate)
        if let loading { sources[certificate.der] = loading }
    }

    /// Adds the certificates in PEM, DER or master-list bytes; returns how many were found.
    @discardableResult
    public mutating func add(contentsOf bytes: [UInt8]) throws(TesseraError) -> Int {
        let pems = PEM.blocks(bytes, label: "CERTIFICATE")
        if !pems.isEmpty {
            for der in pems { add(try ParsedCertificate(der: der)) }
            return pems.count
        }
        if let cert = try? ParsedCertificate(der: bytes) {
            add(cert)
            return 1
        }
        let list = try Self.masterList(bytes, trustedSigners: masterListTrust)
        for c in list.certificates { add(c) }
        masterLists.append(
            MasterList(
                signer: list.signer.subjectDescription, signerNotAfter: list.signer.notAfter,
                signedAt: list.signedAt, certificateCount: list.certificates.count, source: loading))
        return list.certificates.count
    }

    /// A master list that was loaded, and its signer.
    public struct MasterList: Sendable, Equatable {
        /// The Master List Signer certificate's subject.
        public var signer: String
        public var signerNotAfter: Date
        /// The CMS signingTime, when the list carries one.
        public var signedAt: Date?
        public var certificateCount: Int
        /// The file it came from.
        public var source: String?

        /// The signer has expired since it signed the list: the list is as old as its signer allows.
        public func isStale(at date: Date) -> Bool { date > signerNotAfter }
    }

    /// Loads a file or a directory of files.
    public mutating func load(path: String) throws(TesseraError) {
        var isDir = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw TesseraError(.invalidInput, "trust store path \(path) does not exist")
        }
        if isDir {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            for name in names.sorted() {
                let file = FilePaths.join(path, name)
                guard let data = FileManager.default.contents(atPath: file), data.count < 64 << 20 else { continue }
                let bytes = [UInt8](data)
                loading = file
                defer { loading = nil }
                do { try add(contentsOf: bytes) } catch {
                    // Other files are skipped, but a master list that does not verify is refused.
                    if Self.isMasterList(bytes) { throw TesseraError(error.code, "\(file): \(error.message)") }
                }
            }
        } else {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw TesseraError(.storageError, "cannot read \(path)")
            }
            guard data.count < 64 << 20 else { throw TesseraError(.invalidInput, "\(path) is too large") }
            loading = path
            defer { loading = nil }
            do { try add(contentsOf: [UInt8](data)) } catch {
                throw TesseraError(error.code, "\(path): \(error.message)")
            }
        }
    }

    /// Whether `bytes` are a CMS SignedData with the CSCA master list content type (signature not checked).
    public static func isMasterList(_ bytes: [UInt8]) -> Bool {
        (try? CMSSignedData(contentInfo: bytes))?.contentType == AlgorithmOIDs.cscaMasterList
    }

    /// The CSCA certificates in an ICAO master list (CscaMasterList ::= SEQUENCE { version, certList SET OF Certificate }),
    /// after checking its signature and that its signer chains to `trustedSigners`. Throws INVALID_INPUT with
    /// the reason when the list is not trusted.
    public static func masterListCertificates(_ bytes: [UInt8], trustedSigners: [ParsedCertificate])
        throws(TesseraError) -> [ParsedCertificate]
    {
        try masterList(bytes, trustedSigners: trustedSigners).certificates
    }

    static func masterList(_ bytes: [UInt8], trustedSigners: [ParsedCertificate], now: Date = Date())
        throws(TesseraError) -> (certificates: [ParsedCertificate], signer: ParsedCertificate, signedAt: Date?)
    {
        let sd = try CMSSignedData(contentInfo: bytes)
        guard sd.contentType == AlgorithmOIDs.cscaMasterList else {
            throw TesseraError(.malformedData, "not a CSCA master list (content type \(sd.contentType))")
        }
        let (signer, signedAt) = try verifyMasterListSigner(sd, trustedSigners: trustedSigners, now: now)
        let ml = try TLV.parse(sd.content)
        try ASN1.expect(ml, ASN1.sequence, "CscaMasterList")
        let parts = try ml.children()
        guard parts.count == 2 else { throw TesseraError(.malformedData, "CscaMasterList") }
        try ASN1.expect(parts[1], ASN1.set, "certList")
        var out = [ParsedCertificate]()
        for c in try parts[1].children() {
            // Real master lists contain the odd broken certificate; skip it rather than drop the list.
            if let cert = try? ParsedCertificate(der: c.encoded) { out.append(cert) }
        }
        return (out, signer, signedAt)
    }

    /// id-icao-mrtd-security-cscaMasterListSigningKey (Doc 9303 Part 12 §7.1.2).
    public static let masterListSigningKeyUsage = "2.23.136.1.1.3"

    /// Checks the master list's SignerInfo with the Master List Signer certificate it carries, that this
    /// certificate has the master list signing extended key usage and was valid at the list's signingTime (at
    /// `now` when the list has none), and that it is a trusted anchor or is signed by one (found by authority key
    /// identifier, else by name). Returns the signer and the signingTime.
    static func verifyMasterListSigner(_ sd: CMSSignedData, trustedSigners: [ParsedCertificate], now: Date)
        throws(TesseraError) -> (signer: ParsedCertificate, signedAt: Date?)
    {
        guard !trustedSigners.isEmpty else {
            throw TesseraError(
                .invalidInput, "master list refused: no master list trust anchor configured (--master-list-trust)")
        }
        guard sd.signerInfos.count == 1, let signer = sd.signerInfos.first else {
            throw TesseraError(.invalidInput, "master list refused: it has \(sd.signerInfos.count) signers, not one")
        }
        guard let signerCert = sd.certificate(for: signer) else {
            throw TesseraError(
                .invalidInput, "master list refused: the Master List Signer certificate is not in the list")
        }
        switch sd.verify(signer, signerKey: signerCert.subjectPublicKeyInfo) {
        case .valid: break
        case .invalid(let why): throw TesseraError(.invalidInput, "master list refused: signature invalid (\(why))")
        case .unsupported(let why):
            throw TesseraError(.invalidInput, "master list refused: signature not checkable (\(why))")
        }
        guard signerCert.extendedKeyUsage?.contains(masterListSigningKeyUsage) == true else {
            throw TesseraError(
                .invalidInput,
                "master list refused: signer \(signerCert.subjectDescription) lacks the master list signing extended key usage (\(masterListSigningKeyUsage))"
            )
        }
        var signedAt: Date?
        if let time = signer.attributes[AlgorithmOIDs.signingTimeAttribute] {
            do { signedAt = try ASN1.time(time) } catch {
                throw TesseraError(.invalidInput, "master list refused: its signingTime is malformed")
            }
        }
        let at = signedAt ?? now
        guard signerCert.notBefore <= at, at <= signerCert.notAfter else {
            throw TesseraError(
                .invalidInput,
                "master list refused: signer \(signerCert.subjectDescription) was not valid when the list was "
                    + (signedAt == nil ? "loaded (the list has no signingTime)" : "signed (\(at.iso8601Seconds))"))
        }
        if trustedSigners.contains(signerCert) { return (signerCert, signedAt) }
        let anchors = CSCATrustStore(certificates: trustedSigners).candidates(forIssuerOf: signerCert).certificates
        guard let issuer = anchors.first(where: { (try? signerCert.isSigned(by: $0)) == true }) else {
            throw TesseraError(
                .invalidInput,
                "master list refused: signer \(signerCert.subjectDescription) does not chain to a --master-list-trust anchor"
            )
        }
        if let ku = issuer.keyUsage, ku & ParsedCertificate.keyCertSign == 0 {
            throw TesseraError(
                .invalidInput, "master list refused: anchor \(issuer.subjectDescription) lacks keyCertSign key usage")
        }
        return (signerCert, signedAt)
    }

    /// Adds the CRLs in PEM or DER bytes; each must be signed by a trusted CSCA. Returns how many were added.
    /// Throws MALFORMED_DATA for bytes that are no CRL, INVALID_INPUT for a CRL no trusted CSCA signed.
    @discardableResult
    public mutating func addCRLs(contentsOf bytes: [UInt8]) throws(TesseraError) -> Int {
        let pems = PEM.blocks(bytes, label: "X509 CRL")
        var parsed = [CertificateRevocationList]()
        for der in pems.isEmpty ? [bytes] : pems { parsed.append(try CertificateRevocationList(der: der)) }
        for crl in parsed {
            var signers = certificates.filter { ParsedCertificate.sameName($0.subject, crl.issuer) }
            if let aki = crl.authorityKeyIdentifier, signers.contains(where: { $0.subjectKeyIdentifier == aki }) {
                signers = signers.filter { $0.subjectKeyIdentifier == aki }
            }
            guard signers.contains(where: { (try? crl.isSigned(by: $0)) == true }) else {
                throw TesseraError(
                    .invalidInput,
                    "CRL of \(crl.issuerDescription) refused: no trusted CSCA with that name verifies its signature")
            }
            if !crls.contains(crl) {
                crls.append(crl)
                if let loading { sources[crl.der] = loading }
            }
        }
        return parsed.count
    }

    /// Loads CRLs from a file or a directory (non-recursive; files that are no CRL are skipped in a directory,
    /// a CRL that no trusted CSCA signed throws naming the file). Load the CSCAs first.
    public mutating func loadCRLs(path: String) throws(TesseraError) {
        var isDir = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw TesseraError(.invalidInput, "CRL path \(path) does not exist")
        }
        let files: [String]
        if isDir {
            files = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
                .map { FilePaths.join(path, $0) }
        } else {
            files = [path]
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file), data.count < 64 << 20 else {
                if isDir { continue }
                throw TesseraError(.storageError, "cannot read \(file)")
            }
            loading = file
            defer { loading = nil }
            do { try addCRLs(contentsOf: [UInt8](data)) } catch {
                if isDir && error.code == .malformedData { continue }
                throw TesseraError(error.code, "\(file): \(error.message)")
            }
        }
    }

    /// Revocation of a document signer certificate by the CRLs of its issuer.
    public enum Revocation: String, Sendable {
        /// A CRL of the issuer was found and does not list the certificate.
        case checked
        /// No CRL of the issuer is loaded.
        case notChecked
        case revoked
    }

    /// Looks `certificate` up in the CRLs of its issuer; `stale` when a CRL used is past its nextUpdate at `date`.
    public func revocation(of certificate: ParsedCertificate, at date: Date) -> (status: Revocation, stale: Bool) {
        let relevant = crls.filter { $0.covers(certificate) }
        guard !relevant.isEmpty else { return (.notChecked, false) }
        let stale = relevant.contains { $0.isStale(at: date) }
        let revoked = relevant.contains { $0.revokedSerialNumbers.contains(certificate.serialNumber) }
        return (revoked ? .revoked : .checked, stale)
    }

    /// Anchors that may have issued `certificate`: those whose subject key identifier equals its authority key
    /// identifier (`byKeyIdentifier` true), else those whose subject name equals its issuer name.
    public func candidates(forIssuerOf certificate: ParsedCertificate) -> (
        certificates: [ParsedCertificate], byKeyIdentifier: Bool
    ) {
        if let aki = certificate.authorityKeyIdentifier {
            let byKey = certificates.filter { $0.subjectKeyIdentifier == aki }
            if !byKey.isEmpty { return (byKey, true) }
        }
        return (certificates.filter { ParsedCertificate.sameName($0.subject, certificate.issuer) }, false)
    }
}
