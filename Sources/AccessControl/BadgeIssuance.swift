import APDU
import Crypto
import DoorList
import FoundationEssentials
import ICAO
import KeyStores
import PIV
import Passkeys
import SwiftASN1
import TesseraCore
import X509
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// A badge CA: its certificate and a signer for its key (software for tests and the lab, a key on a PKCS#11 token
/// for `access.issue`). The CA signs the slot certificates, the CRL and, as the content signer, the CHUID.
public struct BadgeAuthority: Sendable {
    /// Returns the DER ECDSA-with-SHA-256 signature of the bytes it is given.
    public typealias Signer = @Sendable ([UInt8]) async throws(TesseraError) -> [UInt8]

    public let certificate: Certificate
    let sign: Signer

    /// An authority whose key signs through `sign` (e.g. on a token).
    public init(certificate: Certificate, sign: @escaping Signer) {
        self.certificate = certificate; self.sign = sign
    }

    /// An authority with a software key.
    public init(certificate: Certificate, key: Certificate.PrivateKey) {
        self.init(certificate: certificate) { bytes throws(TesseraError) in
            do {
                return try await key.signAsynchronously(bytes: bytes, signatureAlgorithm: .ecdsaWithSHA256)
                    .rawRepresentation
            } catch { throw TesseraError(.cryptoError, "the badge CA key could not sign: \(error)") }
        }
    }

    /// An authority whose key is the P-256 key labelled `keyLabel` on `token` (a PKCS#11 token; the daemon logs in
    /// with the token's PIN file). INVALID_INPUT when there is no such key or it is not `certificate`'s key.
    public static func onToken(certificate: Certificate, token: any KeyStoreToken, keyLabel: String)
        async throws(TesseraError) -> BadgeAuthority
    {
        guard let key = try await token.publicKeys().first(where: { $0.label == keyLabel && $0.value.isP256 }) else {
            throw TesseraError.invalidInput("no P-256 key labelled '\(keyLabel)' on token \(token.id)")
        }
        let matches = (try? P256.Signing.PublicKey(x963Representation: key.publicPoint)).map {
            Certificate.PublicKey($0) == certificate.publicKey
        }
        guard matches == true else {
            throw TesseraError.invalidInput(
                "the key '\(keyLabel)' on token \(token.id) is not the key of the issuer certificate")
        }
        let handle = key.handle
        return BadgeAuthority(certificate: certificate) { bytes throws(TesseraError) in
            let raw = try await token.signP256(handle: handle, message: bytes, pin: nil)
            return try ECDSASignature.derFromRaw(raw)
        }
    }

    /// A self-signed P-256 badge CA (tests and the lab): keyCertSign, cRLSign and digitalSignature (it signs CHUIDs).
    public static func generate(
        name: String, key: P256.Signing.PrivateKey = .init(), notBefore: Date, notAfter: Date
    ) async throws -> BadgeAuthority {
        let subject = try DistinguishedName {
            CountryName("US")
            OrganizationName("Tessera test badges")
            CommonName(name)
        }
        let certificate = try await Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: subject, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: Certificate.PublicKey(key.publicKey))
            }, issuerAsyncPrivateKey: .init(key))
        return BadgeAuthority(certificate: certificate, key: .init(key))
    }

    /// The CA certificate as `ParsedCertificate` (an anchor of `BadgeTrust`).
    public func parsedCertificate() throws(TesseraError) -> ParsedCertificate {
        try ParsedCertificate(der: Self.der(certificate))
    }

    static func der(_ certificate: Certificate) throws(TesseraError) -> [UInt8] {
        do {
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return serializer.serializedBytes
        } catch { throw TesseraError(.cryptoError, "cannot encode a certificate: \(error)") }
    }

    /// A badge certificate for `publicKey` (a P-256 point from the card): the holder as common name, FASC-N and
    /// card UUID in the subjectAltName, digitalSignature; for 9E the id-PIV-cardAuth EKU.
    public func issue(
        slot: UInt8, point: [UInt8], identifiers: BadgeIdentifiers, holder: String, notBefore: Date, notAfter: Date
    ) async throws(TesseraError) -> [UInt8] {
        do {
            let publicKey = try P256.Signing.PublicKey(x963Representation: point)
            let subject = try DistinguishedName {
                OrganizationName("Tessera badges")
                CommonName(holder)
            }
            let names = try identifiers.generalNames()
            let eku = try ASN1ObjectIdentifier(dotRepresentation: PIVOID.cardAuth)
            let extensions = try Certificate.Extensions {
                Critical(KeyUsage(digitalSignature: true))
                SubjectAlternativeNames(names)
                if slot == PIV.Slot.cardAuthentication {
                    try ExtendedKeyUsage([.init(oid: eku)])
                }
                SubjectKeyIdentifier(hash: Certificate.PublicKey(publicKey))
            }
            // swift-certificates signs with a key object; the TBSCertificate it builds is re-signed by the authority
            // (whose key may be on a token) and the certificate assembled around it.
            let draft = try await Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(publicKey),
                notValidBefore: notBefore, notValidAfter: notAfter, issuer: self.certificate.subject,
                subject: subject, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
                issuerAsyncPrivateKey: .init(P256.Signing.PrivateKey()))
            let parts = try TLV.parse(try Self.der(draft)).children()
            guard parts.count == 3 else { throw TesseraError(.cryptoError, "unexpected certificate shape") }
            let signature = try await sign(parts[0].encoded)
            return DERBuild.sequence([
                parts[0].encoded, parts[1].encoded, TLV.encode(tag: 0x03, value: [0] + signature),
            ])
        } catch let error as TesseraError {
            throw error
        } catch {
            throw TesseraError(.cryptoError, "cannot issue the badge certificate: \(error)")
        }
    }

    /// A v2 CRL of this authority revoking the certificates with `serialNumbers` (INTEGER content octets, as
    /// `ParsedCertificate.serialNumber`), valid from `thisUpdate` to `nextUpdate`.
    public func crl(revoking serialNumbers: [[UInt8]], thisUpdate: Date, nextUpdate: Date, number: UInt64 = 1)
        async throws(TesseraError) -> [UInt8]
    {
        try await crl(
            entries: serialNumbers.map {
                .init(serialNumber: $0, revokedAt: thisUpdate, reason: .cessationOfOperation)
            },
            thisUpdate: thisUpdate, nextUpdate: nextUpdate, number: number)
    }

    /// A v2 CRL of this authority listing `entries` with their reason codes and the CRL number `number`
    /// (`BadgeCRL`), signed by this authority's key.
    public func crl(entries: [BadgeCRL.Entry], thisUpdate: Date, nextUpdate: Date, number: UInt64)
        async throws(TesseraError) -> [UInt8]
    {
        let tbs = BadgeCRL.tbsCertList(
            issuer: try parsedCertificate(), entries: entries, thisUpdate: thisUpdate, nextUpdate: nextUpdate,
            number: number)
        return BadgeCRL.assemble(tbs: tbs, signature: try await sign(tbs))
    }

    /// The CHUID content for the card, signed by this authority.
    public func chuid(fascn: [UInt8], guid: [UInt8], expiration: String) async throws(TesseraError) -> [UInt8] {
        let signed = CHUID.unsignedContent(fascn: fascn, guid: guid, expiration: expiration)
        let signature = try await CHUID.signature(
            over: signed, fascn: fascn, signerCertificate: try parsedCertificate(), sign: sign)
        return CHUID.content(fascn: fascn, guid: guid, expiration: expiration, signature: signature)
    }
}

/// Writes a badge onto a PIV card (SP 800-73-4 Part 2): with the management key authenticated, GENERATE the
/// 9E (and 9A) key on the card, have the authority certify each public key, PUT DATA the certificate objects and a
/// CHUID the authority signed. The card's private keys never leave it.
public struct BadgeWriter: Sendable {
    public let authority: BadgeAuthority

    public init(authority: BadgeAuthority) { self.authority = authority }

    /// What was written.
    public struct Issued: Sendable {
        public var identifiers: BadgeIdentifiers
        /// The Card Authentication certificate (DER).
        public var cardAuthCertificate: [UInt8]
        /// The SubjectPublicKeyInfo of each certified key, by slot (what `BadgeRegistry.register` pins).
        public var publicKeys: [UInt8: [UInt8]] = [:]
    }

    /// Issues the badge on the card behind `app` (already selected and management-key authenticated).
    /// `slots` are the keys to generate (9E always first).
    public func write(
        _ app: PIVApplication, holder: String, identifiers: BadgeIdentifiers, slots: [UInt8], notBefore: Date,
        notAfter: Date
    ) async throws(TesseraError) -> Issued {
        guard let fascn = identifiers.fascn, let uuid = identifiers.uuid else {
            throw TesseraError.invalidInput("a badge needs a FASC-N and a card UUID")
        }
        var cardAuth: [UInt8] = []
        var publicKeys: [UInt8: [UInt8]] = [:]
        for slot in slots {
            guard let object = PIV.Object.certificate(slot: slot) else {
                throw TesseraError.invalidInput("slot \(String(slot, radix: 16)) holds no certificate")
            }
            let point = try await app.generateP256(slot: slot)
            let der = try await authority.issue(
                slot: slot, point: point, identifiers: identifiers, holder: holder, notBefore: notBefore,
                notAfter: notAfter)
            try await app.putData(object, content: Self.certificateObject(der))
            if slot == PIV.Slot.cardAuthentication { cardAuth = der }
            publicKeys[slot] = try ParsedCertificate(der: der).subjectPublicKeyInfo
        }
        let t = CivilTime(notAfter)
        let expiration = String(t.year * 10000 + t.month * 100 + t.day)
        let chuid = try await authority.chuid(fascn: fascn, guid: uuid, expiration: expiration)
        try await app.putData(PIV.Object.chuid, content: chuid)
        return Issued(identifiers: identifiers, cardAuthCertificate: cardAuth, publicKeys: publicKeys)
    }

    /// A certificate object (SP 800-73-4 Part 1 Table 10): 70 certificate, 71 CertInfo (uncompressed), FE LRC.
    public static func certificateObject(_ der: [UInt8]) -> [UInt8] {
        TLV.encode(tag: 0x70, value: der) + TLV.encode(tag: 0x71, value: [0x00]) + TLV.encode(tag: 0xFE, value: [])
    }

    /// A FASC-N for agency 9999 (test cards), system 9999, credential number `credential` (BCD with odd parity,
    /// SP 800-73-4 / TIG SCEPACS), as the emulated card's factory CHUID carries.
    public static func testFASCN(credential: UInt32) -> [UInt8] {
        // 5-bit characters: digit (4 bits, LSB first) + odd parity; SS=11010, FS=10110, ES=11111.
        var digits: [UInt8] = []
        func field(_ s: String) { digits += s.utf8.map { $0 - 48 } }
        var bits: [UInt8] = []
        func put(_ v: UInt8) {
            let b = (0..<4).map { (v >> $0) & 1 }
            bits += b + [UInt8(b.reduce(0, +) % 2 == 0 ? 1 : 0)]
        }
        let ss: UInt8 = 0x0B, fs: UInt8 = 0x0D, es: UInt8 = 0x0F
        let credentialText = String(credential % 1_000_000)
        let number = String(repeating: "0", count: 6 - credentialText.count) + credentialText
        put(ss)
        for part in ["9999", "9999", number, "1", "1"] {
            digits = []
            field(part)
            for d in digits { put(d) }
            put(fs)
        }
        // Person identifier (10), organizational category (1), organization identifier (4), association (1).
        digits = []
        field("0000000000" + "1" + "9999" + "1")
        for d in digits { put(d) }
        put(es)
        var lrc = [UInt8](repeating: 0, count: 4)
        for c in stride(from: 0, to: bits.count, by: 5) { for k in 0..<4 { lrc[k] ^= bits[c + k] } }
        put(lrc.enumerated().reduce(0) { $0 | $1.element << $1.offset })
        var out: [UInt8] = []
        for byte in stride(from: 0, to: bits.count, by: 8) {
            out.append((0..<8).reduce(0) { acc, k in acc << 1 | (byte + k < bits.count ? bits[byte + k] : 0) })
        }
        return out
    }
}
