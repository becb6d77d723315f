import CredentialStore
import Foundation
import Passkeys
import TesseraCore

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

    /// The badge's lifecycle state; nil when it is not registered.
    public func state(badgeId idBytes: [UInt8]) async throws(TesseraError) -> CredentialState? {
        try await badge(idBytes)?.state
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
