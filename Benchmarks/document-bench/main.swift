import APDU
import Documents
import Emulation
import FoundationEssentials
import ICAO
import MRZ
import PCSC
import TesseraCore
import TesseraTestSupport
import VPCD

#if canImport(Glibc)
    import Glibc
#endif

// document-bench: reading DG1 + DG2 (~20 KB photo) + EF.SOD with short and with extended-length READ BINARY,
// in process (protocol cost only) and through pcscd + vpcd (the daemon's real path), against the minimum
// number of READ BINARY commands for the chunk size; and passive authentication of one document against a
// 500-anchor trust store (issue 15 target: under 5 ms); and, through pcscd + vpcd, a chip with Chip Authentication
// v1 (ECDH P-256, AES-128) and active authentication (DG14 + DG15 read, CA, AA), against the minimum number of
// APDUs (access + READ BINARY chunks + CA + AA); one mDL read (MDocBench.swift); one PIV badge check at the door
// (BadgeBench.swift). Not a test: prints figures.
// Usage: document-bench [--runs N] [--trust-only | --mdoc-only | --badge-only]

let mrz = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"
let runs = CommandLine.arguments.firstIndex(of: "--runs").flatMap { Int(CommandLine.arguments[$0 + 1]) } ?? 5

/// An emulated card (passport or mdoc) as an in-memory card session.
struct EmulatedSession: CardSession {
    let card: any VirtualCard
    var supportsExtendedLength: Bool { true }
    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] { await card.process(command) }
    func close() async { await card.reset() }
}

/// One reader with a card always present; `card` makes the card each session talks to.
struct InMemorySource: ReaderSource {
    let card: @Sendable () -> any VirtualCard
    var stack: String { "memory" }
    func readers() async throws(TesseraError) -> [ReaderInfo] {
        [ReaderInfo(name: "memory", stack: stack, cardPresent: true)]
    }
    func open(reader: String) async throws(TesseraError) -> any CardSession {
        EmulatedSession(card: card())
    }
}

/// Waits (up to 5 s) until pcscd reports a card in `reader` (or, with `present: false`, none: after a link's
/// `remove()` pcscd still shows the old card until its next poll, and a read then fails).
func waitForCard(_ context: PCSCContext, reader: String, present: Bool = true) async throws {
    for _ in 0..<200 {
        if try await context.listReaders().contains(where: { $0.name == reader && $0.cardPresent == present }) {
            return
        }
        try await Task.sleep(for: .milliseconds(25))
    }
}

func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }

func measure(_ label: String, _ service: DocumentService, extended: Bool, profile: DocumentProfile) async throws {
    let request = DocumentReadRequest(
        key: try MRZ.parse(mrz).accessKey, dataGroups: [1, 2], verify: true, extendedLength: extended)
    var times: [Double] = []
    var last: DocumentReadResult?
    for _ in 0..<runs {
        let r = try await service.read(request)
        guard r.passiveAuthentication?.status == .valid else {
            fatalError("passive authentication failed: \(String(describing: r.passiveAuthentication))")
        }
        times.append(r.statistics.durationMs)
        last = r
    }
    let r = last!
    let chunk = extended ? service.fileReaderConfiguration.extendedChunkSize : service.fileReaderConfiguration.chunkSize
    let sizes = [LDSFile.com, .dataGroup(1), .dataGroup(2), .sod].map { r.files[$0]?.count ?? 0 }
    let minimum = sizes.reduce(0) { $0 + ($1 + chunk - 1) / chunk }
    let pad = { (s: String, n: Int) in s + String(repeating: " ", count: max(0, n - s.count)) }
    print(
        pad(label, 34) + pad("chunk \(chunk)", 12)
            + pad("read APDUs \(r.statistics.readAPDUs) (min \(minimum))", 26)
            + pad("total APDUs \(r.statistics.apdus)", 17)
            + pad("wire bytes \(r.statistics.bytes)", 19)
            + pad("file bytes \(r.statistics.fileBytes)", 18)
            + String(printf: "median %.1f ms (min %.1f, %d runs)", median(times), times.min()!, runs))
}

if CommandLine.arguments.contains("--mdoc-only") || CommandLine.arguments.contains("--badge-only") {
    let pcscd = try await PCSCDaemonFixture.start()
    do {
        if CommandLine.arguments.contains("--badge-only") {
            try await badgeBench(runs: runs, pcscd: pcscd, context: PCSCContext())
        } else {
            try await mdocBench(runs: runs, pcscd: pcscd, context: PCSCContext())
        }
    } catch {
        pcscd.stop()
        throw error
    }
    pcscd.stop()
    exit(0)
}

let dir = Scratch.directory("document-bench")
let profile = try DocumentProfile.make(
    directory: dir, mrz: mrz, access: AccessOptions(bac: true, pace: [.default]),
    photoPadding: 20_000)
print(
    "document: DG2 \(profile.dataGroup(2)!.count) bytes, DG1 \(profile.dataGroup(1)!.count), EF.SOD \(profile.sod.count), EF.COM \(profile.com.count); PACE \(PACEOption.default)"
)

// Passive authentication against 500 anchors (the document's CSCA among 499 others).
do {
    var store = try profile.trustStore()
    for i in 0..<499 {
        store.add(try TestPKI.generate(country: "X\(Character(UnicodeScalar(65 + i % 26)!))\(i)").csca.certificate)
    }
    var groups: [Int: [UInt8]] = [:]
    for n in [1, 2] { groups[n] = profile.dataGroup(n) }
    let verifyRuns = max(runs, 200)
    var times: [Double] = []
    var status = PassiveAuthenticationResult.Status.invalid
    for _ in 0..<verifyRuns {
        let start = ContinuousClock.now
        let r = PassiveAuthentication.verify(sod: profile.sod, dataGroups: groups, trustStore: store)
        let d = ContinuousClock.now - start
        status = r.status
        times.append(Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15)
    }
    guard status == .valid else { fatalError("passive authentication against 500 anchors: \(status)") }
    print(
        String(
            printf: "passive authentication, %d anchors: median %.2f ms (min %.2f, %d runs)",
            store.certificates.count, median(times), times.min()!, verifyRuns))
}
if CommandLine.arguments.contains("--trust-only") { exit(0) }

let memory = DocumentService(
    sources: [InMemorySource { EmulatedPassport(profile: profile) }], trustStore: try profile.trustStore())
try await measure("in process, short APDUs", memory, extended: false, profile: profile)
try await measure("in process, extended length", memory, extended: true, profile: profile)

// Through a private pcscd with a vpcd reader, as tesserad reads.
let pcscd = try await PCSCDaemonFixture.start()
defer { pcscd.stop() }
let link = VirtualCardLink(card: EmulatedPassport(profile: profile), port: Int(pcscd.port))
try await link.start()
let context = PCSCContext()
try await waitForCard(context, reader: pcscd.readerName)
let pcsc = DocumentService(sources: [PCSCReaderSource(context: context)], trustStore: try profile.trustStore())
try await measure("pcscd + vpcd, short APDUs", pcsc, extended: false, profile: profile)
try await measure("pcscd + vpcd, extended length", pcsc, extended: true, profile: profile)
await link.remove()
try await waitForCard(context, reader: pcscd.readerName, present: false)

// Chip Authentication v1 + active authentication through pcscd + vpcd: every file the SOD lists is read (EF.COM,
// DG1, DG2, DG11, DG12, DG14, DG15, EF.SOD); DG14 under the access session, the rest under CA's keys.
let caDir = Scratch.directory("document-bench-ca")
let caProfile = try DocumentProfile.make(
    directory: caDir, mrz: mrz,
    access: AccessOptions(
        bac: true, pace: [.default],
        chipAuthentication: [try ChipAuthenticationOption(parsing: "ecdh-p256-aes128")]),
    activeAuthentication: true, photoPadding: 20_000)
let caLink = VirtualCardLink(card: EmulatedPassport(profile: caProfile), port: Int(pcscd.port))
try await caLink.start()
try await waitForCard(context, reader: pcscd.readerName)
let caService = DocumentService(sources: [PCSCReaderSource(context: context)], trustStore: try caProfile.trustStore())
for extended in [false, true] {
    let request = DocumentReadRequest(
        key: try MRZ.parse(mrz).accessKey, dataGroups: [1, 2], verify: true, extendedLength: extended)
    var times: [Double] = []
    var last: DocumentReadResult?
    for _ in 0..<runs {
        let r = try await caService.read(request)
        guard r.verdict.verdict == .authentic, r.chipAuthentication?.mechanism == .chipAuthentication,
            r.chipAuthentication?.status == .valid, r.activeAuthentication?.status == .valid
        else {
            fatalError("CA read not authentic: \(r.verdict) \(String(describing: r.chipAuthentication))")
        }
        times.append(r.statistics.durationMs)
        last = r
    }
    let r = last!
    let chunk =
        extended ? caService.fileReaderConfiguration.extendedChunkSize : caService.fileReaderConfiguration.chunkSize
    let fileChunks = r.files.values.reduce(0) { $0 + ($1.count + chunk - 1) / chunk }
    // PACE: READ BINARY EF.CardAccess, MSE:Set AT, 4 × GENERAL AUTHENTICATE, SELECT eMRTD; CA (AES): MSE:Set AT +
    // GENERAL AUTHENTICATE; AA: INTERNAL AUTHENTICATE.
    let minimum = 7 + fileChunks + 2 + 1
    let files = r.files.keys.map(\.description).sorted().joined(separator: "+")
    print(
        "pcscd + vpcd, CA v1 + AA, \(extended ? "extended" : "short") (\(files), \(r.statistics.fileBytes) bytes): "
            + "total APDUs \(r.statistics.apdus) (min \(minimum)), wire bytes \(r.statistics.bytes), "
            + String(printf: "median %.1f ms (min %.1f, %d runs)", median(times), times.min()!, runs))
}
await caLink.remove()
try await waitForCard(context, reader: pcscd.readerName, present: false)

// One mDL read (MDocBench.swift), in process and through the same pcscd.
try await mdocBench(runs: runs, pcscd: pcscd, context: context)

// One PIV badge check at the door (BadgeBench.swift): in process, pcscd + vpcd, libnfc + the software PN532.
try await badgeBench(runs: runs, pcscd: pcscd, context: context)
