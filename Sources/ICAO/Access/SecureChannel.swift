import APDU
import TesseraCore

/// An `APDUTransport` that applies secure messaging to every command sent through it, so file reading
/// and LDS code just see a transport. Commands are serialised (one in flight at a time) because each
/// one advances the SSC. After a MAC failure or a chip-reported SM error the channel is closed and
/// every further command throws SECURE_MESSAGING_ERROR (re-establish access to continue).
public actor SecureChannel: APDUTransport {
    /// The unprotected transport underneath.
    public nonisolated let inner: any APDUTransport
    public nonisolated let supportsExtendedLength: Bool
    private var session: SecureMessagingSession?
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    public init(inner: any APDUTransport, session: SecureMessagingSession) {
        self.inner = inner
        self.supportsExtendedLength = inner.supportsExtendedLength
        self.session = session
    }

    /// The current keys and SSC; nil once the channel was closed by an SM error.
    public var currentSession: SecureMessagingSession? { session }

    /// Whether the channel still carries a usable SM session.
    public var isOpen: Bool { session != nil }

    private func acquire() async {
        if busy {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in waiters.append(c) }
        } else {
            busy = true
        }
    }

    private func release() {
        if waiters.isEmpty { busy = false } else { waiters.removeFirst().resume() }
    }

    /// Protects `command` (plain wire bytes), sends it, follows 61xx with plain GET RESPONSE, and returns
    /// the verified plain response bytes.
    public func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        await acquire()
        defer { release() }
        guard var state = session else {
            throw TesseraError(.secureMessagingError, "secure channel is closed")
        }
        let plain = try CommandAPDU(parsing: command)
        let protected = try state.protectCommand(plain)
        session = state
        var response = try ResponseAPDU(parsing: await inner.transmit(protected.encoded()))
        var data = response.data
        var rounds = 0
        while let more = response.sw.moreDataAvailable {
            rounds += 1
            guard rounds < 512 else { throw TesseraError(.malformedData, "endless GET RESPONSE chain") }
            let get = CommandAPDU.getResponse(ne: more)
            response = try ResponseAPDU(parsing: await inner.transmit(get.encoded()))
            data += response.data
        }
        do {
            let unprotected = try state.unprotectResponse(ResponseAPDU(data: data, sw: response.sw))
            session = state
            return unprotected.encoded
        } catch {
            session = nil
            throw error
        }
    }

    /// Closes the channel (e.g. when the card was reset); further commands throw SECURE_MESSAGING_ERROR.
    public func close() { session = nil }
}
