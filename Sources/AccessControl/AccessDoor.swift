import CredentialStore
import Documents
import FoundationEssentials
import KeyStores
import Logging
import PIV
import Passkeys
import TesseraCore
import TesseraRuntime
import X509Support

/// The door: checks the badge on a reader (PC/SC or libnfc, through the document service's readers), decides with
/// the badge's lifecycle and the rule of the door the reader belongs to, and runs that door's `grantCommand` on each
/// grant without waiting for it.
public final class AccessDoor: Sendable {
    public let documents: DocumentService
    private let trustInForce: Locked<BadgeTrust>
    public let registry: BadgeRegistry
    private let doorsInForce: Locked<DoorTable>
    /// argv run on each grant (a relay, an external controller) at a door without a `grantCommand` of its own; with
    /// no doors configured, on every grant.
    public let grantCommand: [String]?
    public let grantTimeout: Duration
    /// At a door of a building (`accessControl.registry`): the office's list it follows, whose badges (and, through
    /// `replaceDoors`, doors) replace the local registry and the configured doors in decisions.
    public let follower: RegistryFollower?
    let logger: Logger

    public init(
        documents: DocumentService, trust: BadgeTrust, registry: BadgeRegistry, doors: DoorTable = DoorTable(),
        grantCommand: [String]? = nil, grantTimeout: Duration = .seconds(10), follower: RegistryFollower? = nil,
        logger: Logger
    ) {
        self.documents = documents; trustInForce = Locked(trust); self.registry = registry
        doorsInForce = Locked(doors)
        self.grantCommand = grantCommand; self.grantTimeout = grantTimeout; self.follower = follower
        self.logger = logger
    }

    /// The doors and their readers; a reader of no door gives decisions but opens nothing.
    public var doors: DoorTable { doorsInForce.current }

    /// Puts `table` in force for the checks that start from now on (e.g. a door list published by a badge office).
    public func replaceDoors(_ table: DoorTable) { doorsInForce.withLock { $0 = table } }

    /// The badge CA anchors and CRLs in force.
    public var trust: BadgeTrust { trustInForce.current }

    /// Reads the anchor and CRL files again and swaps the new set in as a whole; on any error (INVALID_INPUT naming
    /// the file) the set in force stays.
    @discardableResult
    public func reloadTrust() async throws(TesseraError) -> BadgeTrust {
        let current = trust
        let loaded = try await DedicatedThread.run(name: "tessera.badge-trust") {
            () throws(TesseraError) -> BadgeTrust in try current.reloaded()
        }
        guard !loaded.anchors.isEmpty else {
            throw TesseraError.invalidInput("accessControl.anchors: at least one badge CA certificate is needed")
        }
        trustInForce.withLock { $0 = loaded }
        logger.notice(
            "badge trust reloaded", metadata: ["anchors": "\(loaded.anchors.count)", "crls": "\(loaded.crls.count)"])
        return loaded
    }

    /// `trust.status`'s `badges`: the anchors' count and every CRL with its file, updates and staleness.
    public func trustStatus(now: Date = Date()) -> JSONValue {
        let trust = trust
        let crls: [JSONValue] = zip(trust.crls, trust.crlSources).map { crl, source in
            guard case .object(var o) = source.json else { return source.json }
            o["stale"] = .bool(crl.isStale(at: now))
            return .object(o)
        }
        return [
            "anchors": .number(Double(trust.anchors.count)), "crls": .array(crls),
            "loadedAt": .string(trust.loadedAt.iso8601Seconds),
        ]
    }

    /// Where a check happens: the reader, resolved before the card is touched, and the door it belongs to.
    public struct Target: Sendable, Equatable {
        public var reader: String
        public var door: DoorRule?
    }

    /// Resolves the reader of a check (nil: the first reader holding a card; with `door`, among that door's readers)
    /// and its door. A request cannot pick a door for a reader: `door` naming another door than the reader's (or a
    /// door for a reader of none) is INVALID_INPUT, as is a door that does not exist. NO_READER / NO_CARD.
    public func target(reader: String?, door: String?) async throws(TesseraError) -> Target {
        let doors = doors  // one table for the whole resolution
        let named = try door.map { name throws(TesseraError) in try doors.door(named: name) }
        let name: String
        if let reader {
            name = reader
        } else {
            let list = try await documents.readers()
            guard !list.isEmpty else { throw TesseraError(.noReader, "no reader is connected") }
            let candidates = list.filter { info in info.cardPresent && (named?.readers.contains(info.name) ?? true) }
            guard let first = candidates.first else {
                throw TesseraError(
                    .noCard, named.map { "no reader of door '\($0.name)' holds a card" } ?? "no reader holds a card")
            }
            name = first.name
        }
        let own = doors.door(ofReader: name)
        if let named, named.name != own?.name {
            throw TesseraError(
                .invalidInput,
                own.map { "reader '\(name)' belongs to door '\($0.name)', not '\(named.name)'" }
                    ?? "reader '\(name)' belongs to no door, not '\(named.name)'",
                details: ["field": "door"])
        }
        return Target(reader: name, door: own)
    }

    /// The mode of a check at `target`: a door's reader is checked in its door's mode (a request naming another is
    /// INVALID_INPUT); a reader of no door in `requested` (default cak).
    public func mode(at target: Target, requested: AccessMode?) throws(TesseraError) -> AccessMode {
        guard let door = target.door else { return requested ?? .cak }
        if let requested, requested != door.mode {
            throw TesseraError(
                .invalidInput, "door '\(door.name)' checks in \(door.mode.rawValue) mode, not \(requested.rawValue)",
                details: ["field": "mode"])
        }
        return door.mode
    }

    /// The argv a grant at `target` runs: its door's `grantCommand`, else `grantCommand`; nothing at a reader of no
    /// door once doors are configured.
    func grantCommand(at target: Target) -> [String]? {
        if let door = target.door { return door.grantCommand ?? grantCommand }
        return doors.isEmpty ? grantCommand : nil
    }

    /// Checks the card in `reader` (nil: the first reader holding a card) under the rule of the door it belongs to.
    /// NO_READER / NO_CARD when there is no card to check; everything the card does wrong is a `denied` decision
    /// with its reasons. `runsGrantCommand` false: a check that opens no door (the read-back after issuance).
    public func check(
        reader: String?, mode: AccessMode?, pin: PINAttempt?, door: String?, runsGrantCommand: Bool = true
    ) async throws(TesseraError) -> AccessDecision {
        let target = try await target(reader: reader, door: door)
        return try await check(
            at: target, mode: try self.mode(at: target, requested: mode), pin: pin,
            runsGrantCommand: runsGrantCommand)
    }

    /// Checks the card at a resolved `target` in `mode` (see `target(reader:door:)`, `mode(at:requested:)`).
    public func check(at target: Target, mode: AccessMode, pin: PINAttempt?, runsGrantCommand: Bool = true)
        async throws(TesseraError) -> AccessDecision
    {
        let view = await follower?.view()
        let started = ContinuousClock.now
        let check = BadgeCheck(trust: view.map { trust.adding($0.crl, file: $0.crlFile) } ?? trust, mode: mode)
        let (reading, readerName, apdus, _) = try await documents.withCard(reader: target.reader, extendedLength: true)
        {
            transport throws(TesseraError) in await check.run(transport: transport, pin: pin)
        }
        if let view {
            let decision = Self.followed(
                reading, view: view, door: target.door, reader: readerName, slot: mode.slot, apdus: apdus,
                elapsed: ContinuousClock.now - started)
            log(decision, reading: reading)
            if decision.decision == .granted && runsGrantCommand, let argv = grantCommand(at: target) {
                runGrantCommand(argv, decision)
            }
            return decision
        }
        var record: CredentialRecord?
        if let id = reading.identifiers.idBytes { record = try await registry.badge(id) }
        let admitted = target.door.map { $0.admits(holder: record?.userName, badgeId: reading.badgeId) }
        var keyMismatch = false
        if let record, let der = reading.certificate, let leaf = try? ParsedCertificate(der: der) {
            keyMismatch = BadgeRegistry.keyMatches(record, slot: mode.slot, spki: leaf.subjectPublicKeyInfo) == false
        }
        var decision = AccessDecision(
            reading: reading, state: record?.state, keyMismatch: keyMismatch, admitted: admitted,
            door: target.door?.name, reader: readerName,
            apdus: apdus, elapsed: ContinuousClock.now - started)
        if let holder = record?.userName { decision.holder = holder }
        log(decision, reading: reading)
        if decision.decision == .granted && runsGrantCommand, let argv = grantCommand(at: target) {
            runGrantCommand(argv, decision)
        }
        return decision
    }

    func log(_ decision: AccessDecision, reading: BadgeReading) {
        var metadata: Logger.Metadata = [
            "reader": "\(decision.reader ?? "-")", "door": "\(decision.door ?? "-")",
            "badge": "\(decision.badgeId ?? "-")",
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
        let started = ContinuousClock.now
        let ((reading, keys), readerName, apdus, _) = try await documents.withCard(
            reader: reader, extendedLength: true
        ) { transport throws(TesseraError) in
            let reading = await check.run(transport: transport, pin: nil)
            guard reading.reasons.isEmpty else { return (reading, [UInt8: [UInt8]]()) }
            return (reading, try await BadgeRegistry.cardKeys(PIVApplication(transport: transport)))
        }
        guard reading.reasons.isEmpty, let certificate = reading.certificate else {
            throw TesseraError(
                .badgeNotValid, "the card on \(readerName) is not a valid badge",
                details: ["reasons": .array(reading.reasons.map { .string($0.rawValue) })])
        }
        let transitions = try await registry.register(
            identifiers: reading.identifiers, holder: holder, certificate: certificate, keys: keys, owner: owner,
            actor: actor, replace: replace)
        var decision = AccessDecision(
            reading: reading, state: .active, admitted: nil, reader: readerName, apdus: apdus,
            elapsed: ContinuousClock.now - started)
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
        let (issued, readerName, _, _) = try await documents.withCard(reader: reader, extendedLength: true) {
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
            identifiers: issued.identifiers, holder: holder, certificate: issued.cardAuthCertificate,
            keys: issued.publicKeys,
            owner: owner, actor: actor, replace: replace)
        logger.notice(
            "badge issued",
            metadata: ["badge": "\(issued.identifiers.badgeId ?? "-")", "holder": "\(holder)", "by": "\(actor)"])
        var decision = try await check(
            at: Target(reader: readerName, door: nil), mode: .cak, pin: nil, runsGrantCommand: false)
        decision.holder = holder
        return (decision, transitions)
    }

    /// Runs `argv` for a grant in a task of its own: a slow or failing command never holds the next tap.
    func runGrantCommand(_ argv: [String], _ decision: AccessDecision) {
        guard !argv.isEmpty else { return }
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
    /// cancelled or `limit` decisions were made. A card that stays on the reader is checked once. Each reader is
    /// checked under its own door's rule and mode (`cak` without a door).
    public func watch(
        readers: [String]?, limit: Int?, poll: Duration = .milliseconds(100),
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
                    let target = Target(reader: name, door: doors.door(ofReader: name))
                    decision = try await check(at: target, mode: target.door?.mode ?? .cak, pin: nil)
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
