import CredentialStore
import Documents
import Foundation
import KeyStores
import Logging
import PIV
import Passkeys
import TesseraCore
import TesseraRuntime

/// The door: checks the badge on a reader (PC/SC or libnfc, through the document service's readers), decides with
/// the badge's lifecycle and the door rule, and runs `grantCommand` on each grant without waiting for it.
public final class AccessDoor: Sendable {
    public let documents: DocumentService
    public let trust: BadgeTrust
    public let registry: BadgeRegistry
    /// Door name → the holders and badge ids it admits; a door without an entry admits every valid badge.
    public let doors: [String: Set<String>]
    /// argv run on each grant with the decision JSON on stdin (a relay, an external controller).
    public let grantCommand: [String]?
    public let grantTimeout: Duration
    /// At a door of a building (`accessControl.registry`): the office's list it follows, which replaces the local
    /// registry and `doors` in decisions.
    public let follower: RegistryFollower?
    let logger: Logger

    public init(
        documents: DocumentService, trust: BadgeTrust, registry: BadgeRegistry, doors: [String: Set<String>] = [:],
        grantCommand: [String]? = nil, grantTimeout: Duration = .seconds(10), follower: RegistryFollower? = nil,
        logger: Logger
    ) {
        self.documents = documents; self.trust = trust; self.registry = registry; self.doors = doors
        self.grantCommand = grantCommand; self.grantTimeout = grantTimeout; self.follower = follower
        self.logger = logger
    }

    /// Checks the card in `reader` (nil: the first reader holding a card). NO_READER / NO_CARD when there is no
    /// card to check; everything the card does wrong is a `denied` decision with its reasons.
    /// `runsGrantCommand` false: a check that opens no door (the read-back after issuance).
    public func check(
        reader: String?, mode: AccessMode, pin: PINAttempt?, door: String?, runsGrantCommand: Bool = true
    ) async throws(TesseraError) -> AccessDecision {
        let view = await follower?.view()
        if let door, view == nil, !doors.isEmpty, doors[door] == nil {
            throw TesseraError(.invalidInput, "no door named '\(door)' in accessControl.doors")
        }
        let started = ContinuousClock.now
        let check = BadgeCheck(trust: view.map { trust.adding($0.crl) } ?? trust, mode: mode)
        let (reading, readerName, apdus, _) = try await documents.withCard(reader: reader, extendedLength: true) {
            transport throws(TesseraError) in await check.run(transport: transport, pin: pin)
        }
        if let view {
            let (decision, argv) = Self.followed(
                reading, view: view, door: door, reader: readerName, apdus: apdus,
                elapsed: ContinuousClock.now - started)
            log(decision, reading: reading)
            if decision.decision == .granted && runsGrantCommand { runGrantCommand(decision, argv: argv) }
            return decision
        }
        var record: CredentialRecord?
        if let id = reading.identifiers.idBytes { record = try await registry.badge(id) }
        var admitted: Bool?
        if let door, let allowed = doors[door] {
            admitted = [record?.userName, reading.badgeId].contains { $0.map(allowed.contains) ?? false }
        }
        var decision = AccessDecision(
            reading: reading, state: record?.state, admitted: admitted, door: door, reader: readerName, apdus: apdus,
            elapsed: ContinuousClock.now - started)
        if let holder = record?.userName { decision.holder = holder }
        log(decision, reading: reading)
        if decision.decision == .granted && runsGrantCommand { runGrantCommand(decision) }
        return decision
    }

    func log(_ decision: AccessDecision, reading: BadgeReading) {
        var metadata: Logger.Metadata = [
            "reader": "\(decision.reader ?? "-")", "badge": "\(decision.badgeId ?? "-")",
            "reasons": "\(decision.reasons.map(\.rawValue).joined(separator: ","))",
            "apdus": "\(decision.apdus)", "ms": "\(Int(decision.elapsedMs))",
            "error": "\(reading.error.map { "\($0)" } ?? "-")",
        ]
        if let number = decision.registry?.number { metadata["list"] = "\(number)" }
        logger.info("badge \(decision.decision.rawValue)", metadata: metadata)
    }

    /// Registers the badge on `reader` for `holder` (a card issued elsewhere, e.g. an agency's PIV card): the card
    /// must pass the check's cryptography, certificate and CHUID checks (BADGE_NOT_VALID with `details.reasons`
    /// otherwise); then the provisioning decision tree of `BadgeRegistry.register` applies.
    public func register(reader: String?, holder: String, replace: Bool, owner: UInt32, actor: String)
        async throws(TesseraError) -> (AccessDecision, [CredentialStore.Transition])
    {
        let check = BadgeCheck(trust: trust, mode: .cak)
        let (reading, readerName, apdus, _) = try await documents.withCard(reader: reader, extendedLength: true) {
            transport throws(TesseraError) in await check.run(transport: transport, pin: nil)
        }
        guard reading.reasons.isEmpty, let certificate = reading.certificate else {
            throw TesseraError(
                .badgeNotValid, "the card on \(readerName) is not a valid badge",
                details: ["reasons": .array(reading.reasons.map { .string($0.rawValue) })])
        }
        let transitions = try await registry.register(
            identifiers: reading.identifiers, holder: holder, certificate: certificate, owner: owner, actor: actor,
            replace: replace)
        var decision = AccessDecision(
            reading: reading, state: .active, admitted: nil, reader: readerName, apdus: apdus)
        decision.holder = holder
        logger.notice(
            "badge registered",
            metadata: ["badge": "\(decision.badgeId ?? "-")", "holder": "\(holder)", "by": "\(actor)"])
        return (decision, transitions)
    }

    /// Issues a badge for `holder` onto the PIV card on `reader` (docs/ACCESS.md, "Issuing"): the provisioning
    /// decision tree first, then, with `managementKey`, new on-card keys (9E, and 9A with `authKey`), their
    /// certificates and a CHUID from `authority`, a fresh card UUID and a FASC-N for `credentialNumber`; then the
    /// badge is registered. Returns the check of the new badge (the card is read back as a door reads it).
    public func issue(
        reader: String?, holder: String, authority: BadgeAuthority, managementKey: PIVManagementKey, authKey: Bool,
        validity: Duration, replace: Bool, owner: UInt32, actor: String
    ) async throws(TesseraError) -> (AccessDecision, [CredentialStore.Transition]) {
        try await registry.precheck(holder: holder, replace: replace)
        let uuid = SecureRandom.bytes(16)
        let credentialNumber = uuid.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } % 1_000_000
        let identifiers = BadgeIdentifiers(fascn: BadgeWriter.testFASCN(credential: credentialNumber), uuid: uuid)
        let now = Date()
        let seconds = Double(validity.components.seconds)
        let slots = authKey ? [PIV.Slot.cardAuthentication, PIV.Slot.authentication] : [PIV.Slot.cardAuthentication]
        let (issued, _, _, _) = try await documents.withCard(reader: reader, extendedLength: true) {
            transport throws(TesseraError) in
            let app = PIVApplication(transport: transport)
            try await app.select()
            // A card that already is a registered badge is not written over unless `replace` (its record then
            // becomes `replaced`).
            if let previous = try await registry.badgeOnCard(app) {
                guard replace else {
                    throw TesseraError(
                        .credentialExists, "this card already is a badge (\(previous.state.rawValue)); pass replace",
                        details: [
                            "decision": "alreadyProvisioned",
                            "credentialIds": .array([.string(Base64URL.encode(previous.credentialId))]),
                        ])
                }
                if previous.state != .replaced {
                    _ = try await registry.store.transition(
                        ids: [[UInt8](previous.credentialId)], to: .replaced, actor: actor, reason: "card re-issued")
                }
            }
            try await app.authenticate(managementKey: managementKey)
            return try await BadgeWriter(authority: authority).write(
                app, holder: holder, identifiers: identifiers, slots: slots, notBefore: now - 60,
                notAfter: now + seconds)
        }
        let transitions = try await registry.register(
            identifiers: issued.identifiers, holder: holder, certificate: issued.cardAuthCertificate, owner: owner,
            actor: actor, replace: replace)
        logger.notice(
            "badge issued",
            metadata: ["badge": "\(issued.identifiers.badgeId ?? "-")", "holder": "\(holder)", "by": "\(actor)"])
        var decision = try await check(reader: reader, mode: .cak, pin: nil, door: nil, runsGrantCommand: false)
        decision.holder = holder
        return (decision, transitions)
    }

    /// Runs `grantCommand` for a grant in a task of its own: a slow or failing command never holds the next tap.
    func runGrantCommand(_ decision: AccessDecision, argv: [String]? = nil) {
        guard let argv = argv ?? grantCommand, !argv.isEmpty else { return }
        let input = decision.json.serialized() + [0x0A]
        let (logger, timeout) = (self.logger, grantTimeout)
        Task.detached {
            do {
                switch try await ProgramRunner.run(argv, input: input, timeout: timeout) {
                case .exited(0): break
                case .exited(let status):
                    logger.warning("access: grantCommand exited with status \(status)")
                case .timedOut:
                    logger.warning("access: grantCommand timed out after \(timeout)")
                }
            } catch {
                logger.warning("access: grantCommand failed: \(error)")
            }
        }
    }

    /// Watches `readers` (nil: every reader) and calls `onDecision` once for each card presented, until the task is
    /// cancelled or `limit` decisions were made. A card that stays on the reader is checked once.
    public func watch(
        readers: [String]?, mode: AccessMode, door: String?, limit: Int?, poll: Duration = .milliseconds(100),
        onDecision: @Sendable (AccessDecision) async -> Void
    ) async throws(TesseraError) {
        var present: Set<String> = []
        var made = 0
        while !Task.isCancelled {
            let list = try await documents.readers().filter { reader in readers?.contains(reader.name) ?? true }
            let now = Set(list.filter(\.cardPresent).map(\.name))
            for name in now.subtracting(present).sorted() {
                let decision: AccessDecision
                do {
                    decision = try await check(reader: name, mode: mode, pin: nil, door: door)
                } catch {
                    if error.code == .noCard || error.code == .cardRemoved { continue }
                    throw error
                }
                await onDecision(decision)
                made += 1
                if let limit, made >= limit { return }
            }
            present = now
            try? await Task.sleep(for: poll)
        }
    }
}
