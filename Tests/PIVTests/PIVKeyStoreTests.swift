import APDU
import Crypto
import Emulation
import FoundationEssentials
import KeyStores
import PCSC
import PIV
import PIVKeyStore
import Passkeys
import TesseraCore
import TesseraTestSupport
import Testing

/// PIVKeyStore + PasskeyService through a real private pcscd, vpcd readers and emulated PIV cards.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct PIVKeyStoreTests {
    @Test func enrollAndAuthenticateWithFourAPDUsPerAssertion() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1001))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        #expect(token.backend == "piv")
        #expect(token.id.hasPrefix("piv-"))

        let reg = try await h.enroll(tokenId: token.id)
        #expect(reg.userVerified)
        let slot = try #require(await card.keySlots.first)
        #expect(PIV.Slot.retired.contains(slot))
        let point = try #require(await card.publicKey(slot: slot))
        // The COSE key carries the card's point.
        #expect(reg.publicKey.firstRange(of: point[1..<33]) != nil && reg.publicKey.firstRange(of: point[33...]) != nil)

        await card.clearCommands()
        let (a, _) = try await h.authenticate(reg.credentialId)
        #expect(try verifyAssertion(a, point: point))
        #expect(a.userVerified)
        // SELECT, VERIFY without data (retries left: the final-try guard; spends no try), VERIFY, GENERAL AUTHENTICATE.
        let commands = await card.commands
        #expect(
            commands.map { $0[1] } == [PIV.INS.select, PIV.INS.verify, PIV.INS.verify, PIV.INS.generalAuthenticate])
        #expect(commands.count == 4 && commands[1].count == 4, "the first VERIFY carries no PIN")

        // Without a PIN: no VERIFY, UV not claimed; the PIN verified above still lets the card sign.
        await card.clearCommands()
        let (b, _) = try await h.authenticate(reg.credentialId, pin: nil)
        #expect(!b.userVerified)
        #expect(try verifyAssertion(b, point: point))
        #expect(await card.commands.map { $0[1] } == [PIV.INS.select, PIV.INS.generalAuthenticate])
        #expect(b.signCount > a.signCount)

        // After a card reset the PIN is no longer verified: PIN_REQUIRED, never a guessed PIN.
        await card.reset()
        _ = await expectError(.pinRequired) { try await h.authenticate(reg.credentialId, pin: nil) }
    }

    @Test func wrongPINDecrementsByExactlyOneAndBlockedPINIsLocked() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1002))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)

        #expect(try await h.store.pinStatus(tokenId: token.id) == .verified)
        await card.reset()
        #expect(try await h.store.pinStatus(tokenId: token.id) == .notVerified(retriesLeft: 3))
        let e = await expectError(.pinInvalid) { try await h.authenticate(reg.credentialId, pin: "000000") }
        #expect(e?.details["retriesLeft"] == 2)
        #expect(try await h.store.pinStatus(tokenId: token.id) == .notVerified(retriesLeft: 2))
        #expect(await card.state.pinRetries == 2)

        // A PIN the card cannot take is refused before it reaches the card.
        _ = await expectError(.invalidInput) { try await h.authenticate(reg.credentialId, pin: "12") }
        #expect(await card.state.pinRetries == 2)

        _ = await expectError(.pinInvalid) { try await h.authenticate(reg.credentialId, pin: "000000") }
        #expect(try await h.store.pinStatus(tokenId: token.id) == .notVerified(retriesLeft: 1))
        let flags = await token.describe()["flags"]
        #expect(flags?["pinFinalTry"] == true)
        // The final try is kept unless the request allows it: refused before VERIFY, the counter unchanged.
        let guarded = await expectError(.pinFinalTryProtected) {
            try await h.authenticate(reg.credentialId, pin: "000000")
        }
        #expect(guarded?.details["retriesLeft"] == 1)
        #expect(await card.state.pinRetries == 1)
        _ = await expectError(.pinLocked) {
            try await h.authenticate(reg.credentialId, pin: "000000", allowFinalPinTry: true)
        }
        #expect(try await h.store.pinStatus(tokenId: token.id) == .blocked)
        _ = await expectError(.pinLocked) { try await h.authenticate(reg.credentialId, pin: "123456") }
        #expect(await card.state.pinRetries == 0)
        #expect(await token.describe()["flags"]?["pinLocked"] == true)
    }

    @Test func changePINThroughTheStore() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1003))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        let e = await expectError(.pinInvalid) {
            try await h.store.changePIN(tokenId: token.id, old: .unattended("999999"), new: "654321")
        }
        #expect(e?.details["retriesLeft"] == 2)
        try await h.store.changePIN(tokenId: token.id, old: .unattended("123456"), new: "654321")
        #expect(await card.state.pin == "654321")
        let reg = try await h.enroll(tokenId: token.id, pin: "654321")
        _ = try await h.authenticate(reg.credentialId, pin: "654321")
    }

    @Test func removedBetweenEnrollAndAuthenticateThenReinserted() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1004))
        let link = try await h.insert(card)
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)

        await link.remove()
        #expect(await h.noToken())
        _ = await expectError(.tokenNotPresent) { try await h.authenticate(reg.credentialId) }

        try await link.insert()
        let back = try #require(await h.token())
        #expect(back.id == token.id)
        let (a, _) = try await h.authenticate(reg.credentialId)
        let slot = try #require(await card.keySlots.first)
        let point = try #require(await card.publicKey(slot: slot))
        #expect(try verifyAssertion(a, point: point))
        await link.remove()
    }

    @Test func removedMidOperationIsTokenRemoved() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1005))
        let link = try await h.insert(card)
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)

        await card.setDelay(.seconds(3), forInstruction: PIV.INS.generalAuthenticate)
        let pending = Task { () async -> TesseraError? in
            do { _ = try await h.authenticate(reg.credentialId); return nil } catch { return error as? TesseraError }
        }
        try await Task.sleep(for: .milliseconds(700))
        await link.remove()
        let error = await pending.value
        #expect(error?.code == .tokenRemoved, "\(String(describing: error))")
        #expect(error?.retryable == true)

        await card.setDelay(nil, forInstruction: PIV.INS.generalAuthenticate)
        #expect(await h.noToken())  // the monitor has seen the removal
        try await link.insert()
        #expect(await h.token() != nil)
        _ = try await h.authenticate(reg.credentialId)
        await link.remove()
    }

    @Test func twoCardsAtOnce() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let cards = [
            EmulatedPIVCard(state: .factoryNew(serial: 2001)), EmulatedPIVCard(state: .factoryNew(serial: 2002)),
        ]
        let links = [try await h.insert(cards[0], reader: 0), try await h.insert(cards[1], reader: 1)]
        let t0 = try #require(await h.token(reader: 0))
        let t1 = try #require(await h.token(reader: 1))
        #expect(t0.id != t1.id)
        let r0 = try await h.enroll(tokenId: t0.id)
        let r1 = try await h.enroll(tokenId: t1.id)
        #expect(r0.tokenId == t0.id && r1.tokenId == t1.id)
        async let a0 = h.authenticate(r0.credentialId)
        async let a1 = h.authenticate(r1.credentialId)
        let (x0, x1) = try await (a0, a1)
        for (card, assertion) in zip(cards, [x0.0, x1.0]) {
            let slot = try #require(await card.keySlots.first)
            let point = try #require(await card.publicKey(slot: slot))
            #expect(try verifyAssertion(assertion, point: point))
        }
        for l in links { await l.remove() }
    }

    @Test func pcscdRestartedUnderARunningStore() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1006))
        let link = try await h.insert(card)
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)

        await h.pcscd.stopDaemon()
        let down = await eventually(.seconds(15)) { h.store.status()["status"] == "PCSC_UNAVAILABLE" ? true : nil }
        #expect(down == true)
        #expect(await h.store.tokens().isEmpty)
        _ = await expectError(.tokenNotPresent) { try await h.authenticate(reg.credentialId) }

        try await h.pcscd.startDaemon()
        #expect(await link.waitUntilConnected(timeout: .seconds(10)))
        let back = try #require(await h.token())
        #expect(back.id == token.id)
        #expect(h.store.status()["status"] == "OK")
        _ = try await h.authenticate(reg.credentialId)
        await link.remove()
    }

    @Test func storeStartsWithoutPcscdAndRecovers() async throws {
        let pcscd = try await PCSCDaemonFixture.acquire()
        await pcscd.stopDaemon()
        let h = try PIVHarness(pcscd: pcscd)
        defer { Task { await h.stop() } }
        let down = await eventually(.seconds(15)) { h.store.status()["status"] == "PCSC_UNAVAILABLE" ? true : nil }
        #expect(down == true)
        #expect(await h.store.tokens().isEmpty)
        try await pcscd.startDaemon()
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1007))
        let link = try await h.insert(card)
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)
        _ = try await h.authenticate(reg.credentialId)
        await link.remove()
    }

    @Test func otherPCSCClientsBetweenOperations() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1008))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        let reg = try await h.enroll(tokenId: token.id)

        // opensc-tool talks to the card between two of our operations (we hold no transaction in between).
        let (status, output) = try await h.pcscd.runClient(
            "/usr/bin/opensc-tool",
            [
                "--reader", "0", "-s", "00:A4:04:00:09:A0:00:00:03:08:00:00:10:00", "-s",
                "00:CB:3F:FF:05:5C:03:5F:C1:02",
            ])
        #expect(status == 0, "\(output)")
        #expect(output.contains("SW1=0x90"), "\(output)")
        _ = try await h.authenticate(reg.credentialId)

        // Another client resets the card: our next operation reports CARD_RESET, the one after reconnects.
        let other = try await PCSCContext().connect(reader: h.pcscd.readerName, shareMode: .shared)
        try await other.reconnect(initialization: .reset)
        await other.disconnect()
        let e = await expectError(.cardReset) { try await h.authenticate(reg.credentialId) }
        #expect(e?.retryable == true)
        _ = try await h.authenticate(reg.credentialId)
    }

    @Test func slotsOfOtherProgramsAreNeverTouched() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        var state = PIVCardState.factoryNew(serial: 1009)
        // Another program's key in 82 (no certificate), a certificate for 84 (5FC10F), the factory key in 9A.
        let foreign = P256.Signing.PrivateKey()
        state.keys["82"] = .init(algorithm: 0x11, privateKey: Hex.encode(foreign.rawRepresentation))
        state.keys["9a"] = .init(algorithm: 0x11, privateKey: Hex.encode(P256.Signing.PrivateKey().rawRepresentation))
        state.objects["5fc10f"] = Hex.encode(TLV(tag: 0x70, value: [0x30, 0x00]).encoded)
        let card = EmulatedPIVCard(state: state)
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())

        let r1 = try await h.enroll(tokenId: token.id)
        let r2 = try await h.enroll(tokenId: token.id)
        #expect(await card.keySlots == [0x82, 0x83, 0x85, 0x9A])
        #expect(await card.publicKey(slot: 0x82) == Array(foreign.publicKey.x963Representation))
        #expect(try await h.slots.slots(tokenId: token.id).map(\.slot) == [0x83, 0x85])

        // Delete overwrites the slot with a fresh key and keeps it as Tessera's free slot, reused next.
        let old83 = await card.publicKey(slot: 0x83)
        try await h.service.delete(id: r1.credentialId)
        #expect(await card.publicKey(slot: 0x83) != old83)
        #expect(try await h.slots.slots(tokenId: token.id).first?.state == .free)
        _ = await expectError(.passkeyNotFound) { try await h.authenticate(r1.credentialId) }
        let r3 = try await h.enroll(tokenId: token.id)
        #expect(await card.keySlots == [0x82, 0x83, 0x85, 0x9A])
        _ = try await h.authenticate(r3.credentialId)
        _ = try await h.authenticate(r2.credentialId)
    }

    @Test func keyCreationNeedsAManagementKey() async throws {
        let h = try await PIVHarness.start(managementKey: nil)
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 1010))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        _ = await expectError(.managementKeyRequired) { try await h.enroll(tokenId: token.id) }
        #expect(await card.keySlots.isEmpty)
        #expect(await card.state.pinRetries == 3)
    }

    @Test func sshKeysAreKeysWithACertificateNeverPasskeys() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        var state = PIVCardState.factoryNew(serial: 1011)
        // A key in 9A without a certificate: not offered to SSH.
        state.keys["9a"] = .init(algorithm: 0x11, privateKey: Hex.encode(P256.Signing.PrivateKey().rawRepresentation))
        let card = EmulatedPIVCard(state: state)
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())
        #expect(try await token.publicKeys().isEmpty)

        _ = try await h.enroll(tokenId: token.id)  // a passkey (retired slot, no certificate)
        let handle = [UInt8](repeating: 7, count: 16)
        let point = try await token.generateP256Key(handle: handle, label: "ssh:unit@test", pin: nil)
        #expect(try await token.publicKeys() == [TokenKey(handle: handle, label: "ssh:unit@test", publicPoint: point)])
        let slot = try #require(try await h.slots.slot(tokenId: token.id, keyHandle: handle)?.slot)
        #expect(PIV.Slot.retired.contains(UInt8(slot)))
        #expect(await card.state.objects[String(PIV.Object.certificate(slot: UInt8(slot))!, radix: 16)] != nil)
        #expect(try await h.slots.slots(tokenId: token.id).count == 2)
    }
}
