import AccessControl
import CredentialStore
import FoundationEssentials
import PIV
import TesseraCore
import TesseraTestSupport
import Testing

/// The card keys a registered badge pins (docs/ACCESS.md, "The badge's key is pinned").
struct BadgeKeyPinTests {
    /// `genuine` registered for alice in a new store, as its record was stored.
    static func registered(_ genuine: BadgeWriter.Issued) async throws -> CredentialRecord {
        let store = CredentialStore(
            database: try TesseraDatabase(path: Scratch.directory("badge-pins") + "/tessera.sqlite"))
        let registry = BadgeRegistry(store: store)
        _ = try await registry.register(
            identifiers: genuine.identifiers, holder: "alice", certificate: genuine.cardAuthCertificate,
            keys: genuine.publicKeys, owner: 0, actor: "uid:0", replace: false)
        return try #require(try await registry.badge(genuine.identifiers.idBytes ?? []))
    }

    @Test func aRegisteredBadgeAcceptsOnlyItsOwnKeys() async throws {
        let pki = try await BadgePKI.make()
        let (_, genuine) = try await pki.card(
            serial: 4101, slots: [PIV.Slot.cardAuthentication, PIV.Slot.authentication])
        let (_, other) = try await pki.card(
            serial: 4102, slots: [PIV.Slot.cardAuthentication, PIV.Slot.authentication])
        let record = try await Self.registered(genuine)
        for slot in [PIV.Slot.cardAuthentication, PIV.Slot.authentication] {
            let own = try #require(genuine.publicKeys[slot])
            let foreign = try #require(other.publicKeys[slot])
            #expect(BadgeRegistry.keyMatches(record, slot: slot, spki: own) == true)
            #expect(BadgeRegistry.keyMatches(record, slot: slot, spki: foreign) == false)
        }
    }

    @Test func aBadgeWithout9AAcceptsNo9AKey() async throws {
        let pki = try await BadgePKI.make()
        let (_, genuine) = try await pki.card(serial: 4103)
        let (_, other) = try await pki.card(
            serial: 4104, slots: [PIV.Slot.cardAuthentication, PIV.Slot.authentication])
        let record = try await Self.registered(genuine)
        let foreign9A = try #require(other.publicKeys[PIV.Slot.authentication])
        #expect(BadgeRegistry.keyMatches(record, slot: PIV.Slot.authentication, spki: foreign9A) == false)
    }

    @Test func aRecordOfEarlierVersionsPinsItsCertificatesKey() async throws {
        let pki = try await BadgePKI.make()
        let (_, genuine) = try await pki.card(serial: 4105)
        let (_, other) = try await pki.card(serial: 4106)
        // Before pinning, keyHandle held the slot alone and publicKey the 9E certificate.
        let record = CredentialRecord(
            credentialId: Data(try #require(genuine.identifiers.idBytes)), rpId: BadgeRegistry.rpId,
            userId: Data("alice".utf8), userName: "alice", userDisplayName: "alice", tokenId: "card",
            backend: BadgeRegistry.backend, keyHandle: Data([0x9E]), publicKey: Data(genuine.cardAuthCertificate))
        let own = try #require(genuine.publicKeys[PIV.Slot.cardAuthentication])
        let foreign = try #require(other.publicKeys[PIV.Slot.cardAuthentication])
        #expect(BadgeRegistry.keyMatches(record, slot: PIV.Slot.cardAuthentication, spki: own) == true)
        #expect(BadgeRegistry.keyMatches(record, slot: PIV.Slot.cardAuthentication, spki: foreign) == false)
        #expect(BadgeRegistry.keyMatches(record, slot: PIV.Slot.authentication, spki: foreign) == nil)
    }
}
