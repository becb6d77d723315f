import APDU
import PCSC
import PIV
import TesseraCore

/// The connection to one inserted PIV card. Operations run one at a time, each inside one PC/SC transaction
/// that starts with a SELECT of the PIV application; no transaction outlives an operation. The card is shared
/// (SCARD_SHARE_SHARED), so other PC/SC clients may use it between operations.
///
/// Failures: a removed card or reader gives TOKEN_REMOVED, a reset by another client CARD_RESET; both drop the
/// connection, and the next operation reconnects (and checks it still talks to the same card).
final class PIVCardSession: Sendable {
    let reader: String
    /// The identity the card had when it was found; a reconnect to a different card is refused.
    let identity: PIVCardIdentity
    private let lock = AsyncLock()
    private let state = Locked(State())
    /// Called with every command APDU (APDU counting).
    let onCommand: (@Sendable (CommandAPDU) -> Void)?

    private struct State {
        var card: PCSCCard?
        var verifiedIdentity = true
        var gone = false
    }

    init(reader: String, identity: PIVCardIdentity, card: PCSCCard?, onCommand: (@Sendable (CommandAPDU) -> Void)?) {
        self.reader = reader
        self.identity = identity
        self.onCommand = onCommand
        state.withLock { $0.card = card }
    }

    /// The card left (monitor event): later operations fail with TOKEN_NOT_PRESENT.
    func markGone() async {
        let card = state.withLock { s -> PCSCCard? in
            s.gone = true
            defer { s.card = nil }
            return s.card
        }
        await card?.disconnect()
    }

    var isGone: Bool { state.withLock { $0.gone } }

    /// Runs `body` in one transaction after SELECT. Serialised with every other operation on this card.
    func run<T: Sendable>(_ body: @Sendable (PIVApplication) async throws(TesseraError) -> T) async throws(TesseraError)
        -> T
    {
        try await lock.withLock { () async throws(TesseraError) -> T in try await runLocked(body) }
    }

    private func runLocked<T: Sendable>(_ body: @Sendable (PIVApplication) async throws(TesseraError) -> T)
        async throws(TesseraError) -> T
    {
        let (existing, gone) = state.withLock { ($0.card, $0.gone) }
        if gone { throw TesseraError(.tokenNotPresent, "the PIV card in \(reader) was removed") }
        let card: PCSCCard
        if let existing {
            card = existing
        } else {
            do {
                card = try await PCSCContext().connect(reader: reader, shareMode: .shared)
            } catch {
                throw Self.mapConnect(error, reader: reader)
            }
            state.withLock {
                $0.card = card; $0.verifiedIdentity = false
            }
        }
        let checkIdentity = !state.withLock { $0.verifiedIdentity }
        let expected = identity
        let onCommand = self.onCommand
        do {
            let result = try await card.transaction { (c: PCSCCard) async throws(TesseraError) -> T in
                let app = PIVApplication(transport: c, onCommand: onCommand)
                try await app.select()
                if checkIdentity {
                    let now = try await app.identity()
                    guard now.identifyingBytes == expected.identifyingBytes else {
                        throw TesseraError(.tokenNotPresent, "another card is now in \(self.reader)")
                    }
                }
                return try await body(app)
            }
            if checkIdentity { state.withLock { $0.verifiedIdentity = true } }
            return result
        } catch {
            switch error.code {
            case .cardRemoved, .noCard, .noReader:
                await drop(card)
                throw TesseraError(.tokenRemoved, "the PIV card left \(reader) during the operation: \(error.message)")
            case .cardReset:
                await drop(card)
                throw TesseraError(
                    .cardReset, "another program reset the PIV card in \(reader); the next operation reconnects")
            case .pcscUnavailable:
                await drop(card)
                throw error
            case .tokenNotPresent:
                await drop(card)
                throw error
            default:
                throw error
            }
        }
    }

    private func drop(_ card: PCSCCard) async {
        state.withLock { s in if s.card === card { s.card = nil } }
        await card.disconnect()
    }

    static func mapConnect(_ error: TesseraError, reader: String) -> TesseraError {
        switch error.code {
        case .noCard, .noReader, .cardRemoved:
            return TesseraError(.tokenNotPresent, "no PIV card in \(reader): \(error.message)")
        default:
            return error
        }
    }
}
