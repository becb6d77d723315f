import APDU
import Foundation
import TesseraCore

/// Country signing CA certificates that anchor passive authentication.
///
/// Loads PEM (one or many certificates), DER certificates, and ICAO CSCA master lists (CMS SignedData with a
/// CscaMasterList, Doc 9303 Part 12 §9). The master list's own signature is not verified: whoever configures the
/// store vouches for the file, as with a PEM bundle. The master list signer certificates are not added as anchors.
public struct CSCATrustStore: Sendable {
    public private(set) var certificates: [ParsedCertificate]

    public init(certificates: [ParsedCertificate] = []) {
        self.certificates = certificates
    }

    /// Loads a file or every file in a directory (non-recursive; unreadable or non-certificate files in a
    /// directory are skipped, a bad single file throws).
    public init(contentsOf path: String) throws(TesseraError) {
        certificates = []
        try load(path: path)
    }

    /// Adds a certificate.
    public mutating func add(_ certificate: ParsedCertificate) {
        if !certificates.contains(certificate) { certificates.append(certificate) }
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
        let list = try Self.masterListCertificates(bytes)
        for c in list { add(c) }
        return list.count
    }

    /// Loads a file or a directory of files.
    public mutating func load(path: String) throws(TesseraError) {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw TesseraError(.invalidInput, "trust store path \(path) does not exist")
        }
        if isDir.boolValue {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            for name in names.sorted() {
                let file = (path as NSString).appendingPathComponent(name)
                guard let data = FileManager.default.contents(atPath: file), data.count < 64 << 20 else { continue }
                _ = try? add(contentsOf: [UInt8](data))
            }
        } else {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw TesseraError(.storageError, "cannot read \(path)")
            }
            guard data.count < 64 << 20 else { throw TesseraError(.invalidInput, "\(path) is too large") }
            try add(contentsOf: [UInt8](data))
        }
    }

    /// The CSCA certificates in an ICAO master list (CscaMasterList ::= SEQUENCE { version, certList SET OF Certificate }).
    public static func masterListCertificates(_ bytes: [UInt8]) throws(TesseraError) -> [ParsedCertificate] {
        let sd = try CMSSignedData(contentInfo: bytes)
        guard sd.contentType == AlgorithmOIDs.cscaMasterList else {
            throw TesseraError(.malformedData, "not a CSCA master list (content type \(sd.contentType))")
        }
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
        return out
    }

    /// Anchors that may have issued `certificate`: those whose subject key identifier equals its authority key
    /// identifier (`byKeyIdentifier` true), else those whose subject name equals its issuer name.
    public func candidates(forIssuerOf certificate: ParsedCertificate) -> (certificates: [ParsedCertificate], byKeyIdentifier: Bool) {
        if let aki = certificate.authorityKeyIdentifier {
            let byKey = certificates.filter { $0.subjectKeyIdentifier == aki }
            if !byKey.isEmpty { return (byKey, true) }
        }
        return (certificates.filter { ParsedCertificate.sameName($0.subject, certificate.issuer) }, false)
    }
}
