import APDU
import AccessControl
import CredentialStore
import Crypto
import Emulation
import FoundationEssentials
import ICAO
import PCSC
import PIV
import TesseraCore
import TesseraTestSupport
import Testing
import X509
import X509Support

/// PKI-CAK and PKI-AUTH checks of emulated PIV badges through a real private pcscd and vpcd (SP 800-116).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct BadgeCheckTests {
    @Test func genuineBadgeIsGrantedWithItsIdentityFromTheCertificate() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let (card, issued) = try await pki.card(serial: 3101)
        await card.clearCommands()
        let decision = try await door.check(card, trust: try pki.trust())
        #expect(decision.decision == .granted, "\(decision.reasons)")
        #expect(decision.reasons.isEmpty)
        #expect(decision.cardholder == "Alice Example")
        #expect(decision.badgeId == Base64URL.encode([0x34] + BadgePKI.identifiers(serial: 3101).uuid!))
        // SELECT, GET DATA 9E certificate, GENERAL AUTHENTICATE, GET DATA CHUID: the protocol's minimum (GET RESPONSEs
        // carry the certificate's answer past 256 bytes).
        let commands = await card.commands.map { $0[1] }.filter { $0 != PIV.INS.getResponse }
        #expect(commands == [PIV.INS.select, PIV.INS.getData, PIV.INS.generalAuthenticate, PIV.INS.getData])
        // An independent verifier (swift-crypto) agrees the certificate's key is the card's 9E key.
        let certificate = try Certificate(derEncoded: issued.cardAuthCertificate)
        let point = try #require(await card.publicKey(slot: PIV.Slot.cardAuthentication))
        #expect(certificate.publicKey == Certificate.PublicKey(try P256.Signing.PublicKey(x963Representation: point)))
    }

    @Test func cloneWithTheGenuineCertificateAndCHUIDButAnotherKeyIsDenied() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let (genuine, _) = try await pki.card(serial: 3102)
        // The clone: every readable object of the genuine card, and a 9E key of its own.
        var state = await genuine.state
        let other = P256.Signing.PrivateKey()
        state.keys["9e"] = .init(
            algorithm: PIV.Algorithm.eccP256.rawValue, privateKey: Hex.encode(other.rawRepresentation))
        let clone = EmulatedPIVCard(state: state)
        let decision = try await door.check(clone, trust: try pki.trust())
        #expect(decision.decision == .denied)
        #expect(decision.reasons == [.cakSignatureInvalid])
        // A CHUID-only reader would have let it in: the CHUID itself verifies.
        #expect(!decision.reasons.contains(.chuidSignatureInvalid))

        // A copy without any 9E key at all is denied for the same reason.
        state.keys["9e"] = nil
        let keyless = try await door.check(EmulatedPIVCard(state: state), trust: try pki.trust())
        #expect(keyless.reasons == [.cakSignatureInvalid])
    }

    @Test func untrustedExpiredAndRevokedCertificatesEachHaveTheirReason() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let trust = try pki.trust()

        let (foreign, _) = try await pki.card(serial: 3103, by: pki.stranger)
        let untrusted = try await door.check(foreign, trust: trust)
        #expect(untrusted.reasons.first == .certUntrusted, "\(untrusted.reasons)")
        #expect(untrusted.decision == .denied)

        let (old, _) = try await pki.card(serial: 3104, notBefore: pki.now - 3 * 86400, notAfter: pki.now - 86400)
        let expired = try await door.check(old, trust: trust)
        #expect(expired.reasons.first == .certExpired, "\(expired.reasons)")

        let (revokedCard, issued) = try await pki.card(serial: 3105)
        let serial = try ParsedCertificate(der: issued.cardAuthCertificate).serialNumber
        let crl = try await pki.authority.crl(
            revoking: [serial], thisUpdate: pki.now - 60, nextUpdate: pki.now + 86400)
        let revoked = try await door.check(revokedCard, trust: try pki.trust(crls: [crl]))
        #expect(revoked.reasons == [.certRevoked])
        // A CRL from another CA naming the same serial revokes nothing.
        let forged = try await pki.stranger.crl(
            revoking: [serial], thisUpdate: pki.now - 60, nextUpdate: pki.now + 86400)
        let notRevoked = try await door.check(
            revokedCard,
            trust: BadgeTrust(
                anchors: [try pki.authority.parsedCertificate()], crls: [try CertificateRevocationList(der: forged)]))
        #expect(notRevoked.decision == .granted, "\(notRevoked.reasons)")
        // Only a stale CRL of the issuer (past its nextUpdate): the door cannot know, and denies.
        let stale = try await pki.authority.crl(revoking: [], thisUpdate: pki.now - 7200, nextUpdate: pki.now - 3600)
        let unknown = try await door.check(revokedCard, trust: try pki.trust(crls: [stale]))
        #expect(unknown.reasons == [.certRevocationUnknown])
    }

    @Test func chuidWithABadSignatureOtherIdentifiersOrPastItsDateIsDenied() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let trust = try pki.trust()
        let ids = BadgePKI.identifiers(serial: 3106)
        let chuidKey = String(PIV.Object.chuid, radix: 16)

        // Signature: a CHUID whose expiration was changed after signing.
        let (tampered, _) = try await pki.card(serial: 3106)
        var state = await tampered.state
        let signed = try await pki.authority.chuid(fascn: ids.fascn!, guid: ids.uuid!, expiration: "20991231")
        let chuid = try CHUID(content: signed)
        state.objects[chuidKey] = Hex.encode(
            CHUID.content(fascn: ids.fascn!, guid: ids.uuid!, expiration: "20981231", signature: chuid.signature))
        let badSignature = try await door.check(EmulatedPIVCard(state: state), trust: trust)
        #expect(badSignature.reasons == [.chuidSignatureInvalid])

        // Signed by a CA the door does not trust.
        state.objects[chuidKey] = Hex.encode(
            try await pki.stranger.chuid(fascn: ids.fascn!, guid: ids.uuid!, expiration: "20991231"))
        let foreignSigner = try await door.check(EmulatedPIVCard(state: state), trust: trust)
        #expect(foreignSigner.reasons == [.chuidSignatureInvalid])

        // Unsigned (the emulator's factory CHUID shape).
        state.objects[chuidKey] = Hex.encode(CHUID.content(fascn: ids.fascn!, guid: ids.uuid!, expiration: "20991231"))
        let unsigned = try await door.check(EmulatedPIVCard(state: state), trust: trust)
        #expect(unsigned.reasons == [.chuidSignatureInvalid])

        // Identifiers: a genuine signature over another card's GUID.
        let otherGUID = BadgePKI.identifiers(serial: 9999).uuid!
        state.objects[chuidKey] = Hex.encode(
            try await pki.authority.chuid(fascn: ids.fascn!, guid: otherGUID, expiration: "20991231"))
        let mismatch = try await door.check(EmulatedPIVCard(state: state), trust: trust)
        #expect(mismatch.reasons == [.chuidMismatch])

        // Expired: a genuine signature over a past date.
        state.objects[chuidKey] = Hex.encode(
            try await pki.authority.chuid(fascn: ids.fascn!, guid: ids.uuid!, expiration: "20200101"))
        let expired = try await door.check(EmulatedPIVCard(state: state), trust: trust)
        #expect(expired.reasons == [.chuidExpired])
    }

    @Test func lifecycleSuspendResumeDeactivate() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let directory = Scratch.directory("access")
        let store = CredentialStore(database: try TesseraDatabase(path: directory + "/tessera.sqlite"))
        let registry = BadgeRegistry(store: store)
        let (card, issued) = try await pki.card(serial: 3107)

        let unknown = try await door.check(card, trust: try pki.trust(), registry: registry)
        #expect(unknown.reasons == [.badgeUnknown])

        _ = try await registry.register(
            identifiers: issued.identifiers, holder: "alice", certificate: issued.cardAuthCertificate,
            keys: issued.publicKeys, owner: 0,
            actor: "uid:0", replace: false)
        let id = try #require(issued.identifiers.idBytes)
        #expect(try await door.check(card, trust: try pki.trust(), registry: registry).decision == .granted)

        _ = try await store.transition(ids: [id], to: .suspended, actor: "uid:0", reason: "lost")
        #expect(try await door.check(card, trust: try pki.trust(), registry: registry).reasons == [.badgeSuspended])
        _ = try await store.transition(ids: [id], to: .active, actor: "uid:0", reason: "found")
        #expect(try await door.check(card, trust: try pki.trust(), registry: registry).decision == .granted)
        _ = try await store.transition(ids: [id], to: .deactivated, actor: "uid:0", reason: "left")
        #expect(try await door.check(card, trust: try pki.trust(), registry: registry).reasons == [.badgeDeactivated])
        // The audit trail is the passkeys' one.
        let events = try await store.events(credentialId: id)
        #expect(events.map(\.toState) == ["active", "suspended", "active", "deactivated"])

        // The same card again: refused; a holder with a deactivated badge gets no new one without replace.
        await #expect(throws: TesseraError.self) {
            try await registry.register(
                identifiers: issued.identifiers, holder: "alice", certificate: [], keys: [0x9E: []], owner: 0,
                actor: "uid:0",
                replace: false)
        }
        let second = BadgePKI.identifiers(serial: 3108)
        do {
            _ = try await registry.register(
                identifiers: second, holder: "alice", certificate: [], keys: [0x9E: []], owner: 0, actor: "uid:0",
                replace: false)
            Issue.record("a holder with a deactivated badge got a new one")
        } catch {
            #expect(error.code == .credentialDeactivated)
        }
        // With replace the holder gets the new badge and the old card is `replaced`.
        let replaced = try await registry.register(
            identifiers: second, holder: "alice", certificate: [], keys: [0x9E: []], owner: 0, actor: "uid:0",
            replace: true)
        #expect(replaced.map { [UInt8]($0.record.credentialId) } == [id])
        #expect(try await door.check(card, trust: try pki.trust(), registry: registry).reasons == [.badgeReplaced])
    }

    @Test func cardPulledMidCheckIsCardRemoved() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let (card, _) = try await pki.card(serial: 3109)
        await card.setDelay(.seconds(2), forInstruction: PIV.INS.generalAuthenticate)
        let (link, pcsc) = try await door.present(card)
        let trust = try pki.trust()
        let check = Task { await BadgeCheck(trust: trust).run(transport: pcsc) }
        try await Task.sleep(for: .milliseconds(500))
        await link.remove()
        let reading = await check.value
        #expect(reading.reasons == [.cardRemoved])
        #expect(AccessDecision(reading: reading, state: .active, admitted: nil).decision == .denied)
        await pcsc.disconnect()
    }

    @Test func authModeWantsTheRightPIN() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let (card, _) = try await pki.card(
            serial: 3110, slots: [PIV.Slot.cardAuthentication, PIV.Slot.authentication])
        let trust = try pki.trust()
        let right = try await door.check(card, trust: trust, mode: .auth, pin: "123456")
        #expect(right.decision == .granted, "\(right.reasons)")
        let wrong = try await door.check(card, trust: trust, mode: .auth, pin: "654321")
        #expect(wrong.reasons == [.pinInvalid])
        #expect(await card.state.pinRetries == 2)
        let none = try await door.check(card, trust: trust, mode: .auth)
        #expect(none.reasons == [.pinRequired])
        // Two wrong PINs leave one try: the final-try guard keeps it.
        _ = try await door.check(card, trust: trust, mode: .auth, pin: "654321")
        let guarded = try await door.check(card, trust: trust, mode: .auth, pin: "654321")
        #expect(guarded.reasons == [.pinLocked])
        #expect(await card.state.pinRetries == 1)
        // The 9E check needs no PIN at all.
        #expect(try await door.check(card, trust: trust).decision == .granted)
    }

    @Test func badgeIssuedOverPCSCIsGrantedAtTheDoor() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 3111))
        let (link, pcsc) = try await door.present(card)
        let app = PIVApplication(transport: pcsc)
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let issued = try await BadgeWriter(authority: pki.authority).write(
            app, holder: "Bob Example", identifiers: BadgePKI.identifiers(serial: 3111),
            slots: [PIV.Slot.cardAuthentication, PIV.Slot.authentication], notBefore: pki.now - 60,
            notAfter: pki.now + 86400)
        await pcsc.disconnect()
        await door.remove(link)
        #expect(await card.keySlots == [PIV.Slot.authentication, PIV.Slot.cardAuthentication])
        let decision = try await door.check(card, trust: try pki.trust())
        #expect(decision.decision == .granted, "\(decision.reasons)")
        #expect(decision.cardholder == "Bob Example")
        #expect(decision.badgeId == issued.identifiers.badgeId)
    }
}
