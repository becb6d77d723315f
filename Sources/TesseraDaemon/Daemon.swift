import AccessControl
import CTAPAuthenticator
import CredentialStore
import Documents
import Enrollment
import FaceMatching
import FoundationEssentials
import Logging
import MDocHolderDoor
import PIVKeyStore
import Passkeys
import Pinentry
import Presence
import RPC
import SSHAgent
import SSHAgentDoor
import ServiceLifecycle
import TesseraCore
import UnixSignals

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `tesserad`: opens the state dir and database, finds tokens, serves the socket until SIGTERM/SIGINT.
public enum Daemon {
    public static let version = "0.1.0"

    public static func run(_ options: DaemonOptions) async throws {
        var logger = Logger(label: "tesserad") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = Logger.Level(rawValue: options.logLevel) ?? .info
        let started = ContinuousClock.now
        try ProcessHardening.makeNonDumpable()

        let config =
            try options.configFile.map { path throws(TesseraError) in try ConfigFile.load(path) } ?? ConfigFile()
        let policy = try Policy(config.policy)
        // Checked even when systemd passes the socket: a misspelled group is an error, never a silent default.
        let socketGID = try config.socketGroup.map { group throws(TesseraError) in
            do { return try Policy.gid(group) } catch {
                throw TesseraError(.invalidInput, "config: socketGroup '\(group)' is not a known group")
            }
        }
        // A per-user daemon's sockets are its user's alone (docs/INSTALL.md), inside its 0700 directory as well.
        let defaultSocketMode: UInt32 = options.paths.mode == .user ? 0o600 : 0o660
        let socketMode = try ConfigFile.socketMode(config.socketMode, default: defaultSocketMode)
        let configDirectory = options.configFile.map { FilePaths.directory(of: $0) } ?? "."
        let enrollmentConfig = try EnrollmentConfiguration(
            json: config.enrollment,
            baseDirectory: configDirectory.isEmpty ? "." : configDirectory)
        let faceMatching = try FaceMatcherConfiguration(
            json: config.faceMatching, defaultCommand: FaceMatcherConfiguration.referenceMatcherCommand())
        let mrzReading = try MRZReaderConfiguration(
            json: config.mrzReader, defaultCommand: MRZReaderConfiguration.referenceReaderCommand())
        let inherited = Systemd.listenDescriptors()
        let sockets = SocketPaths(options, config, inherited: inherited)
        try sockets.prepareDirectories(options.paths)
        try FileManager.default.createDirectory(
            atPath: options.stateDir, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        let database = try TesseraDatabase(path: options.stateDir + "/tessera.sqlite")
        let store = CredentialStore(database: database)

        let keyStore = try await PKCS11KeyStore.open(
            modules: options.pkcs11Modules + (config.pkcs11Modules ?? []),
            embeddedSoftHSMDir: options.embeddedSoftHSM ? options.stateDir + "/softhsm" : nil,
            pinFiles: config.pinFiles ?? [:], sessionsPerToken: config.sessionsPerToken, logger: logger)
        // PIV cards over PC/SC: watched in the background; never delays start-up (pcscd may be absent).
        let pivManagementKey = try PIVSetup.managementKey(options, logger: logger)
        let pivStore = PIVKeyStore(
            slots: PIVSlotStore(database: database), managementKey: pivManagementKey, logger: logger)
        pivStore.start()
        let table = MethodTable(policy: policy)
        let passkeys = PasskeyService(
            keyStores: [keyStore, pivStore], store: store, logger: logger,
            counterBlock: Int64(config.counterBlock ?? 1024),
            pinBackoff: try config.pinBackoff?.policy() ?? .standard)
        let gate = config.connectionGate()
        let server = RPCServer(
            dispatcher: table, logger: logger,
            maxRequestsInFlight: config.maxRequestsInFlight ?? 64,
            maxQueuedNotifications: config.maxQueuedNotifications ?? 1024, gate: gate,
            largeFrames: LargeFrames(methods: ["face.compare", "enrollment.submit"]))

        // `piv: {status, readers}` in tokens.list: PCSC_UNAVAILABLE shows there.
        let daemonSecret = try DaemonSecret.loadOrCreate(directory: options.stateDir)
        let documentReads = VerifiedDocumentReads(secret: daemonSecret)
        table.registerPasskeys(passkeys, storeStatus: ["piv": { pivStore.status() }], documentReads: documentReads)
        table.registerDocuments()
        table.registerPIV(pivStore, passkeys: passkeys, pinRules: passkeys.pinRules)
        var documentLogger = logger
        documentLogger[metadataKey: "service"] = "documents"
        var readerSources: [any ReaderSource] = [PCSCReaderSource()]
        if !options.nfcDevices.isEmpty { readerSources.append(try LibNFCReaderSource(connstrings: options.nfcDevices)) }
        let trustSources = TrustSources(
            cscaPaths: options.cscaPaths, masterListTrustPaths: options.masterListTrustPaths,
            crlPaths: options.crlPaths)
        let documents = DocumentService(
            sources: readerSources,
            trustStore: try DocumentService.trustStore(
                paths: options.cscaPaths,
                masterListTrust: options.masterListTrustPaths,
                crls: options.crlPaths),
            trustSources: trustSources, logger: documentLogger)
        table.registerDocumentReading(documents, verifiedReads: documentReads)
        let accessDirectory = configDirectory.isEmpty ? "." : configDirectory
        let accessDoor = try MethodTable.accessDoor(
            config.accessControl, directory: accessDirectory, documents: documents, store: store, logger: logger)
        table.registerTrust(documents, badges: accessDoor)
        let building = MethodTable.building(
            config.accessControl, door: accessDoor, directory: accessDirectory, stateDirectory: options.stateDir,
            keyStore: keyStore, store: store, logger: logger)
        table.registerAccess(
            accessDoor, config: config.accessControl, directory: accessDirectory, keyStore: keyStore,
            managementKey: pivManagementKey, pinRules: passkeys.pinRules, office: building.office)
        // The office publishes and the door follows in the background (docs/ACCESS.md, "A building").
        let buildingTasks = [
            building.office.map { office in Task { await office.run() } },
            building.door.map { door in Task { await door.run() } },
        ].compactMap { $0 }
        let iacas = try MethodTable.loadCertificates(options.iacaPaths, option: "--iaca")
        let readerAuth = try MethodTable.loadReaderAuth(
            key: options.mdocReaderKeyPath, chain: options.mdocReaderCertificatePath)
        table.registerMDoc(documents, iacas: iacas, readerAuth: readerAuth)
        // SIGHUP reloads the trust anchors, the badges' too; a bad set is logged and the old one stays.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let trustReloader = Task { [logger] in
            for await _ in hangups {
                await MethodTable.reloadBadgeTrust(accessDoor, logger: logger)
                do {
                    try await documents.reloadTrust()
                    logger.notice(
                        "trust anchors reloaded",
                        metadata: ["anchors": "\(documents.trustStore?.certificates.count ?? 0)"])
                } catch {
                    logger.error(
                        "trust anchor reload failed, the previous anchors stay", metadata: ["error": "\(error)"])
                }
            }
        }
        // accessControl.crlRefreshSeconds: the badge CRLs (and anchors) are read again from their files.
        let badgeTrustRefresher = config.accessControl?.crlRefreshSeconds.map { seconds in
            Task { [logger] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(seconds))
                    await MethodTable.reloadBadgeTrust(accessDoor, logger: logger)
                }
            }
        }
        table.registerLab()
        var enrollmentLogger = logger
        enrollmentLogger[metadataKey: "service"] = "enrollment"
        var faceLogger = logger
        faceLogger[metadataKey: "service"] = "face"
        let faceMatcher = faceMatching.map { FaceMatcher(configuration: $0, logger: faceLogger) }
        if let faceMatcher {
            logger.info(
                "face matcher", metadata: ["command": "\(faceMatcher.configuration.command.joined(separator: " "))"])
        }
        table.registerFace(faceMatcher)
        var mrzLogger = logger
        mrzLogger[metadataKey: "service"] = "mrz"
        table.registerMRZ(mrzReading.map { MRZReader(configuration: $0, logger: mrzLogger) })
        let subscribers = EnrollmentSubscribers(policy: policy)
        let enrollment = EnrollmentEngine(
            configuration: enrollmentConfig, store: EnrollmentStore(database: database),
            passkeys: passkeys, documents: documents,
            mdocReader: MethodTable.mdocReading(documents, iacas: iacas, readerAuth: readerAuth),
            faceMatcher: faceMatcher, faceTemplates: FaceTemplateStore(database: database),
            secret: daemonSecret,
            logger: enrollmentLogger
        ) { event in
            await subscribers.send(event)
        }
        try await enrollment.open()
        table.registerEnrollment(enrollment, subscribers: subscribers)
        table.registerCredentialLifecycle(
            passkeys,
            commands: LifecycleCommandVerifier(
                issuers: enrollmentConfig.issuers, stationId: enrollmentConfig.stationId),
            badgesFollowed: accessDoor?.follower)
        let stepUp = StepUpService(
            store: StepUpStore(database: database), passkeys: passkeys, documents: documents, secret: daemonSecret,
            logger: enrollmentLogger
        ) { event in await subscribers.send(event) }
        table.registerStepUp(stepUp, subscribers: subscribers, documentReads: documentReads)
        table.registerRecovery(
            RecoveryService(
                store: RecoveryStore(database: database), passkeys: passkeys,
                documents: documents, configuration: enrollmentConfig,
                secret: daemonSecret, logger: enrollmentLogger))
        let sweeper = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(15))
                await enrollment.sweep()
            }
        }
        // lastUsedAt is at most 30 s behind while running; a graceful stop writes the rest.
        let usageFlusher = Task {
            // A cancelled sleep ends the loop without a flush: a flush in a cancelled task would fail (the database
            // refuses cancelled work) and race the final one below.
            while (try? await Task.sleep(for: .seconds(30))) != nil {
                await passkeys.flushUsage()
            }
        }
        // The SSH agent's socket path: the one bound here, else as configured (systemd's socket unit names it when the
        // socket is inherited).
        let sshAgentPath = sockets.sshAgent ?? options.sshAgentSocket ?? config.sshAgent?.socket
        table.register("daemon.status", .read) { _, _ in
            let tokens = await Views.tokens(passkeys)
            let uptime = ContinuousClock.now - started
            return [
                "version": .string(version),
                "sshAgentSocket": sshAgentPath.map(JSONValue.string) ?? .null,
                "uptimeSeconds": .number(Double(uptime.components.seconds)),
                "pid": .number(Double(getpid())),
                "tokens": .array(tokens),
                "readers": .array(((try? await documents.readers()) ?? []).map(Views.reader)),
                "connections": Views.connections(server.statistics()),
            ]
        }
        // One presence broker for every door (CTAP user presence, SSH confirm keys, mdoc release).
        var presenceLogger = logger
        presenceLogger[metadataKey: "service"] = "presence"
        let presenceSubscribers = PresenceSubscribers()
        let presence = PresenceBroker(
            PresenceSettings(config.presence, pinentry: config.pinentry), logger: presenceLogger
        ) { event in
            await presenceSubscribers.send(event)
        }
        table.registerPresence(presence, subscribers: presenceSubscribers)
        var sshLogger = logger
        sshLogger[metadataKey: "service"] = "ssh-agent"
        let sshBackend = SSHKeyBackend(
            passkeys: passkeys, logger: sshLogger, presence: presence, owners: SSHKeyOwnerStore(database: database),
            pinentry: config.pinentry?.sshAgent == false ? nil : Pinentry(config.pinentry),
            purposes: KeyPurposeStore(database: database), configuredKeys: config.configuredKeys)
        table.registerSSH(passkeys, backend: sshBackend)
        table.registerMDocHolder(
            MDocHolderService(
                passkeys: passkeys, store: MDocRegistrationStore(database: database),
                readerRoots: try MethodTable.loadCertificates(options.mdocReaderRootPaths, option: "--mdoc-reader-root")
            ),
            subscribers: subscribers, presence: presence,
            devices: MDocPresentDevices(
                configured: config.mdoc?.presentDevices ?? [], nfcDevices: options.nfcDevices))
        var ctapLogger = logger
        ctapLogger[metadataKey: "service"] = "ctap"
        table.registerCTAP(passkeys, defaultTokenId: config.ctap?.tokenId)
        table.registerIntrospection()

        let tokenEvents = Task {
            for await _ in pivStore.changes {
                sshBackend.invalidate()
                await server.broadcast("tokens.changed", ["backend": "piv"])
            }
        }
        let address: RPCListenAddress
        if let fd = inherited.rpc {
            address = .inheritedDescriptor(fd)
        } else {
            address = .path(sockets.rpc ?? options.paths.socket, mode: socketMode, group: socketGID)
        }
        let service = SocketService(server: server, address: address, logger: logger, started: started)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        var agentSweeper: Task<Void, Never>?
        if let agentAddress = try Self.sshAgentAddress(
            sockets.sshAgent, config, inherited: inherited.sshAgent, defaultMode: defaultSocketMode)
        {
            let agent = SSHAgent(
                backend: sshBackend, pinCacheSeconds: config.sshAgent?.pinCacheSeconds ?? 900,
                allowForwarded: config.sshAgent?.allowForwarded ?? true)
            let agentServer = LengthPrefixedServer(
                handler: SSHAgentFrames(
                    agent: agent,
                    access: SSHAgentAccess(
                        maySign: { peer in policy.grants(.sign, to: peer) },
                        isAdmin: { peer in policy.grants(.admin, to: peer) })), logger: sshLogger,
                maxFrameBytes: AgentFraming.maxFrameBytes, gate: gate)
            services.append(
                .init(
                    service: SSHAgentSocketService(server: agentServer, address: agentAddress, logger: sshLogger),
                    serviceName: "ssh-agent-socket"))
            agentSweeper = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    await agent.expire()
                }
            }
        }
        let ctapPath = sockets.ctap
        if ctapPath != nil || options.ctapUHID {
            let ctapAccess = CTAPAccess(
                connect: { peer throws(TesseraError) in try policy.check(.sign, peer: peer) },
                enroll: { peer throws(TesseraError) in try policy.check(.enroll, peer: peer) })
            let hub = CTAPHIDHub.passkeyAuthenticator(
                passkeys: passkeys, presence: presence, access: ctapAccess, tokenId: config.ctap?.tokenId,
                clientPIN: config.ctap?.clientPin ?? false, logger: ctapLogger)
            if let ctapPath {
                services.append(
                    .init(
                        service: CTAPSocketService(
                            path: ctapPath,
                            mode: try ConfigFile.socketMode(config.ctap?.socketMode, default: defaultSocketMode),
                            group: socketGID,
                            hub: hub, access: ctapAccess, gate: gate, logger: ctapLogger), serviceName: "ctap-socket"))
            }
            if options.ctapUHID {
                services.append(.init(service: CTAPUHIDService(hub: hub, logger: ctapLogger), serviceName: "ctap-uhid"))
            }
        }
        // Every service is named: without a name, ServiceLifecycle interpolates the service ("\(service)"), a
        // reflection walk over its whole value (15 million instructions at start for this one alone).
        services.append(.init(service: service, serviceName: "rpc-socket"))
        let group = ServiceGroup(
            configuration: .init(
                services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        // The sockets bound here go with the daemon (a socket systemd passed is systemd's).
        defer {
            for path in [inherited.rpc == nil ? sockets.rpc ?? options.paths.socket : nil, sockets.sshAgent] {
                if let path { SocketFiles.removeIfStale(path) }
            }
        }
        try await group.run()
        tokenEvents.cancel()
        trustReloader.cancel()
        badgeTrustRefresher?.cancel()
        sweeper.cancel()
        usageFlusher.cancel()
        for task in buildingTasks { task.cancel() }
        await usageFlusher.value
        await passkeys.flushUsage()
        agentSweeper?.cancel()
        await pivStore.close()
        await keyStore.close()
        logger.info("stopped")
    }
}

extension Daemon {
    /// Where the SSH agent listens: the socket systemd passed, else `--ssh-agent-socket`, else `sshAgent.socket`.
    static func sshAgentAddress(
        _ path: String?, _ config: ConfigFile, inherited: Int32?, defaultMode: UInt32 = 0o660
    ) throws(TesseraError) -> RPCListenAddress? {
        if let inherited { return .inheritedDescriptor(inherited) }
        guard let path else { return nil }
        var gid: UInt32?
        if let g = config.socketGroup { gid = try Policy.gid(g) }
        let mode = config.sshAgent?.socketMode.flatMap { UInt32($0, radix: 8) } ?? defaultMode
        return .path(path, mode: mode, group: gid)
    }
}

/// The socket server as a lifecycle service: READY=1 once listening, graceful drain on SIGTERM.
struct SocketService: Service {
    let server: RPCServer
    let address: RPCListenAddress
    let logger: Logger
    let started: ContinuousClock.Instant

    func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.run(on: address) {
                let elapsed = ContinuousClock.now - started
                logger.info("ready", metadata: ["address": "\(address)", "startup": "\(elapsed)"])
                Systemd.notify("READY=1\nSTATUS=serving")
            }
        } onGracefulShutdown: {
            Systemd.notify("STOPPING=1")
            logger.info("draining connections")
            server.shutdown()
        }
    }
}

extension Views {
    static func connections(_ s: RPCConnectionStatistics) -> JSONValue {
        [
            "open": .number(Double(s.open)), "accepted": .number(Double(s.accepted)),
            "closedSlow": .number(Double(s.closedSlow)), "busy": .number(Double(s.busy)),
            "refused": .number(Double(s.refused)),
        ]
    }
}
