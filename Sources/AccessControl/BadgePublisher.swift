import CredentialStore
import CryptoPrimitives
import DoorList
import FoundationEssentials
import PIV
import TesseraCore
import X509Support

/// The badge office's side of a building (`accessControl.publisher`, docs/ACCESS.md "A building"): builds the door
/// list from the badges of the credential store and the doors' rules, signed by the publisher key, and the badge
/// CA's CRL (suspended badges on hold, deactivated ones `cessationOfOperation`, replaced ones `superseded`), signed
/// by the CA. Writing the files is the daemon's.
public struct BadgePublisher: Sendable {
    public let registry: BadgeRegistry
    /// The key that signs the list and its certificate.
    public let signer: BadgeAuthority
    /// The badge CA that signs the CRL (the same as `signer` when the publisher key is the CA key).
    public let certificateAuthority: BadgeAuthority
    public let doors: [String: DoorList.Door]
    /// Seconds from a publication to its expiry (and the CRL's nextUpdate).
    public let validity: Double

    public init(
        registry: BadgeRegistry, signer: BadgeAuthority, certificateAuthority: BadgeAuthority,
        doors: [String: DoorList.Door], validity: Double
    ) {
        self.registry = registry; self.signer = signer; self.certificateAuthority = certificateAuthority
        self.doors = doors; self.validity = validity
    }

    /// One publication: the list (signed, DER CMS) and the CRL (DER), both numbered `number`.
    public struct Publication: Sendable {
        public var number: UInt64
        public var issuedAt: Date
        public var expiresAt: Date
        public var signedList: [UInt8]
        public var crl: [UInt8]
        public var badges: Int
        /// Certificates the CRL lists.
        public var revoked: Int
    }

    /// What a publication needs of a badge's certificate, kept between publications by the office
    /// (`CertificateFacts.Cache`): a certificate is parsed once, not at every publication.
    public struct CertificateFacts: Sendable {
        /// The credential's creation time: a re-issued badge (same id, new certificate) is parsed again.
        var createdAt: Date
        var serialNumber: [UInt8]
        var issuedByCA: Bool
        /// SHA-256 of the certificate's key: the pin of a record of earlier versions (`keyHandle` 9E alone).
        var keySHA256: [UInt8]

        /// Badge id bytes → facts.
        public typealias Cache = [Data: CertificateFacts]
    }

    /// Builds publication `number` at `now` from the badges in the store; `cache` keeps the certificates' facts.
    public func publish(number: UInt64, now: Date = Date(), cache: inout CertificateFacts.Cache)
        async throws(TesseraError) -> Publication
    {
        let records = try await registry.store.summaries(rpId: BadgeRegistry.rpId)
        let ca = try certificateAuthority.parsedCertificate()
        var badges: [DoorList.Badge] = []
        badges.reserveCapacity(records.count)
        var entries: [BadgeCRL.Entry] = []
        var seen: CertificateFacts.Cache = [:]
        seen.reserveCapacity(records.count)
        for record in records {
            var facts = cache[record.credentialId].flatMap { $0.createdAt == record.createdAt ? $0 : nil }
            if facts == nil, let certificate = try? ParsedCertificate(der: [UInt8](record.publicKey)) {
                facts = CertificateFacts(
                    createdAt: record.createdAt, serialNumber: certificate.serialNumber,
                    issuedByCA: ParsedCertificate.sameName(certificate.issuer, ca.subject),
                    keySHA256: MessageDigest.sha256(certificate.subjectPublicKeyInfo))
            }
            seen[record.credentialId] = facts
            // The keys the badge was registered with (`BadgeRegistry.pinnedKeys`): 9E, and 9A when the card had one.
            // A record of earlier versions pins its certificate's key, parsed once into `facts`.
            let pins =
                [UInt8](record.keyHandle) == [PIV.Slot.cardAuthentication]
                ? facts.map { [PIV.Slot.cardAuthentication: $0.keySHA256] } ?? [:]
                : BadgeRegistry.pinnedKeys(keyHandle: record.keyHandle, certificate: record.publicKey)
            badges.append(
                DoorList.Badge(
                    id: Base64URL.encode(record.credentialId), holder: record.userName,
                    keySHA256: pins[PIV.Slot.cardAuthentication].map(Hex.encode) ?? "",
                    authKeySHA256: pins[PIV.Slot.authentication].map(Hex.encode), state: record.state.rawValue))
            let reason: BadgeCRL.Reason? =
                switch record.state {
                case .active: nil
                case .suspended: .certificateHold
                case .deactivated: .cessationOfOperation
                case .replaced: .superseded
                }
            // Only certificates this CA issued belong in its CRL.
            if let reason, let facts, facts.issuedByCA {
                entries.append(
                    BadgeCRL.Entry(
                        serialNumber: facts.serialNumber, revokedAt: record.stateChangedAt ?? now, reason: reason))
            }
        }
        cache = seen
        let expiresAt = now + validity
        let list = DoorList(number: number, issuedAt: now, expiresAt: expiresAt, badges: badges, doors: doors)
        let signedList = try await signer.sign(list)
        let crl = try await certificateAuthority.crl(
            entries: entries, thisUpdate: now, nextUpdate: expiresAt, number: number)
        return Publication(
            number: number, issuedAt: now, expiresAt: expiresAt, signedList: signedList, crl: crl,
            badges: badges.count, revoked: entries.count)
    }
}

extension BadgeAuthority {
    /// `list` signed by this authority's key (`SignedDoorList`).
    public func sign(_ list: DoorList) async throws(TesseraError) -> [UInt8] {
        try await SignedDoorList.sign(list, publisher: try parsedCertificate(), sign: sign)
    }
}
