import AccessControl
internal import CSystemShims
import CryptoPrimitives
import DoorList
import FoundationEssentials
import Logging
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The badge office's publishing (docs/ACCESS.md, "A building"): after every change to the badges (noticed through
/// the credential store's audit marker, polled every second) and at least every half validity, builds a publication
/// and writes it into the directory, each file atomically: `doorlist-N.p7s` (the signed list), `badges.crl` (the
/// badge CA's CRL) and, last, `latest` (the list's file name). The number only grows: it is kept in the state
/// directory and never falls below the directory's `latest`.
actor RegistryOffice {
    typealias Factory = @Sendable () async throws(TesseraError) -> BadgePublisher
    let factory: Factory
    private var made: BadgePublisher?
    let directory: String
    let stateDirectory: String
    let logger: Logger
    private var number: UInt64 = 0
    private var last: BadgePublisher.Publication?
    private var lastAt: Date?
    private var marker: Int64?
    private var lastError: String?
    private var loggedError: String?
    private var lastBytes = 0
    private var certificates: BadgePublisher.CertificateFacts.Cache = [:]
    /// Publications kept in the directory besides the newest.
    static let kept: UInt64 = 2

    init(directory: String, stateDirectory: String, logger: Logger, factory: @escaping Factory) {
        self.factory = factory; self.directory = directory; self.stateDirectory = stateDirectory
        self.logger = logger
    }

    /// The publisher, made on first use (its keys' tokens may log in after start).
    func publisher() async throws(TesseraError) -> BadgePublisher {
        if let made { return made }
        let publisher = try await factory()
        made = publisher
        return publisher
    }

    /// One publication at a time (the actor is reentrant across the token's signing): the others wait in order.
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// Publishes now (`access.publish`, a change, the half-validity timer).
    @discardableResult
    func publish() async throws(TesseraError) -> BadgePublisher.Publication {
        while busy { await withCheckedContinuation { waiting.append($0) } }
        busy = true
        defer {
            busy = false
            if !waiting.isEmpty { waiting.removeFirst().resume() }
        }
        return try await publishNow()
    }

    private func publishNow() async throws(TesseraError) -> BadgePublisher.Publication {
        let publisher: BadgePublisher
        do { publisher = try await self.publisher() } catch {
            lastError = error.message
            throw error
        }
        let marker = try await publisher.registry.store.auditMarker()
        let (dir, state, number) = (directory, stateDirectory, number)
        let next = await DedicatedThread.run { max(number, Self.savedNumber(state), Self.latestNumber(dir)) + 1 }
        let started = ContinuousClock.now
        let publication: BadgePublisher.Publication
        do {
            var cache = certificates
            publication = try await publisher.publish(number: next, cache: &cache)
            certificates = cache
        } catch {
            lastError = error.message
            throw error
        }
        let name = "doorlist-\(next).p7s"
        let (list, crl) = (publication.signedList, publication.crl)
        try await DedicatedThread.run { () throws(TesseraError) in
            // The number is saved before the files go out: a crash in between skips a number, never reuses one.
            try Self.write(Array("\(next)\n".utf8), directory: state, name: "registry-published-number")
            try Self.write(list, directory: dir, name: name, mode: 0o644)
            try Self.write(crl, directory: dir, name: "badges.crl", mode: 0o644)
            try Self.write(Array((name + "\n").utf8), directory: dir, name: "latest", mode: 0o644)
            if next > Self.kept { unlink(dir + "/doorlist-\(next - Self.kept - 1).p7s") }
        }
        self.number = next
        // What status shows; the signed bytes are in the directory.
        last = publication
        last?.signedList = []
        last?.crl = []
        lastBytes = list.count
        lastAt = publication.issuedAt
        self.marker = marker
        lastError = nil
        let elapsed = ContinuousClock.now - started
        logger.notice(
            "door list published",
            metadata: [
                "number": "\(next)", "badges": "\(publication.badges)", "revoked": "\(publication.revoked)",
                "bytes": "\(list.count)",
                "ms": "\(RegistryDoor.milliseconds(elapsed))",
            ])
        return publication
    }

    /// Publishes when the badges changed since the last publication or half its validity has passed.
    func publishIfDue(now: Date = Date()) async {
        do {
            let publisher = try await self.publisher()
            let current = try await publisher.registry.store.auditMarker()
            let due = lastAt.map { now.timeIntervalSince($0) >= publisher.validity / 2 } ?? true
            guard due || current != marker else { return }
            try await publish()
        } catch {
            // Logged when it starts failing or fails otherwise, not every second while a token is away.
            if error.message != loggedError {
                logger.error("door list publication failed", metadata: ["error": "\(error)"])
            }
            loggedError = error.message
            return
        }
        loggedError = nil
    }

    /// The loop the daemon runs: a publication at start, then `publishIfDue` every second.
    func run() async {
        while !Task.isCancelled {
            await publishIfDue()
            try? await Task.sleep(for: .seconds(1))
        }
    }

    func status() -> JSONValue {
        var o: [String: JSONValue] = ["role": "office", "directory": .string(directory), "number": .null]
        if let last {
            o["number"] = .number(Double(last.number))
            o["publishedAt"] = .string(last.issuedAt.iso8601Seconds)
            o["expiresAt"] = .string(last.expiresAt.iso8601Seconds)
            o["badges"] = .number(Double(last.badges))
            o["revoked"] = .number(Double(last.revoked))
            o["bytes"] = .number(Double(lastBytes))
            o["validitySeconds"] = .number(last.expiresAt.timeIntervalSince(last.issuedAt))
            o["file"] = .string("doorlist-\(last.number).p7s")
        }
        if let lastError { o["lastError"] = .string(lastError) }
        return .object(o)
    }

    static func savedNumber(_ stateDirectory: String) -> UInt64 {
        readNumber(stateDirectory + "/registry-published-number")
    }

    static func latestNumber(_ directory: String) -> UInt64 {
        guard let data = FileManager.default.contents(atPath: directory + "/latest") else { return 0 }
        let name = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        guard name.hasPrefix("doorlist-"), name.hasSuffix(".p7s") else { return 0 }
        return UInt64(name.dropFirst("doorlist-".count).dropLast(".p7s".count)) ?? 0
    }

    static func readNumber(_ path: String) -> UInt64 {
        guard let data = FileManager.default.contents(atPath: path) else { return 0 }
        return UInt64(String(decoding: data, as: UTF8.self).trimmingWhitespace()) ?? 0
    }

    static func write(_ bytes: [UInt8], directory: String, name: String, mode: mode_t = 0o600) throws(TesseraError) {
        if case .failure(let error) = AtomicFile.write(bytes, directory: directory, name: name, mode: mode) {
            throw TesseraError(.storageError, "cannot write \(directory)/\(name): \(error.reason)")
        }
    }
}

/// A door's following (docs/ACCESS.md, "A building"): at start the last good list and CRL saved in the state
/// directory, then every `poll` the directory the sync unit fills: `latest` names the list file; a list or CRL not
/// seen before is offered to the `RegistryFollower`; an applied one is saved (atomically) as the last good copy, a
/// refused one logged once and the door keeps what it has. Reading, verifying, indexing and saving a list all run on
/// one thread of its own (`worker`), so its buffers come from one malloc arena and are given back at once after.
actor RegistryDoor {
    let door: AccessDoor
    let follower: RegistryFollower
    let directory: String
    let saved: String
    let poll: Duration
    let logger: Logger
    /// Kind → the identity (inode, size, modification time) of the file last read: the sync replaces files by
    /// rename, so a new file has a new identity.
    private var seen: [String: String] = [:]
    /// Kind → SHA-256 of the bytes last applied: the sync fetching the same file again is no news.
    private var applied: [String: [UInt8]] = [:]
    /// The unusable `latest` last logged.
    private var badLatest: String?
    /// The thread that reads, verifies, indexes and saves lists.
    private let worker = DedicatedThread(name: "tessera.registry")

    init(
        door: AccessDoor, follower: RegistryFollower, directory: String, stateDirectory: String, poll: Duration,
        logger: Logger
    ) {
        self.door = door; self.follower = follower
        self.directory = directory; self.saved = stateDirectory + "/registry"
        self.poll = poll; self.logger = logger
    }

    /// Applies the saved copies (a door restarted offline keeps deciding), then follows the directory.
    func run() async {
        try? FileManager.default.createDirectory(atPath: saved, withIntermediateDirectories: true)
        var newList = await look(listPath: saved + "/doorlist.p7s", crlPath: saved + "/badges.crl", save: false)
        while !Task.isCancelled {
            if await look(listPath: latestList(), crlPath: directory + "/badges.crl", save: true) { newList = true }
            // Reading and parsing a list left its buffers free (the door keeps only its index): give them back.
            if newList { _ = try? await worker.run { tessera_release_free_memory() } }
            newList = false
            try? await Task.sleep(for: poll)
        }
        worker.finish()
    }

    /// The list file `latest` names (a plain file name in the directory), nil without one.
    func latestList() -> String? {
        guard let data = FileManager.default.contents(atPath: directory + "/latest") else { return nil }
        let name = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(".") else {
            if name != badLatest {
                logger.warning(
                    "registry: the latest pointer names no file of the directory", metadata: ["latest": "\(name)"])
            }
            badLatest = name
            return nil
        }
        badLatest = nil
        return directory + "/" + name
    }

    /// Looks at the files once; true when a list was applied.
    @discardableResult
    func look(listPath: String?, crlPath: String, save: Bool) async -> Bool {
        var newList = false
        if let listPath, let bytes = await read(listPath, kind: "list") {
            let started = ContinuousClock.now
            let (follower, current) = (self.follower, await self.follower.number)
            let prepared: Result<RegistryFollower.PreparedList, DoorListRefusal>
            do {
                prepared = try await worker.run { follower.prepareList(bytes, current: current) }
            } catch {
                return newList
            }
            let outcome: Result<UInt64, DoorListRefusal>
            switch prepared {
            case .success(let list): outcome = await follower.apply(list)
            case .failure(let refusal): outcome = .failure(refusal)
            }
            report(outcome, kind: "door list", path: listPath, elapsed: ContinuousClock.now - started)
            if case .success = outcome {
                // The list's doors are the door table from now on.
                door.replaceDoors(await follower.view().doors)
                applied["list"] = MessageDigest.sha256(bytes)
                if save { await store(bytes, name: "doorlist.p7s") }
                newList = true
            }
        }
        if let bytes = await read(crlPath, kind: "crl") {
            let outcome = await follower.offerCRL(bytes, anchors: door.trust.anchors, file: crlPath)
            report(outcome, kind: "CRL", path: crlPath)
            if case .success = outcome {
                applied["crl"] = MessageDigest.sha256(bytes)
                if save { await store(bytes, name: "badges.crl") }
            }
        }
        return newList
    }

    /// The file's bytes when it is not the file last read for that kind (read off the cooperative pool).
    private func read(_ path: String, kind: String) async -> [UInt8]? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
        let identity = [FileAttributeKey.systemFileNumber, .size, .modificationDate]
            .map { "\(attributes[$0] ?? "-")" }.joined(separator: "/")
        if seen[kind] == identity { return nil }
        seen[kind] = identity
        let bytes = try? await worker.run { AtomicFile.read(path) }
        guard let bytes = bytes ?? nil, MessageDigest.sha256(bytes) != applied[kind] else { return nil }
        return bytes
    }

    private func report(
        _ outcome: Result<UInt64, DoorListRefusal>, kind: String, path: String, elapsed: Duration = .zero
    ) {
        switch outcome {
        case .success(let number):
            logger.notice(
                "registry: \(kind) applied",
                metadata: ["number": "\(number)", "file": "\(path)", "ms": "\(Self.milliseconds(elapsed))"])
        case .failure(.notNewer) where path.hasPrefix(saved):
            break
        case .failure(let refusal):
            logger.warning(
                "registry: \(kind) refused, the door keeps the one it has",
                metadata: ["reason": "\(refusal.rawValue)", "file": "\(path)"])
        }
    }

    static func milliseconds(_ d: Duration) -> Int64 {
        d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    }

    private func store(_ bytes: [UInt8], name: String) async {
        let directory = saved
        let outcome = try? await worker.run { AtomicFile.write(bytes, directory: directory, name: name) }
        if case .failure(let error) = outcome {
            logger.error("registry: cannot save the last good \(name)", metadata: ["error": "\(error.reason)"])
        }
    }
}
