import APDU
import PCSC
import TesseraCore

/// PC/SC readers (pcscd). Every `open` makes a fresh SHARED connection; a read runs inside one PC/SC
/// transaction on it, and closing resets the card so the chip's secure-messaging session ends with the read.
///
/// Errors: NO_READER (unknown reader), NO_CARD (empty reader), CARD_REMOVED (card pulled during the read),
/// CARD_IN_USE (held exclusively by another program), PCSC_UNAVAILABLE (pcscd not running).
public struct PCSCReaderSource: ReaderSource {
    public let context: PCSCContext
    public var stack: String { "pcsc" }

    public init(context: PCSCContext = PCSCContext()) { self.context = context }

    public func readers() async throws(TesseraError) -> [ReaderInfo] {
        try await context.listReaders().map {
            ReaderInfo(name: $0.name, stack: "pcsc", cardPresent: $0.cardPresent, atr: $0.cardPresent ? $0.atr : nil)
        }
    }

    public func open(reader: String) async throws(TesseraError) -> any CardSession {
        let known = try await context.listReaders()
        guard let state = known.first(where: { $0.name == reader }) else {
            throw TesseraError(.noReader, "no PC/SC reader named '\(reader)'", details: ["reader": .string(reader)])
        }
        guard state.cardPresent else {
            throw TesseraError(.noCard, "no card in '\(reader)'", details: ["reader": .string(reader)])
        }
        return PCSCCardSession(card: try await context.connect(reader: reader, shareMode: .shared))
    }
}

/// One shared PC/SC connection used for one document read.
final class PCSCCardSession: CardSession {
    let card: PCSCCard

    init(card: PCSCCard) { self.card = card }

    var supportsExtendedLength: Bool { card.supportsExtendedLength }

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        try await card.transmit(command)
    }

    func exclusively<T: Sendable>(_ body: @Sendable () async throws(TesseraError) -> T) async throws(TesseraError) -> T
    {
        do {
            return try await card.transaction { _ throws(TesseraError) in try await body() }
        } catch {
            // A failure that is really the card leaving (e.g. a torn secure-messaging response) is CARD_REMOVED.
            if error.code != .cardRemoved, error.code != .pcscUnavailable, !(await card.isPresent()) {
                throw TesseraError(.cardRemoved, "card left \(card.reader) during the read (\(error.message))")
            }
            throw error
        }
    }

    func close() async {
        let present = await card.isPresent()
        await card.disconnect(disposition: present ? .reset : .leave)
    }
}
