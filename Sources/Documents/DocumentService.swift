import APDU
import FoundationEssentials
import ICAO
import Logging
import MRZ
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Reads and verifies ICAO 9303 documents (e-passports, ID cards) from the readers of its sources.
///
/// A read: pick the reader → open the card → PACE (BAC only when the chip offers no usable PACE) → EF.COM →
/// EF.SOD → DG14 and Chip Authentication when DG14 announces it and PACE-CAM did not run → the requested data
/// groups and every group the SOD lists → passive authentication against the CSCA trust store → active
/// authentication when the SOD lists DG15, PACE-CAM when DG14 announces it → verdict. Reads on different readers run in parallel; a failure (card pulled,
/// wrong key) ends only that read.
public final class DocumentService: Sendable {
    public let sources: [any ReaderSource]
    /// CSCA trust anchors in force; nil (or empty) makes every document at best "unverified".
    public var trustStore: CSCATrustStore? { trust.current.store }
    /// Where `reloadTrust()` loads anchors from; nil when the store was given directly.
    public let trustSources: TrustSources?
    let trust: Locked<TrustState>
    /// READ BINARY sizes. `extendedChunkSize` is used only when a request asks for extended length.
    public let fileReaderConfiguration: ElementaryFileReader.Configuration
    private let logger: Logger

    public init(
        sources: [any ReaderSource], trustStore: CSCATrustStore?, trustSources: TrustSources? = nil,
        fileReaderConfiguration: ElementaryFileReader.Configuration = DocumentService.defaultFileReaderConfiguration,
        logger: Logger = Logger(label: "tessera.documents")
    ) {
        self.sources = sources
        self.trust = Locked(TrustState(store: trustStore, loadedAt: Date()))
        self.trustSources = trustSources
        self.fileReaderConfiguration = fileReaderConfiguration
        self.logger = logger
    }

    /// Short READ BINARY of 0xDF bytes (room for SM in a 256-byte response); extended reads of 0xF000 bytes.
    public static var defaultFileReaderConfiguration: ElementaryFileReader.Configuration {
        var c = ElementaryFileReader.Configuration()
        c.extendedChunkSize = 0xF000
        return c
    }

    /// Loads CSCA certificates from files, directories or ICAO master lists, then the CRLs at `crls` (each signed
    /// by one of those CSCAs); nil for no paths. Master lists must be signed by, or by a certificate issued by,
    /// one of the certificates at `masterListTrust`. Every file must be readable and usable: the error names it.
    public static func trustStore(paths: [String], masterListTrust: [String] = [], crls: [String] = [])
        throws(TesseraError) -> CSCATrustStore?
    {
        guard !paths.isEmpty || !crls.isEmpty else { return nil }
        var mlAnchors = CSCATrustStore()
        for p in masterListTrust {
            do { try mlAnchors.load(path: p) } catch {
                throw TesseraError(.invalidInput, "master list trust anchor \(p) cannot be used: \(error.message)")
            }
        }
        var store = CSCATrustStore(masterListTrust: mlAnchors.certificates)
        for path in paths {
            for file in try anchorFiles(path) {
                do { try store.load(path: file) } catch {
                    throw TesseraError(.invalidInput, "CSCA trust anchor \(file) cannot be used: \(error.message)")
                }
            }
        }
        for p in crls { try store.loadCRLs(path: p) }
        return store
    }

    /// The files behind one `--csca` path: the file itself, or the regular files of a directory (hidden ones
    /// skipped). Each must be readable and parse: a broken anchor stops start-up instead of being skipped.
    static func anchorFiles(_ path: String) throws(TesseraError) -> [String] {
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw TesseraError(.invalidInput, "CSCA trust anchor path \(path) does not exist")
        }
        guard isDirectory else { return [path] }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else {
            throw TesseraError(.invalidInput, "CSCA trust anchor directory \(path) cannot be read")
        }
        return names.sorted().filter { !$0.hasPrefix(".") }.map { FilePaths.join(path, $0) }
            .filter { file in
                var isDir = false
                return FileManager.default.fileExists(atPath: file, isDirectory: &isDir) && !isDir
            }
    }

    /// Readers of every source. A source that is down (pcscd not running) contributes none; when every source
    /// fails, the first error is thrown.
    public func readers() async throws(TesseraError) -> [ReaderInfo] {
        var all: [ReaderInfo] = []
        var firstError: TesseraError?
        var anySucceeded = false
        for source in sources {
            do {
                all += try await source.readers()
                anySucceeded = true
            } catch {
                firstError = firstError ?? error
                logger.debug("reader source unavailable", metadata: ["stack": "\(source.stack)", "error": "\(error)"])
            }
        }
        if !anySucceeded, let firstError { throw firstError }
        return all
    }

    /// Reads (and by default verifies) the document in `request.reader`, or in the first reader holding a card.
    /// `progress` is called in order from the reading task.
    public func read(
        _ request: DocumentReadRequest,
        progress: @escaping @Sendable (DocumentReadProgress) -> Void = { _ in }
    ) async throws(TesseraError) -> DocumentReadResult {
        if let groups = request.dataGroups, let bad = groups.first(where: { !(1...16).contains($0) }) {
            throw TesseraError.invalidInput("data group \(bad) does not exist (1…16)")
        }
        let started = ContinuousClock.now
        progress(DocumentReadProgress(step: .connect))
        let (source, readerName) = try await chooseReader(request.reader)
        let session = try await source.open(reader: readerName)
        let wire = CountingTransport(session, extendedLength: request.extendedLength)
        do {
            let result = try await session.exclusively { () throws(TesseraError) -> DocumentReadResult in
                try await self.perform(request, reader: readerName, wire: wire, started: started, progress: progress)
            }
            await session.close()
            logger.info(
                "document read",
                metadata: [
                    "reader": "\(readerName)", "protocol": "\(result.accessProtocol.rawValue)",
                    "pa": "\(result.passiveAuthentication?.status.rawValue ?? "skipped")",
                    "apdus": "\(result.statistics.apdus)", "ms": "\(Int(result.statistics.durationMs))",
                ])
            return result
        } catch {
            await session.close()
            logger.info("document read failed", metadata: ["reader": "\(readerName)", "error": "\(error)"])
            throw error
        }
    }

    /// Opens the card in `reader` (or the first reader holding one) for another document family (mdoc) and runs
    /// `body` with it exclusively; returns its value with the reader's name and the APDUs and bytes exchanged.
    public func withCard<T: Sendable>(
        reader: String?, extendedLength: Bool,
        _ body: @Sendable (any APDUTransport) async throws(TesseraError) -> T
    )
        async throws(TesseraError) -> (value: T, reader: String, apdus: Int, bytes: Int)
    {
        let (source, readerName) = try await chooseReader(reader)
        let session = try await source.open(reader: readerName)
        let wire = CountingTransport(session, extendedLength: extendedLength)
        do {
            let value = try await session.exclusively { () throws(TesseraError) -> T in try await body(wire) }
            await session.close()
            let counters = wire.counters
            return (value, readerName, counters.apdus, counters.bytes)
        } catch {
            await session.close()
            throw error
        }
    }

    private func chooseReader(_ name: String?) async throws(TesseraError) -> (any ReaderSource, String) {
        var firstError: TesseraError?
        var sawReader = false
        for source in sources {
            let list: [ReaderInfo]
            do { list = try await source.readers() } catch {
                firstError = firstError ?? error
                continue
            }
            sawReader = sawReader || !list.isEmpty
            if let name {
                if list.contains(where: { $0.name == name }) { return (source, name) }
            } else if let withCard = list.first(where: \.cardPresent) {
                return (source, withCard.name)
            }
        }
        if let name {
            if !sawReader, let firstError { throw firstError }
            throw TesseraError(.noReader, "no reader named '\(name)'", details: ["reader": .string(name)])
        }
        if !sawReader {
            if let firstError { throw firstError }
            throw TesseraError(.noReader, "no reader is connected")
        }
        throw TesseraError(.noCard, "no reader holds a card")
    }

    private func perform(
        _ request: DocumentReadRequest, reader readerName: String, wire: CountingTransport,
        started: ContinuousClock.Instant,
        progress: @escaping @Sendable (DocumentReadProgress) -> Void
    ) async throws(TesseraError) -> DocumentReadResult {
        progress(DocumentReadProgress(step: .access))
        let access = try await establishSecureAccess(
            transport: wire, password: request.key.accessPassword, preferPACE: true)
        var channel = access.channel
        let used = access.protocolUsed
        let afterAccess = wire.counters

        var configuration = fileReaderConfiguration
        if !request.extendedLength { configuration.extendedChunkSize = 0 }
        var reader = ElementaryFileReader(transport: channel, configuration: configuration)
        var files: [LDSFile: [UInt8]] = [:]
        var notPresent: [Int] = []
        var notReadable: [Int] = []
        var warnings: [String] = []

        func read(_ file: LDSFile) async throws(TesseraError) -> [UInt8] {
            let name = file.description
            progress(DocumentReadProgress(step: .read, file: name, bytesRead: 0))
            let bytes = try await reader.readFile(fid: file.fileID, sfi: file.sfi) { done, total in
                progress(DocumentReadProgress(step: .read, file: name, bytesRead: done, totalBytes: total))
            }
            files[file] = bytes
            return bytes
        }

        // EF.COM is unsigned: it only decides what to read without verification. With verification the signed
        // EF.SOD decides which data groups exist, and every group it lists is read (a clone cannot hide DG15).
        var comList: Set<Int>?
        do {
            let com = try await read(.com)
            do { comList = Set(try EFCOM(parsing: com).dataGroups) } catch {
                warnings.append("EF.COM does not parse: \(error.message)")
            }
        } catch  where error.isFileNotFound {
            warnings.append("the chip has no EF.COM")
        }
        var sod: [UInt8]?
        var listed: Set<Int>?
        if request.verify {
            do { sod = try await read(.sod) } catch  where error.isFileNotFound {
                warnings.append("the chip has no EF.SOD")
            }
            // A SOD that does not parse fails passive authentication, which says why.
            listed = sod.flatMap { try? SecurityObject(parsing: $0) }.map { Set($0.dataGroupHashes.keys) }
        }

        let requested = Set(request.dataGroups ?? [1, 2])
        var wanted = requested
        if let listed {
            // DG3/DG4 (fingerprints, iris) need extended access control: read only when asked for.
            wanted.formUnion(listed.subtracting([3, 4]))
        } else if request.verify {
            wanted.formUnion([14, 15].filter { comList?.contains($0) == true })
        }
        if request.verify, access.chipAuthentication != nil { wanted.insert(14) }
        let present = listed ?? comList
        var accessDenied: Set<Int> = []
        var unreadable: Set<Int> = []
        // EAC-protected groups last: some chips end secure messaging when they refuse one.
        let order = wanted.sorted(by: { ((3...4).contains($0) ? 100 : 0) + $0 < ((3...4).contains($1) ? 100 : 0) + $1 })

        // Chip Authentication v1 (PACE-CAM makes it unnecessary): DG14 under the access session, CA, then the
        // other groups under CA's keys; the first answer under them confirms CA.
        var caStep: ChipAuthenticationStep?
        func accessAgain() async throws(TesseraError) {
            channel = try await establishSecureAccess(
                transport: wire, password: request.key.accessPassword, preferPACE: true
            ).channel
            reader = ElementaryFileReader(transport: channel, configuration: configuration)
        }
        if request.verify, access.chipAuthentication == nil, wanted.contains(14), present?.contains(14) ?? true {
            do { _ = try await read(.dataGroup(14)) } catch  where !error.retryable {
                // the loop below reads DG14 again and reports what went wrong
            }
            if let infos = Self.announcedChipAuthentication(dg14: files[.dataGroup(14)]) {
                var step = try await Self.runChipAuthentication(
                    infos, over: channel, extendedLength: wire.inner.supportsExtendedLength)
                if step.channel == nil && step.result.status == .invalid {
                    // The chip refused CA; many chips end secure messaging then: access again to read the rest.
                    try await accessAgain()
                }
                if let caChannel = step.channel {
                    channel = caChannel
                    reader = ElementaryFileReader(transport: caChannel, configuration: configuration)
                    let next = order.first { n in n != 14 && files[.dataGroup(n)] == nil && present?.contains(n) ?? true
                    }
                    do throws(TesseraError) {
                        if let next {
                            _ = try await read(.dataGroup(next))
                        } else {
                            let selected = try await caChannel.send(
                                CommandAPDU.select(aid: eMRTDApplicationID))
                            guard selected.sw.isSuccess else {
                                throw TesseraError(.cardError, "SELECT failed (\(selected.sw))")
                            }
                        }
                        step.confirm()
                    } catch  where error.code == .secureMessagingError {
                        step.fail(error)
                        // The chip ended secure messaging: access again to read the rest.
                        try await accessAgain()
                    } catch  where !error.retryable {
                        // 6A82 and the like are not protected answers: the loop below handles the file.
                    }
                }
                caStep = step
            }
        }

        for n in order {
            if let present, !present.contains(n) {
                if requested.contains(n) { notPresent.append(n) }
                continue
            }
            if files[.dataGroup(n)] != nil { continue }
            do {
                _ = try await read(.dataGroup(n))
                caStep?.confirm()
            } catch  where error.isFileNotFound {
                unreadable.insert(n)
                if requested.contains(n) { notPresent.append(n) }
            } catch  where error.code == .accessDenied {
                accessDenied.insert(n)
                if requested.contains(n) { notReadable.append(n) }
            } catch  where listed?.contains(n) == true && !error.retryable {
                // A group the SOD lists that the chip will not deliver fails passive authentication.
                unreadable.insert(n)
                warnings.append("DG\(n): \(error.message)")
            }
        }
        let afterRead = wire.counters

        // Parse what was read; a data group that does not parse is a warning (passive authentication says why).
        var mrz: MRZ?
        if let dg1 = files[.dataGroup(1)] {
            do { mrz = try DG1(parsing: dg1).parsedMRZ() } catch { warnings.append("DG1: \(error.message)") }
        }
        var faces: [LDSImage] = []
        if let dg2 = files[.dataGroup(2)], requested.contains(2) {
            do { faces = try DG2(parsing: dg2).faces.map(\.image) } catch { warnings.append("DG2: \(error.message)") }
        }

        var passive: PassiveAuthenticationResult?
        var active: ActiveAuthenticationResult?
        var chipAuthentication: ChipAuthenticationResult?
        var activeRequired = false, chipRequired = access.chipAuthentication != nil
        var camData: PACEChipAuthenticationData?
        var cardSecurity: CardSecurityResult?
        if request.verify {
            progress(DocumentReadProgress(step: .verify))
            if used == .pace {
                cardSecurity =
                    access.cardSecurity.map { CardSecurity.verify($0, trustStore: trustStore) } ?? .notPresent
            }
            var groups: [Int: [UInt8]] = [:]
            for (file, bytes) in files { if let n = file.dataGroupNumber { groups[n] = bytes } }
            if let sod {
                // Everything listed and not read is missing, except EAC-protected DG3/DG4 (not asked for, or refused).
                let eac = Set([3, 4]).subtracting(requested).union(accessDenied.intersection([3, 4]))
                let missing = (listed ?? []).subtracting(groups.keys).subtracting(eac)
                passive = PassiveAuthentication.verify(
                    sod: sod, dataGroups: groups, missing: missing.union(unreadable),
                    trustStore: trustStore)
                if passive?.certificateChain == .noTrustAnchor,
                    let country = (try? SecurityObject(parsing: sod))?.documentSignerCertificate?.issuerCountry
                {
                    trust.withLock { _ = $0.unanchoredIssuers.insert(country.uppercased()) }
                }
            } else {
                // An empty SOD yields status invalid with every check "notChecked".
                var missing = PassiveAuthentication.verify(sod: [], dataGroups: [:], trustStore: nil)
                missing.reason = "the chip has no EF.SOD"
                passive = missing
            }
            activeRequired = listed?.contains(15) == true || files[.dataGroup(15)] != nil
            if let dg15bytes = files[.dataGroup(15)] {
                do {
                    let dg15 = try DG15(parsing: dg15bytes)
                    let dg14 = files[.dataGroup(14)].flatMap { try? DG14(parsing: $0) }
                    active = try await ActiveAuthentication.perform(
                        over: channel, dg15: dg15, dg14: dg14,
                        challenge: request.aaChallenge)
                    if active?.status == .notSupported {
                        // The chip has an AA key (DG15), so refusing to use it is what a clone without the key does.
                        active = ActiveAuthenticationResult(
                            status: .invalid,
                            reason: "the chip has DG15 but refused active authentication (\(active?.reason ?? ""))")
                    }
                } catch  where error.code == .malformedData {
                    var failed = ActiveAuthentication.verify(challenge: [], response: [], publicKeyInfo: [])
                    failed.reason = error.message
                    active = failed
                }
            } else if activeRequired {
                active = ActiveAuthenticationResult(
                    status: .invalid, reason: "EF.SOD lists DG15 but the chip did not deliver it")
            }

            if let cam = access.chipAuthentication {
                camData = cam
                chipAuthentication = Self.checkChipAuthenticationMapping(
                    cam, cardSecurity: access.cardSecurity, cardSecurityResult: cardSecurity,
                    dg14: files[.dataGroup(14)], passive: passive)
            } else if let announced = Self.announcedChipAuthenticationMapping(dg14: files[.dataGroup(14)]) {
                // DG14 announces PACE-CAM but access did not use it (EF.CardAccess hid it): run it now.
                chipRequired = true
                (chipAuthentication, camData) = try await runChipAuthenticationMapping(
                    announced, request: request, wire: wire,
                    dg14: files[.dataGroup(14)], passive: passive)
            }
            if access.chipAuthentication == nil, Self.announcedChipAuthentication(dg14: files[.dataGroup(14)]) != nil {
                // DG14 announces Chip Authentication: it must have run (PACE-CAM, preferred, makes it unnecessary).
                chipRequired = true
                if chipAuthentication == nil || chipAuthentication?.status == .valid {
                    chipAuthentication =
                        caStep.map { Self.finishChipAuthentication($0, passive: passive) }
                        ?? ChipAuthenticationResult(
                            status: .invalid, reason: "DG14 announces Chip Authentication but it did not run",
                            mechanism: .chipAuthentication)
                }
            }
        } else if access.chipAuthentication != nil {
            chipAuthentication = ChipAuthenticationResult(status: .notChecked, reason: "verification was not requested")
        }
        var verdict =
            request.verify
            ? DocumentVerdict.evaluate(
                passive: passive, activeRequired: activeRequired, active: active,
                chipRequired: chipRequired, chip: chipAuthentication, allowClonable: request.allowClonable)
            : DocumentVerdict.evaluate(
                passive: nil, activeRequired: false, active: nil, chipRequired: false, chip: nil,
                allowClonable: request.allowClonable)

        verdict.include(cardSecurity: cardSecurity)

        let end = wire.counters
        let elapsed = ContinuousClock.now - started
        let stats = DocumentReadStatistics(
            apdus: end.apdus, bytes: end.bytes, fileBytes: files.values.reduce(0) { $0 + $1.count },
            readAPDUs: afterRead.apdus - afterAccess.apdus,
            durationMs: Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
        var result = DocumentReadResult(
            reader: readerName, accessProtocol: used, mrz: mrz, files: files,
            requestedDataGroups: requested, faceImages: faces,
            passiveAuthentication: passive, activeAuthentication: active,
            chipAuthentication: chipAuthentication, paceMapping: access.paceAlgorithm?.mapping,
            notPresent: notPresent, notReadable: notReadable, verdict: verdict, warnings: warnings,
            statistics: stats)
        result.cardSecurity = cardSecurity
        result.cardSecurityBytes = access.cardSecurity
        result.paceFailure = access.paceFailure
        result.workarounds = access.workarounds
        if request.evidence {
            result.evidence = DocumentEvidence(result, chipAuthenticationData: camData, readAt: Date())
            if chipAuthentication?.mechanism == .chipAuthentication {
                result.evidence?.chipAuthenticationRun = caStep?.run
            }
        }
        return result
    }
}

extension DocumentService {
    /// The preferred supported PACE-CAM PACEInfo DG14 announces; nil when DG14 is absent, does not parse or
    /// announces no chip authentication mapping.
    static func announcedChipAuthenticationMapping(dg14 bytes: [UInt8]?) -> PACEInfo? {
        guard let bytes, let infos = try? SecurityInfos(encoded: try DG14(parsing: bytes).securityInfos) else {
            return nil
        }
        let cam = infos.paceInfos.filter { $0.algorithm?.mapping == .chipAuthentication }
        guard !cam.isEmpty else { return nil }
        return PACE.preferred(cam) ?? cam[0]
    }

    /// Runs PACE-CAM with `info` (announced in DG14) on the raw link after the read and checks it against DG14.
    /// A chip that refuses or fails it is `invalid`; unsupported parameters are `notChecked`. Retryable errors
    /// (card removed) end the read.
    private func runChipAuthenticationMapping(
        _ info: PACEInfo, request: DocumentReadRequest, wire: CountingTransport,
        dg14: [UInt8]?, passive: PassiveAuthenticationResult?
    ) async throws(TesseraError)
        -> (ChipAuthenticationResult, PACEChipAuthenticationData?)
    {
        guard PACE.isSupported(info) else {
            return (
                ChipAuthenticationResult(
                    status: .notChecked,
                    reason: "DG14 announces PACE-CAM \(info.protocolOID) with parameters this reader does not support"),
                nil
            )
        }
        do {
            // PACE starts from the master file; the plain SELECT ends the current secure messaging session.
            _ = try await wire.send(CommandAPDU.select(fileID: 0x3F00))
            let outcome = try await PACE.establish(transport: wire, password: request.key.accessPassword, info: info)
            guard let cam = outcome.chipAuthentication else {
                return (
                    ChipAuthenticationResult(
                        status: .invalid, reason: "PACE-CAM announced in DG14 gave no chip authentication data"), nil
                )
            }
            return (Self.checkChipAuthenticationMapping(cam, dg14: dg14, passive: passive), cam)
        } catch  where !error.retryable {
            return (
                ChipAuthenticationResult(
                    status: .invalid,
                    reason:
                        "DG14 announces PACE-CAM, which EF.CardAccess did not offer, and the chip failed it: \(error.message)"
                ), nil
            )
        }
    }

    /// PACE-CAM verdict: CA_IC · PK_IC = PK_Map,IC with PK_IC from DG14, and DG14 itself authenticated by
    /// passive authentication (its hash in a correctly signed EF.SOD). Without DG14 the key is unknown: invalid.
    static func checkChipAuthenticationMapping(
        _ cam: PACEChipAuthenticationData, dg14 bytes: [UInt8]?,
        passive: PassiveAuthenticationResult?
    ) -> ChipAuthenticationResult {
        guard let bytes else {
            return ChipAuthenticationResult(
                status: .invalid, reason: "DG14 with the chip authentication key was not read")
        }
        let infos: SecurityInfos
        do { infos = try SecurityInfos(encoded: try DG14(parsing: bytes).securityInfos) } catch {
            return ChipAuthenticationResult(status: .invalid, reason: "DG14 does not parse: \(error.message)")
        }
        var result = ChipAuthenticationMapping.verify(cam, securityInfos: infos)
        if result.status == .valid, passive?.dataGroupHashes[14] != .valid || passive?.signature != .valid {
            result = ChipAuthenticationResult(
                status: .invalid, reason: "DG14 is not authenticated by passive authentication",
                keyId: result.keyId)
        }
        return result
    }
}

extension DocumentAccessKey {
    /// The ICAO access password for this key.
    public var accessPassword: AccessPassword {
        switch self {
        case .mrz(let info): .mrz(mrzInformation: info)
        case .can(let can): .can(can)
        }
    }
}

/// Counts APDUs and wire bytes of one read.
/// A transport that counts what it exchanged: the one `withCard` hands its body (for progress reports).
public protocol APDUExchangeCounting: Sendable {
    /// Command APDUs sent and bytes (commands and responses) so far.
    var exchanged: (apdus: Int, bytes: Int) { get }
}

final class CountingTransport: APDUTransport, APDUExchangeCounting {
    struct Counters: Sendable { var apdus = 0; var bytes = 0 }
    let inner: any CardSession
    let supportsExtendedLength: Bool
    private let state = Locked(Counters())

    init(_ inner: any CardSession, extendedLength: Bool) {
        self.inner = inner
        supportsExtendedLength = extendedLength && inner.supportsExtendedLength
    }

    var counters: Counters { state.withLock { $0 } }
    var exchanged: (apdus: Int, bytes: Int) { state.withLock { ($0.apdus, $0.bytes) } }

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        state.withLock {
            $0.apdus += 1; $0.bytes += command.count
        }
        let response = try await inner.transmit(command)
        state.withLock { $0.bytes += response.count }
        return response
    }
}
