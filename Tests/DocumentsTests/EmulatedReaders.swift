import APDU
import Documents
import Emulation
import FoundationEssentials
import ICAO
import MRZ
import TesseraCore
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// ICAO Doc 9303 Part 3 TD3 specimen (Anna Maria Eriksson, Utopia).
let specimenMRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"

/// Issues a test document into a fresh directory under `Scratch.root` (removed when the test process exits).
func makeProfile(
    bac: Bool = true, pace: [String] = ["ecdh-gm-p256-aes128"], activeAuthentication: Bool = false,
    photoPadding: Int? = nil
) throws -> DocumentProfile {
    let dir = Scratch.directory("documents-tests")
    return try DocumentProfile.make(
        directory: dir, mrz: specimenMRZ, can: "123456",
        access: AccessOptions(bac: bac, pace: try pace.map { try PACEOption(parsing: $0) }),
        activeAuthentication: activeAuthentication, photoPadding: photoPadding)
}

/// The emulated chip as an in-memory card session. With `removeAfter`, the card "leaves the field" once it has
/// answered that many commands: later commands throw CARD_REMOVED, as `PCSCCard` does.
struct EmulatedSession: CardSession {
    let card: EmulatedPassport
    let supportsExtendedLength: Bool
    let removeAfter: Int?

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        if let removeAfter, await card.commandCount >= removeAfter {
            throw TesseraError(.cardRemoved, "emulated card left the field")
        }
        return await card.process(command)
    }

    func close() async { await card.reset() }
}

/// In-memory readers: each slot holds a chip factory (nil = empty reader).
struct MemoryReaderSource: ReaderSource {
    var stack: String { "memory" }
    let slots: [(name: String, chip: (@Sendable () -> EmulatedSession)?)]

    func readers() async throws(TesseraError) -> [ReaderInfo] {
        slots.map { ReaderInfo(name: $0.name, stack: stack, cardPresent: $0.chip != nil) }
    }

    func open(reader: String) async throws(TesseraError) -> any CardSession {
        guard let slot = slots.first(where: { $0.name == reader }) else {
            throw TesseraError(.noReader, "no reader \(reader)")
        }
        guard let make = slot.chip else { throw TesseraError(.noCard, "no card in \(reader)") }
        return make()
    }
}

/// Thread-safe event recorder.
final class EventLog<T: Sendable>: Sendable {
    private let items = Locked<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.current }
}
