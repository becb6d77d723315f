import APDU
import CredentialStore
import Foundation
import PIV
import Passkeys
import TesseraCore
import X509

/// Badges in the credential store, so they share the passkeys' lifecycle states, audit trail and methods
/// (`credentials.suspend/resume/deactivate/history` take the badge id as `credentialId`). A badge is a credential
/// record of relying party `tessera.badge`: credential id = the card's `BadgeIdentifiers.idBytes`, user = the
/// holder, token = the card, backend `piv-badge`, the Card Authentication certificate as its public key.
public struct BadgeRegistry: Sendable {
    /// The relying party id under which badges are recorded.
    public static let rpId = "tessera.badge"
    /// The backend name of a badge record (no key store signs with it).
    public static let backend = "piv-badge"

    public let store: CredentialStore

    public init(store: CredentialStore) { self.store = store }

    /// The badge's record (its lifecycle state, its holder as `userName`); nil when it is not registered.
    public func badge(_ idBytes: [UInt8]) async throws(TesseraError) -> CredentialRecord? {
        guard let record = try await store.credential(id: idBytes), record.rpId == Self.rpId else { return nil }
        return record
    }

    /// The record of the badge the card behind `app` (selected) carries now, by its Card Authentication
    /// certificate's identifiers; nil for a card without one or one not registered.
    public func badgeOnCard(_ app: PIVApplication) async throws(TesseraError) -> CredentialRecord? {
        guard let object = try await app.getData(PIV.Object.certificate(slot: PIV.Slot.cardAuthentication) ?? 0),
            let der = try? TLV.parseAll(object, options: .card).first(tag: 0x70)?.value,
            let certificate = try? Certificate(derEncoded: der),
            let id = BadgeIdentifiers(certificate: certificate).idBytes
        else { return nil }
        return try await badge(id)
    }

    /// The badge's lifecycle state; nil when it is not registered.
    public func state(badgeId idBytes: [UInt8]) async throws(TesseraError) -> CredentialState? {
        try await badge(idBytes)?.state
    }

    /// The provisioning decision tree over `holder`'s badges before a new card is written (the same check runs
    /// again when the badge is recorded): CREDENTIAL_EXISTS (suspended), CREDENTIAL_DEACTIVATED unless `replace`.
    public func precheck(holder: String, replace: Bool) async throws(TesseraError) {
        let existing = try await store.list(rpId: Self.rpId, userId: Array(holder.utf8))
        // A card not written yet is on no record: the holder's active badges make it "provisioned elsewhere".
        _ = try ProvisioningCheck.decide(existing, tokenId: "(new card)").admit(replace: replace)
    }

    /// Registers the badge of `identifiers` for `holder`, under the provisioning decision tree over the holder's
    /// badges (docs/LIFECYCLE.md): a first badge or one more card of a holder whose badges are active goes ahead;
    /// a holder with a suspended or deactivated badge, or this card already registered, is refused
    /// (CREDENTIAL_EXISTS, CREDENTIAL_DEACTIVATED) unless `replace`, which marks the holder's badges `replaced`.
    public func register(
        identifiers: BadgeIdentifiers, holder: String, certificate: [UInt8], owner: UInt32, actor: String,
        replace: Bool
    ) async throws(TesseraError) -> [CredentialStore.Transition] {
        guard let idBytes = identifiers.idBytes else {
            throw TesseraError.invalidInput("the badge has neither a card UUID nor a FASC-N")
        }
        let cardToken = Base64URL.encode(idBytes)
        if let existing = try await store.credential(id: idBytes) {
            if !replace {
                throw TesseraError(
                    existing.state.isFinal ? .credentialDeactivated : .credentialExists,
                    "this card is already registered as a badge (\(existing.state.rawValue))",
                    details: ["decision": "alreadyProvisioned", "credentialIds": .array([.string(cardToken)])])
            }
            _ = try await store.delete(
                id: idBytes,
                event: CredentialEvent(
                    credentialId: Data(idBytes), at: Date(), fromState: existing.state.rawValue, toState: "deleted",
                    actor: actor, reason: "re-issued"))
        }
        let record = CredentialRecord(
            credentialId: Data(idBytes), rpId: Self.rpId, userId: Data(holder.utf8), userName: holder,
            userDisplayName: holder, tokenId: cardToken, backend: Self.backend,
            keyHandle: Data([0x9E]), publicKey: Data(certificate), ownerUid: owner)
        return try await store.insert(
            record,
            admit: { existing throws(TesseraError) in
                try ProvisioningCheck.decide(existing, tokenId: cardToken).admit(replace: replace)
            }, actor: actor, reason: "badge issued")
    }
}
