import AccessControl
import CredentialStore
import Documents
import DoorList
import FoundationEssentials
import KeyStores
import Logging
import PIV
import Passkeys
import RPC
import TesseraCore
import X509

extension MethodTable {
    /// Builds the door from the `accessControl` section (nil without one). Paths are relative to `directory`.
    static func accessDoor(
        _ config: AccessControlConfig?, directory: String, documents: DocumentService, store: CredentialStore,
        logger: Logger
    ) throws(TesseraError) -> AccessDoor? {
        guard let config else { return nil }
        func path(_ p: String) -> String { p.hasPrefix("/") ? p : directory + "/" + p }
        let trust = try BadgeTrust.load(
            anchorFiles: (config.anchors ?? []).map(path), crlFiles: (config.crls ?? []).map(path))
        guard !trust.anchors.isEmpty else {
            throw TesseraError.invalidInput("accessControl.anchors: at least one badge CA certificate is needed")
        }
        var accessLogger = logger
        accessLogger[metadataKey: "service"] = "access"
        var follower: RegistryFollower?
        if let registry = config.registry {
            let publisher = try BadgeTrust.load(anchorFiles: [path(registry.publisher)], crlFiles: []).anchors
            guard let publisher = publisher.first else {
                throw TesseraError.invalidInput("accessControl.registry.publisher: no certificate in the file")
            }
            follower = RegistryFollower(publisher: publisher, maxAge: Double(registry.maxAgeSeconds))
        }
        return AccessDoor(
            documents: documents, trust: trust, registry: BadgeRegistry(store: store),
            // A door that follows an office takes its doors from the office's list (none before the first list).
            doors: follower == nil ? try config.doorTable() : DoorTable(), grantCommand: config.grantCommand,
            grantTimeout: .seconds(config.grantTimeoutSeconds ?? 10), follower: follower, logger: accessLogger)
    }

    /// The building's side of this daemon: the office's publishing (`accessControl.publisher`) or the door's
    /// following (`accessControl.registry`); nil for either when not configured.
    static func building(
        _ config: AccessControlConfig?, door: AccessDoor?, directory: String, stateDirectory: String,
        keyStore: any KeyStore, store: CredentialStore, logger: Logger
    ) -> (office: RegistryOffice?, door: RegistryDoor?) {
        guard let config else { return (nil, nil) }
        var registryLogger = logger
        registryLogger[metadataKey: "service"] = "registry"
        func path(_ p: String) -> String { p.hasPrefix("/") ? p : directory + "/" + p }
        if let registry = config.registry, let door, let follower = door.follower {
            return (
                nil,
                RegistryDoor(
                    door: door, follower: follower, directory: path(registry.directory), stateDirectory: stateDirectory,
                    poll: .seconds(registry.pollSeconds ?? 2), logger: registryLogger)
            )
        }
        guard let publisher = config.publisher else { return (nil, nil) }
        let validity = Double(publisher.validitySeconds ?? 86400)
        // The doors as the configuration's door table has them (validated at start-up).
        let doors = ((try? config.doorTable())?.doors ?? [:]).mapValues {
            DoorList.Door(
                readers: $0.readers, allow: $0.allow.sorted(), grantCommand: $0.grantCommand, mode: $0.mode.rawValue)
        }
        let issuer = config.issuer
        // The keys are on tokens that may log in after start: the publisher is made at the first publication.
        let office = RegistryOffice(
            directory: path(publisher.directory), stateDirectory: stateDirectory, logger: registryLogger
        ) { () async throws(TesseraError) -> BadgePublisher in
            let signer = try await badgeAuthority(
                .init(tokenId: publisher.tokenId, keyLabel: publisher.keyLabel, certificate: publisher.certificate),
                directory: directory, keyStore: keyStore)
            var ca = signer
            if let issuer { ca = try await badgeAuthority(issuer, directory: directory, keyStore: keyStore) }
            return BadgePublisher(
                registry: BadgeRegistry(store: store), signer: signer, certificateAuthority: ca,
                doors: doors, validity: validity)
        }
        return (office, nil)
    }

    /// Registers `access.check` and `access.watch` (docs/API.md, "Access control"). Without an `accessControl`
    /// section they answer ACCESS_NOT_CONFIGURED.
    func registerAccess(
        _ door: AccessDoor?, config: AccessControlConfig?, directory: String, keyStore: any KeyStore,
        managementKey: PIVManagementKey?, pinRules: PINRules, office: RegistryOffice? = nil
    ) {
        let configured = config?.readers
        @Sendable func configured_() throws(TesseraError) -> AccessDoor {
            guard let door else {
                throw TesseraError(.accessNotConfigured, "the daemon has no accessControl section")
            }
            return door
        }
        let policy = policy
        // `door` on a door's reader (the door controller's permission); `enroll` is the method's own.
        @Sendable func authorize(_ doors: [DoorRule?], _ connection: RPCConnection) throws(TesseraError) {
            if doors.contains(where: { $0 != nil }) { try policy.check(.door, peer: connection.peer) }
        }
        register("access.check", .enroll) { p, connection in
            let door = try configured_()
            let requested = try Self.accessMode(p)
            let target = try await door.target(
                reader: try p.optionalString("reader"), door: try p.optionalString("door"))
            try authorize([target.door], connection)
            let mode = try door.mode(at: target, requested: requested)
            if mode == .auth, let pin = try p.optionalString("pin") {
                return try await pinRules.withCallerPIN(
                    pin, caller: connection.pinCaller, allowFinalTry: false, tokenId: "badge"
                ) { attempt throws(TesseraError) in
                    try await door.check(at: target, mode: mode, pin: attempt).json
                }
            }
            return try await door.check(at: target, mode: mode, pin: nil).json
        }
        @Sendable func local(_ door: AccessDoor) throws(TesseraError) {
            if door.follower != nil {
                throw TesseraError(
                    .registryReadOnly, "this door follows the badge office's list: badges change at the office")
            }
        }
        register("access.register", .admin) { p, connection in
            let door = try configured_()
            try local(door)
            let (decision, transitions) = try await door.register(
                reader: try p.optionalString("reader"), holder: try p.string("holder"),
                replace: try p.optionalBool("replace") ?? false, owner: connection.peer.uid,
                actor: "uid:\(connection.peer.uid)")
            return Self.json(decision, replacing: transitions)
        }
        register("access.issue", .admin) { p, connection in
            let door = try configured_()
            try local(door)
            guard let issuer = config?.issuer else {
                throw TesseraError(.accessNotConfigured, "access.issue needs accessControl.issuer")
            }
            guard let managementKey else {
                throw TesseraError(
                    .invalidInput, "access.issue needs the PIV management key (--piv-management-key-file)")
            }
            let authority = try await Self.badgeAuthority(issuer, directory: directory, keyStore: keyStore)
            let days = try p.optionalInt("validityDays") ?? 365
            guard (1...3650).contains(days) else { throw TesseraError.invalidInput("validityDays must be 1…3650") }
            let (decision, transitions) = try await door.issue(
                reader: try p.optionalString("reader"), holder: try p.string("holder"), authority: authority,
                managementKey: managementKey, authKey: try p.optionalBool("authKey") ?? false,
                validity: .seconds(days * 86400), replace: try p.optionalBool("replace") ?? false,
                owner: connection.peer.uid, actor: "uid:\(connection.peer.uid)")
            return Self.json(decision, replacing: transitions)
        }
        register("access.publish", .admin) { _, _ in
            _ = try configured_()
            guard let office else {
                throw TesseraError(.accessNotConfigured, "access.publish needs accessControl.publisher")
            }
            try await office.publish()
            return await office.status()
        }
        register("access.status", .read) { _, _ in
            let door = try configured_()
            if let office { return await office.status() }
            if let follower = door.follower { return await follower.status() }
            return ["role": "local"]
        }
        register("access.watch", .enroll) { p, connection in
            let door = try configured_()
            guard try Self.accessMode(p) ?? .cak == .cak else {
                throw TesseraError.invalidInput("access.watch checks without a PIN: mode must be cak")
            }
            let table = door.doors
            let readers = try Self.watchedReaders(p, doors: table, configured: configured)
            let doorsWatched = readers.map { $0.map { table.door(ofReader: $0) } } ?? [nil]
            if let auth = doorsWatched.compactMap({ $0 }).first(where: { $0.mode == .auth }) {
                throw TesseraError.invalidInput(
                    "door '\(auth.name)' checks with the cardholder's PIN: access.watch cannot (use access.check)")
            }
            try authorize(doorsWatched, connection)
            let limit = try p.optionalInt("count")
            if let limit, limit < 1 { throw TesseraError.invalidInput("count must be at least 1") }
            let made = Locked(0)
            try await door.watch(readers: readers, limit: limit) { decision in
                made.withLock { $0 += 1 }
                await connection.notify("access.decision", decision.json)
            }
            return ["decisions": .number(Double(made.withLock { $0 }))]
        }
    }

    /// The readers `access.watch` watches (nil: every reader): `readers`; else the named `door`'s; else
    /// `accessControl.readers`; else every door's readers in `cak` mode when doors are configured. A `door` that is
    /// not every named reader's door is INVALID_INPUT.
    static func watchedReaders(_ p: Params, doors: DoorTable, configured: [String]?) throws(TesseraError)
        -> [String]?
    {
        let doorName = try p.optionalString("door")
        let named = try doorName.map { name throws(TesseraError) in try doors.door(named: name) }
        guard let list = try p.optionalArray("readers") else {
            if let named { return named.readers }
            if let configured { return configured }
            if doors.isEmpty { return nil }
            let readers = doors.readers.filter { doors.door(ofReader: $0)?.mode == .cak }
            guard !readers.isEmpty else {
                throw TesseraError.invalidInput("every door checks with the PIN: access.watch has no reader to watch")
            }
            return readers
        }
        let readers = list.compactMap(\.stringValue)
        if let named, let other = readers.first(where: { doors.door(ofReader: $0)?.name != named.name }) {
            throw TesseraError(
                .invalidInput, "reader '\(other)' is not a reader of door '\(named.name)'", details: ["field": "door"])
        }
        return readers
    }

    /// The issuer's CA: its certificate file and its key on the configured token.
    static func badgeAuthority(_ issuer: AccessControlConfig.Issuer, directory: String, keyStore: any KeyStore)
        async throws(TesseraError) -> BadgeAuthority
    {
        let path = issuer.certificate.hasPrefix("/") ? issuer.certificate : directory + "/" + issuer.certificate
        let anchor = try BadgeTrust.load(anchorFiles: [path], crlFiles: []).anchors.first
        guard let anchor, let certificate = try? Certificate(derEncoded: anchor.der) else {
            throw TesseraError.invalidInput("accessControl.issuer.certificate: no certificate in \(path)")
        }
        guard let token = await keyStore.tokens().first(where: { $0.id == issuer.tokenId }) else {
            throw TesseraError(.tokenNotPresent, "the badge CA's token \(issuer.tokenId) is not present")
        }
        return try await BadgeAuthority.onToken(certificate: certificate, token: token, keyLabel: issuer.keyLabel)
    }

    /// A decision with `replaced`: the badge ids the registration marked replaced.
    static func json(_ decision: AccessDecision, replacing transitions: [CredentialStore.Transition]) -> JSONValue {
        guard case .object(var o) = decision.json else { return decision.json }
        o["replaced"] = .array(
            transitions.filter(\.changed).map { .string(Base64URL.encode($0.record.credentialId)) })
        return .object(o)
    }

    /// The `mode` the request names, if any.
    static func accessMode(_ p: Params) throws(TesseraError) -> AccessMode? {
        guard let text = try p.optionalString("mode") else { return nil }
        guard let mode = AccessMode(rawValue: text) else {
            throw TesseraError(.invalidInput, "mode must be cak or auth", details: ["field": "mode"])
        }
        return mode
    }
}

extension MethodTable {
    /// SIGHUP and the `crlRefreshSeconds` timer: the badges' anchors and CRLs read again; a bad set is logged and the
    /// one in force stays.
    static func reloadBadgeTrust(_ door: AccessDoor?, logger: Logger) async {
        guard let door else { return }
        do { try await door.reloadTrust() } catch {
            logger.error(
                "badge trust reload failed, the anchors and CRLs in force stay", metadata: ["error": "\(error)"])
        }
    }
}

extension AccessControlConfig {
    /// The doors of `doors` (INVALID_INPUT: a reader of two doors, a door without readers, an unknown mode, an empty
    /// grant command).
    func doorTable() throws(TesseraError) -> DoorTable {
        var rules: [DoorRule] = []
        for (name, door) in (doors ?? [:]).sorted(by: { $0.key < $1.key }) {
            var mode = AccessMode.cak
            if let text = door.mode {
                guard let m = AccessMode(rawValue: text) else {
                    throw TesseraError.invalidInput("accessControl.doors.\(name).mode must be \"cak\" or \"auth\"")
                }
                mode = m
            }
            guard let readers = door.readers else {
                throw TesseraError.invalidInput("accessControl.doors.\(name) needs readers: [READER...]")
            }
            guard let allow = door.allow else {
                throw TesseraError.invalidInput(
                    "accessControl.doors.\(name) needs allow: [HOLDER|BADGE-ID...] (\"*\": every registered badge)")
            }
            if door.grantCommand?.isEmpty == true {
                throw TesseraError.invalidInput("accessControl.doors.\(name).grantCommand must name a program")
            }
            rules.append(
                DoorRule(
                    name: name, readers: readers, allow: Set(allow), mode: mode,
                    grantCommand: door.grantCommand))
        }
        do { return try DoorTable(rules) } catch {
            throw TesseraError.invalidInput("accessControl.doors: \(error.message)")
        }
    }
}
