import APDU
import CredentialStore
import CryptoPrimitives
import FoundationEssentials
import PIV
import Passkeys
import TesseraCore
import X509
import X509Support

/// Badges in the credential store, so they share the passkeys' lifecycle states, audit trail and methods
/// (`credentials.suspend/resume/deactivate/history` take the badge id as `credentialId`). A badge is a credential
/// record of relying party `tessera.badge`: credential id = the card's `BadgeIdentifiers.idBytes`, user = the
/// holder, token = the card, backend `piv-badge`, the Card Authentication certificate as its public key, and the
/// card's keys pinned in `keyHandle` (`pinnedKeys`).
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

    /// SHA-256 of the SubjectPublicKeyInfo of each key the badge was registered with, by slot (9E, and 9A when the
    /// card had one). `keyHandle` holds them as `slot ‖ hash` entries; a record of earlier versions (`keyHandle` 9E
    /// alone) pins the 9E key of its certificate (`publicKey`).
    public static func pinnedKeys(_ record: CredentialRecord) -> [UInt8: [UInt8]] {
        pinnedKeys(keyHandle: record.keyHandle, certificate: record.publicKey)
    }

    /// `pinnedKeys` of a record's `keyHandle` and `publicKey` columns.
    public static func pinnedKeys(keyHandle: Data, certificate: Data) -> [UInt8: [UInt8]] {
        let handle = [UInt8](keyHandle)
        if handle == [PIV.Slot.cardAuthentication] {
            guard let certificate = try? ParsedCertificate(der: [UInt8](certificate)) else { return [:] }
            return [PIV.Slot.cardAuthentication: MessageDigest.sha256(certificate.subjectPublicKeyInfo)]
        }
        var pins: [UInt8: [UInt8]] = [:]
        var rest = handle[...]
        while rest.count >= 33 {
            pins[rest[rest.startIndex]] = Array(rest.dropFirst().prefix(32))
            rest = rest.dropFirst(33)
        }
        return pins
    }

    /// Whether `spki`, the key a check proved in `slot`, is the key the badge was registered with: nil when the
    /// record of an earlier version pins no key for that slot (9A).
    public static func keyMatches(_ record: CredentialRecord, slot: UInt8, spki: [UInt8]) -> Bool? {
        let pins = pinnedKeys(record)
        guard let pin = pins[slot] else {
            return [UInt8](record.keyHandle) == [PIV.Slot.cardAuthentication] ? nil : false
        }
        return pin == MessageDigest.sha256(spki)
    }

    /// The SubjectPublicKeyInfo of the card's 9E and 9A certificates (the card behind `app`, selected), by slot.
    public static func cardKeys(_ app: PIVApplication) async throws(TesseraError) -> [UInt8: [UInt8]] {
        var keys: [UInt8: [UInt8]] = [:]
        for slot in [PIV.Slot.cardAuthentication, PIV.Slot.authentication] {
            guard let tag = PIV.Object.certificate(slot: slot), let object = try await app.getData(tag),
                let der = try? TLV.parseAll(object, options: .card).first(tag: 0x70)?.value,
                let certificate = try? ParsedCertificate(der: der)
            else { continue }
            keys[slot] = certificate.subjectPublicKeyInfo
        }
        return keys
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
        identifiers: BadgeIdentifiers, holder: String, certificate: [UInt8], keys: [UInt8: [UInt8]], owner: UInt32,
        actor: String, replace: Bool
    ) async throws(TesseraError) -> [CredentialStore.Transition] {
        guard keys[PIV.Slot.cardAuthentication] != nil else {
            throw TesseraError.invalidInput("the badge's Card Authentication key (9E) is needed to register it")
        }
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
            keyHandle: Data(keys.sorted { $0.key > $1.key }.flatMap { [$0.key] + MessageDigest.sha256($0.value) }),
            publicKey: Data(certificate), ownerUid: owner)
        return try await store.insert(
            record,
            admit: { existing throws(TesseraError) in
                try ProvisioningCheck.decide(existing, tokenId: cardToken).admit(replace: replace)
            }, actor: actor, reason: "badge issued")
    }
}
