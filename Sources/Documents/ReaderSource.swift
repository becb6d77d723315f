import APDU
import TesseraCore

/// A reader as listed by `readers.list`.
public struct ReaderInfo: Sendable, Equatable {
    /// Name to pass as `reader` in `documents.read` (PC/SC reader name, or a libnfc connstring).
    public var name: String
    /// "pcsc" or "libnfc".
    public var stack: String
    public var cardPresent: Bool
    public var atr: [UInt8]?
    public init(name: String, stack: String, cardPresent: Bool, atr: [UInt8]? = nil) {
        self.name = name; self.stack = stack; self.cardPresent = cardPresent; self.atr = atr
    }
}

/// A card (or NFC target) opened for one document read. The document stack only sees `APDUTransport`.
public protocol CardSession: APDUTransport {
    /// Releases the card; the session must not be used afterwards.
    func close() async
    /// Runs `body` with exclusive use of the card (a PC/SC transaction), so no other program interleaves
    /// APDUs with a secure-messaging session. The default runs `body` as it is.
    func exclusively<T: Sendable>(_ body: @Sendable () async throws(TesseraError) -> T) async throws(TesseraError) -> T
}

extension CardSession {
    public func exclusively<T: Sendable>(_ body: @Sendable () async throws(TesseraError) -> T)
        async throws(TesseraError) -> T
    {
        try await body()
    }
}

/// A family of readers (PC/SC, libnfc). The document service asks each source for readers and cards.
public protocol ReaderSource: Sendable {
    /// "pcsc" or "libnfc".
    var stack: String { get }
    func readers() async throws(TesseraError) -> [ReaderInfo]
    /// Opens the card in `reader`: NO_READER when unknown, NO_CARD when empty.
    func open(reader: String) async throws(TesseraError) -> any CardSession
}
