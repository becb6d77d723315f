import APDU
import AccessControl
import CredentialStore
import Documents
import Emulation
import FoundationEssentials
import Logging
import PCSC
import PIV
import PN532Emulator
import TesseraCore
import TesseraTestSupport
import VPCD

// Badges at the door (issue 31, "Benchmark"): one SP 800-116 PKI-CAK check of an emulated PIV badge through
// `AccessDoor.check` — the daemon's path: open the card, SELECT, the 9E certificate, GENERAL AUTHENTICATE over a fresh
// challenge, path validation, the CHUID and its CMS signature, the lifecycle lookup in the credential store — in
// process (protocol and crypto cost only), through pcscd + vpcd (extended length), and through libnfc's pn532_uart
// driver against the software PN532 (short APDUs only, as contactless readers carry), against the protocol's
// minimum: 4 commands, plus the GET RESPONSEs a short-APDU reader needs for answers over 256 bytes.

func badgeBench(runs: Int, pcscd: PCSCDaemonFixture, context: PCSCContext) async throws {
    let now = Date()
    let authority = try await BadgeAuthority.generate(
        name: "Bench Badge CA", notBefore: now - 86400, notAfter: now + 365 * 86400)
    let card = EmulatedPIVCard(state: .factoryNew(serial: 3131))
    let app = PIVApplication(transport: InProcessCardTransport(card: card))
    try await app.select()
    try await app.authenticate(managementKey: .factoryDefault)
    let identifiers = BadgeIdentifiers(
        fascn: BadgeWriter.testFASCN(credential: 3131), uuid: Array("BENCH-BADGE-".utf8) + [0, 0, 0x0C, 0x3B])
    let issued = try await BadgeWriter(authority: authority).write(
        app, holder: "Bench Holder", identifiers: identifiers, slots: [PIV.Slot.cardAuthentication],
        notBefore: now - 60, notAfter: now + 86400)
    await card.reset()

    let directory = Scratch.directory("badge-bench")
    let store = CredentialStore(database: try TesseraDatabase(path: directory + "/tessera.sqlite"))
    let registry = BadgeRegistry(store: store)
    _ = try await registry.register(
        identifiers: issued.identifiers, holder: "bench", certificate: issued.cardAuthCertificate,
        keys: issued.publicKeys, owner: 0, actor: "bench", replace: false)
    let trust = BadgeTrust(anchors: [try authority.parsedCertificate()])
    var logger = Logger(label: "badge-bench")
    logger.logLevel = .warning

    // Short-APDU minimum: each answer over 256 bytes needs ⌈n / 256⌉ − 1 GET RESPONSEs.
    let state = await card.state
    let answers = [PIV.Object.certificate(slot: PIV.Slot.cardAuthentication)!, PIV.Object.chuid].map { tag in
        TLV.encode(tag: 0x53, value: Hex.decode(state.objects[String(tag, radix: 16)] ?? "") ?? []).count
    }
    let shortMinimum = 4 + answers.reduce(0) { $0 + ($1 + 255) / 256 - 1 }

    func measure(_ label: String, _ source: any ReaderSource, minimum: Int) async throws {
        let door = AccessDoor(
            documents: DocumentService(sources: [source], trustStore: nil), trust: trust, registry: registry,
            logger: logger)
        var times: [Double] = []
        var apdus = 0
        for _ in 0..<runs {
            let decision = try await door.check(reader: nil, mode: .cak, pin: nil, door: nil)
            guard decision.decision == .granted else { fatalError("badge denied: \(decision.reasons)") }
            times.append(decision.elapsedMs)
            apdus = decision.apdus
        }
        let pad = { (s: String, n: Int) in s + String(repeating: " ", count: max(0, n - s.count)) }
        print(
            pad("badge PKI-CAK, " + label, 44) + pad("APDUs \(apdus) (min \(minimum))", 22)
                + String(printf: "median %.1f ms (min %.1f, %d runs)", median(times), times.min()!, runs))
    }

    print("certificate answer \(answers[0]) bytes, CHUID answer \(answers[1]) bytes")
    try await measure("in process", InMemorySource { card }, minimum: 4)

    // The previous card (the mDL's) may still show in pcscd until its next poll: a read would fail.
    try await waitForCard(context, reader: pcscd.readerName, present: false)
    let link = VirtualCardLink(card: card, port: Int(pcscd.port))
    try await link.start()
    try await waitForCard(context, reader: pcscd.readerName)
    try await measure("pcscd + vpcd", PCSCReaderSource(context: context), minimum: 4)
    await link.remove()
    try await waitForCard(context, reader: pcscd.readerName, present: false)

    let pn532 = try PN532Emulator(card: card)
    pn532.start()
    defer { pn532.stop() }
    try await measure(
        "libnfc + software PN532", try LibNFCReaderSource(connstrings: [pn532.connstring]), minimum: shortMinimum)
}
