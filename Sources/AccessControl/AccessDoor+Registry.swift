import CredentialStore
import DoorList
import FoundationEssentials
import ICAO
import PIV
import TesseraCore
import X509Support

extension AccessDoor {
    /// The decision at a door that follows an office's list: the badge's state and holder from the list, the
    /// rule of `door` (the list's door of the reader), the pinned key (BADGE_KEY_MISMATCH), and REGISTRY_STALE when
    /// the door has no list or its list is stale.
    static func followed(
        _ reading: BadgeReading, view: RegistryFollower.View, door: DoorRule?, reader: String, slot: UInt8,
        apdus: Int, elapsed: Duration
    ) -> AccessDecision {
        let entry = reading.badgeId.flatMap { view.index?.badge($0) }
        let admitted = door.map { $0.admits(holder: entry?.holder, badgeId: reading.badgeId) }
        let state = entry.map { CredentialState(rawValue: $0.state) ?? .deactivated }
        // The pinned key of the checked slot: 9E, or 9A in `auth` mode (a badge without a 9A pin has no such key).
        let certificate = reading.certificate.flatMap { try? ParsedCertificate(der: $0) }
        let pin = slot == PIV.Slot.authentication ? entry?.authKeySHA256 : entry?.keySHA256
        let keyMismatch = entry != nil && (pin == nil || certificate.map(DoorList.keySHA256) != pin)
        var decision = AccessDecision(
            reading: reading, state: state, keyMismatch: keyMismatch, admitted: admitted, door: door?.name,
            reader: reader, apdus: apdus, elapsed: elapsed)
        decision.holder = entry?.holder
        if view.stale { decision.deny(.registryStale) }
        decision.registry = view.stamp
        return decision
    }
}

extension BadgeTrust {
    /// This trust with `crl` (a CRL a door received from its office, read from `file`) beside the configured ones.
    func adding(_ crl: CertificateRevocationList?, file: String?) -> BadgeTrust {
        guard let crl else { return self }
        // `crlFiles[i]` is the file of `crls[i]`: the file is added only where that holds.
        let files = crlFiles.count == crls.count ? crlFiles + [file ?? "-"] : crlFiles
        return BadgeTrust(anchors: anchors, crls: crls + [crl], anchorFiles: anchorFiles, crlFiles: files)
    }
}
