import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore

/// The fields of an X.509 certificate that the PKI checks of documents and mdoc need (CSCA, document signer,
/// master list signer, IACA, reader).
/// Parsed with the bounds-checked TLV reader; signature checks go through OpenSSL so brainpool and
/// explicit-parameter keys work.
public struct ParsedCertificate: Sendable, Equatable, Hashable {
    /// The whole certificate, DER.
    public let der: [UInt8]
    /// The DER TBSCertificate (what the issuer signed).
    public let tbsCertificate: [UInt8]
    /// The DER signatureAlgorithm AlgorithmIdentifier.
    public let signatureAlgorithm: [UInt8]
    public let signature: [UInt8]
    /// Serial number INTEGER content bytes.
    public let serialNumber: [UInt8]
    /// DER Name of the issuer / subject.
    public let issuer: [UInt8]
    public let subject: [UInt8]
    public let notBefore: Date
    public let notAfter: Date
    /// DER SubjectPublicKeyInfo.
    public let subjectPublicKeyInfo: [UInt8]
    public let subjectKeyIdentifier: [UInt8]?
    public let authorityKeyIdentifier: [UInt8]?
    /// KeyUsage bits (bit 0 = digitalSignature … bit 5 = keyCertSign), nil when the extension is absent.
    public let keyUsage: UInt16?
    /// basicConstraints cA, nil when the extension is absent.
    public let isCA: Bool?

    /// Parses a DER certificate. Throws MALFORMED_DATA.
    public init(der: [UInt8]) throws(TesseraError) {
        let cert = try TLV.parse(der)
        try ASN1.expect(cert, ASN1.sequence, "Certificate")
        let top = try cert.children()
        guard top.count == 3 else { throw TesseraError(.malformedData, "Certificate must have 3 parts") }
        try ASN1.expect(top[0], ASN1.sequence, "TBSCertificate")
        try ASN1.expect(top[1], ASN1.sequence, "signatureAlgorithm")
        try ASN1.expect(top[2], ASN1.bitString, "signature")
        guard top[2].value.first == 0 else {
            throw TesseraError(.malformedData, "signature BIT STRING with unused bits")
        }
        self.der = cert.encoded
        tbsCertificate = top[0].encoded
        signatureAlgorithm = top[1].encoded
        signature = Array(top[2].value.dropFirst())

        var fields = try top[0].children()
        if fields.first?.tag == 0xA0 { fields.removeFirst() }
        guard fields.count >= 6 else { throw TesseraError(.malformedData, "TBSCertificate too short") }
        try ASN1.expect(fields[0], ASN1.integer, "serialNumber")
        serialNumber = fields[0].value
        try ASN1.expect(fields[2], ASN1.sequence, "issuer")
        issuer = fields[2].encoded
        try ASN1.expect(fields[3], ASN1.sequence, "validity")
        let validity = try fields[3].children()
        guard validity.count == 2 else { throw TesseraError(.malformedData, "validity") }
        notBefore = try ASN1.time(validity[0])
        notAfter = try ASN1.time(validity[1])
        try ASN1.expect(fields[4], ASN1.sequence, "subject")
        subject = fields[4].encoded
        try ASN1.expect(fields[5], ASN1.sequence, "subjectPublicKeyInfo")
        subjectPublicKeyInfo = fields[5].encoded

        var ski: [UInt8]?, aki: [UInt8]?, ku: UInt16?, ca: Bool?
        if let extWrapper = fields.dropFirst(6).first(where: { $0.tag == 0xA3 }) {
            guard let list = try extWrapper.children().first else {
                throw TesseraError(.malformedData, "empty extensions")
            }
            for ext in try list.children() {
                let parts = try ext.children()
                guard parts.count >= 2, let value = parts.last, value.tag == ASN1.octetString else {
                    throw TesseraError(.malformedData, "bad extension")
                }
                switch try ASN1.oidValue(parts[0]) {
                case "2.5.29.14":
                    let v = try TLV.parse(value.value)
                    try ASN1.expect(v, ASN1.octetString, "subjectKeyIdentifier")
                    ski = v.value
                case "2.5.29.35":
                    let v = try TLV.parse(value.value)
                    aki = try v.children().first(tag: 0x80)?.value
                case "2.5.29.15":
                    let v = try TLV.parse(value.value)
                    try ASN1.expect(v, ASN1.bitString, "keyUsage")
                    guard let unused = v.value.first, unused < 8 else { throw TesseraError(.malformedData, "keyUsage") }
                    let bytes = Array(v.value.dropFirst())
                    var bits: UInt16 = 0
                    for (i, b) in bytes.prefix(2).enumerated() {
                        for j in 0..<8 where b & (0x80 >> j) != 0 { bits |= 1 << (i * 8 + j) }
                    }
                    ku = bits
                case "2.5.29.19":
                    let v = try TLV.parse(value.value)
                    let items = try v.children()
                    ca = items.first.map { $0.tag == ASN1.boolean && $0.value.first.map { $0 != 0 } == true } ?? false
                default: break
                }
            }
        }
        subjectKeyIdentifier = ski; authorityKeyIdentifier = aki; keyUsage = ku; isCA = ca
    }

    /// Extended key usage OIDs (dotted), nil without the extension or when it does not parse (read from `der` on
    /// each call: few callers need it).
    public var extendedKeyUsage: [String]? {
        guard let fields = try? TLV.parse(der).children().first?.children(),
            let wrapper = fields.dropFirst(6).first(where: { $0.tag == 0xA3 }),
            let list = try? wrapper.children().first?.children()
        else { return nil }
        for ext in list {
            guard let parts = try? ext.children(), parts.count >= 2, let value = parts.last,
                (try? ASN1.oidValue(parts[0])) == "2.5.29.37", let usages = try? TLV.parse(value.value).children()
            else { continue }
            var oids: [String] = []
            for usage in usages {
                guard let oid = try? ASN1.oidValue(usage) else { return nil }
                oids.append(oid)
            }
            return oids
        }
        return nil
    }

    /// Parses one PEM or DER certificate.
    public init(pemOrDER bytes: [UInt8]) throws(TesseraError) {
        if let first = PEM.blocks(bytes, label: "CERTIFICATE").first {
            try self.init(der: first)
        } else {
            try self.init(der: bytes)
        }
    }

    public static let digitalSignature: UInt16 = 1 << 0
    public static let keyCertSign: UInt16 = 1 << 5

    /// "C=UT, O=…, CN=…"
    public var subjectDescription: String { Self.describe(name: subject) }
    public var issuerDescription: String { Self.describe(name: issuer) }

    /// Country code (C) of the subject, if present.
    public var subjectCountry: String? { Self.attributes(subject).first { $0.0 == "C" }?.1 }
    /// Country code (C) of the issuer, if present.
    public var issuerCountry: String? { Self.attributes(issuer).first { $0.0 == "C" }?.1 }

    /// Whether `issuerCertificate`'s key verifies this certificate's signature.
    public func isSigned(by issuerCertificate: ParsedCertificate) throws(TesseraError) -> Bool {
        let scheme = try AlgorithmOIDs.scheme(try TLV.parse(signatureAlgorithm))
        return try Signatures.verify(
            signature, over: tbsCertificate, publicKey: issuerCertificate.subjectPublicKeyInfo,
            scheme: scheme)
    }

    /// PEM text.
    public var pem: String { PEM.encode(der, label: "CERTIFICATE") }

    package static func attributes(_ name: [UInt8]) -> [(String, String)] {
        guard let seq = try? TLV.parse(name), let rdns = try? seq.children() else { return [] }
        var out = [(String, String)]()
        let short = [
            "2.5.4.6": "C", "2.5.4.3": "CN", "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.5": "SERIALNUMBER",
            "2.5.4.7": "L", "2.5.4.8": "ST", "1.2.840.113549.1.9.1": "E",
        ]
        for rdn in rdns {
            for atv in (try? rdn.children()) ?? [] {
                guard let parts = try? atv.children(), parts.count == 2, let oid = try? ASN1.oidValue(parts[0]) else {
                    continue
                }
                out.append((short[oid] ?? oid, ASN1.text(parts[1].value)))
            }
        }
        return out
    }

    package static func describe(name: [UInt8]) -> String {
        attributes(name).map { "\($0.0)=\($0.1)" }.joined(separator: ", ")
    }

    /// Name equality: identical DER, or the same attributes compared case-insensitively.
    package static func sameName(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        if a == b { return true }
        let x = attributes(a).map { "\($0.0)=\($0.1.lowercased())" }.sorted()
        let y = attributes(b).map { "\($0.0)=\($0.1.lowercased())" }.sorted()
        return !x.isEmpty && x == y
    }
}

/// PEM armour (RFC 7468).
public enum PEM {
    /// The DER contents of every block with `label` in `bytes`.
    public static func blocks(_ bytes: [UInt8], label: String) -> [[UInt8]] {
        guard let text = String(validating: bytes, as: UTF8.self) else { return [] }
        var out = [[UInt8]]()
        let begin = "-----BEGIN \(label)-----", end = "-----END \(label)-----"
        var rest = Substring(text)
        while let b = rest.firstRange(of: begin), let e = rest[b.upperBound...].firstRange(of: end) {
            let body = rest[b.upperBound..<e.lowerBound].filter { !$0.isWhitespace }
            if let d = Data(base64Encoded: String(body)) { out.append([UInt8](d)) }
            rest = rest[e.upperBound...]
        }
        return out
    }

    /// PEM text with 64-column lines.
    public static func encode(_ der: [UInt8], label: String) -> String {
        let b64 = Data(der).base64EncodedString()
        var lines = [String]()
        var i = b64.startIndex
        while i < b64.endIndex {
            let j = b64.index(i, offsetBy: 64, limitedBy: b64.endIndex) ?? b64.endIndex
            lines.append(String(b64[i..<j]))
            i = j
        }
        return "-----BEGIN \(label)-----\n" + lines.joined(separator: "\n") + "\n-----END \(label)-----\n"
    }
}
