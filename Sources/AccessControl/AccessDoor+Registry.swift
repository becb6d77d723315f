import CredentialStore
import DoorList
import Foundation
import ICAO
import TesseraCore
import X509Support

extension AccessDoor {
    /// The decision at a door that follows an office's list: the badge's state, holder and pinned key from the
    /// list, the door rule of the named door or of the reader's door in the list (its `grantCommand` replaces the
    /// configured one), and REGISTRY_STALE when the door has no list or its list is stale. Returns the grant command
    /// to run on a grant.
    static func followed(
        _ reading: BadgeReading, view: RegistryFollower.View, door: String?, reader: String, apdus: Int,
        elapsed: Duration
    ) -> (AccessDecision, [String]?) {
        let entry = reading.badgeId.flatMap { view.index?.badge($0) }
        let doorName = door ?? view.index?.doorOfReader[reader]
        var admitted: Bool?
        if let doorName, let index = view.index {
            // A door the list does not name admits no one.
            let allowed = index.allowed[doorName] ?? []
            admitted = [entry?.holder, reading.badgeId].contains { $0.map(allowed.contains) ?? false }
        }
        let state = entry.map { CredentialState(rawValue: $0.state) ?? .deactivated }
        var decision = AccessDecision(
            reading: reading, state: state, admitted: admitted, door: doorName, reader: reader, apdus: apdus,
            elapsed: elapsed)
        decision.holder = entry?.holder
        if let entry, let der = reading.certificate, let certificate = try? ParsedCertificate(der: der),
            DoorList.keySHA256(certificate) != entry.keySHA256,
            !decision.reasons.contains(where: { AccessDecision.identityUnproven.contains($0) })
        {
            decision.deny(.badgeKeyMismatch)
        }
        if view.stale { decision.deny(.registryStale) }
        decision.registry = view.stamp
        let argv = doorName.flatMap { view.index?.list.doors[$0]?.grantCommand }
        return (decision, argv)
    }
}

extension BadgeTrust {
    /// This trust with `crl` (a CRL a door received from its office) beside the configured ones.
    func adding(_ crl: CertificateRevocationList?) -> BadgeTrust {
        guard let crl else { return self }
        return BadgeTrust(anchors: anchors, crls: crls + [crl])
    }
}
