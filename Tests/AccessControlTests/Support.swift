import APDU
import AccessControl
import CredentialStore
import Emulation
import FoundationEssentials
import ICAO
import PCSC
import PIV
import Passkeys
import TesseraCore
import TesseraTestSupport
import Testing
import VPCD

/// A test badge PKI: the genuine badge CA and a stranger CA, both P-256 with swift-certificates.
struct BadgePKI: Sendable {
    let authority: BadgeAuthority
    let stranger: BadgeAuthority
    let now = Date()

    static func make() async throws -> BadgePKI {
        let now = Date()
        return BadgePKI(
            authority: try await .generate(
                name: "Tessera Badge CA", notBefore: now - 86400, notAfter: now + 10 * 365 * 86400),
            stranger: try await .generate(
                name: "Somebody Else's Badge CA", notBefore: now - 86400, notAfter: now + 10 * 365 * 86400))
    }

    func trust(crls: [[UInt8]] = []) throws -> BadgeTrust {
        BadgeTrust(
            anchors: [try authority.parsedCertificate()],
            crls: try crls.map { try CertificateRevocationList(der: $0) })
    }

    static func identifiers(serial: UInt32) -> BadgeIdentifiers {
        let s = [UInt8(serial >> 24), UInt8((serial >> 16) & 0xFF), UInt8((serial >> 8) & 0xFF), UInt8(serial & 0xFF)]
        return BadgeIdentifiers(
            fascn: BadgeWriter.testFASCN(credential: serial), uuid: Array("BADGE-UUID--".utf8) + s)
    }

    /// A factory-new emulated PIV card with a badge written by `authority` (in process, as a badge office does
    /// before the card reaches a door).
    func card(
        serial: UInt32, holder: String = "Alice Example", by authority: BadgeAuthority? = nil,
        notBefore: Date? = nil, notAfter: Date? = nil, slots: [UInt8] = [PIV.Slot.cardAuthentication]
    ) async throws -> (EmulatedPIVCard, BadgeWriter.Issued) {
        let card = EmulatedPIVCard(state: .factoryNew(serial: serial))
        let app = PIVApplication(transport: InProcessCardTransport(card: card))
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let issued = try await BadgeWriter(authority: authority ?? self.authority).write(
            app, holder: holder, identifiers: Self.identifiers(serial: serial), slots: slots,
            notBefore: notBefore ?? now - 3600, notAfter: notAfter ?? now + 365 * 86400)
        await card.reset()
        return (card, issued)
    }
}

/// A private pcscd with vpcd readers; cards go in reader 0 and are checked through PC/SC.
final class Door: Sendable {
    let pcscd: PCSCDaemonFixture
    let context = PCSCContext()

    init() async throws { pcscd = try await PCSCDaemonFixture.acquire() }

    func stop() { pcscd.stop() }

    var reader: String { pcscd.readers[0].name }

    /// Inserts `card`, waits until PC/SC sees it and connects.
    func present(_ card: EmulatedPIVCard) async throws -> (VirtualCardLink, PCSCCard) {
        let link = VirtualCardLink(card: card, port: Int(pcscd.readers[0].port))
        try await link.insert()
        let name = reader
        let ctx = context
        _ = await eventually { try? await ctx.listReaders().first { $0.name == name && $0.cardPresent } }
        return (link, try await context.connect(reader: reader))
    }

    /// Takes the card away and waits until PC/SC sees the reader empty.
    func remove(_ link: VirtualCardLink) async {
        await link.remove()
        let name = reader
        let ctx = context
        _ = await eventually { try? await ctx.listReaders().first { $0.name == name && !$0.cardPresent } }
    }

    /// Presents `card`, runs the check and takes the card away again.
    func check(
        _ card: EmulatedPIVCard, trust: BadgeTrust, mode: AccessMode = .cak, pin: String? = nil,
        registry: BadgeRegistry? = nil
    ) async throws -> AccessDecision {
        let (link, pcsc) = try await present(card)
        let reading = await BadgeCheck(trust: trust, mode: mode).run(
            transport: pcsc, pin: pin.map { .unattended($0) })
        await pcsc.disconnect()
        await remove(link)
        if let error = reading.error { print("check of \(reader): \(error)") }
        let state = try await reading.identifiers.idBytes.asyncMap { try await registry?.state(badgeId: $0) } ?? nil
        return AccessDecision(reading: reading, state: registry == nil ? .active : state, admitted: nil)
    }
}

extension Optional {
    func asyncMap<T>(_ body: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await body(self)
    }
}
