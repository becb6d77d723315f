import TesseraCore

/// The running `mdoc.present` and `mdoc.respond` sessions, so that `mdoc.stop` and a closed connection end them.
public final class MDocPresentations: Sendable {
    private struct Entry {
        var uid: UInt32
        var connection: UInt64
        var documentIdentifier: String
        var stop = false
    }
    private let entries = Locked<[String: Entry]>([:])

    public init() {}
    /// Sessions one connection may run at once (each waits for the user); one more is refused BUSY.
    public static let maxPerConnection = 8

    public func add(session: String, uid: UInt32, connection: UInt64, documentIdentifier: String) throws(TesseraError) {
        let added = entries.withLock { e in
            guard e.values.count(where: { $0.connection == connection }) < Self.maxPerConnection else { return false }
            e[session] = Entry(uid: uid, connection: connection, documentIdentifier: documentIdentifier)
            return true
        }
        guard added else {
            throw TesseraError(
                .busy,
                "this connection runs \(Self.maxPerConnection) mdoc.present/mdoc.respond sessions already; retry when one ends"
            )
        }
    }
    public func remove(session: String) { _ = entries.withLock { $0.removeValue(forKey: session) } }
    public func stopped(session: String) -> Bool { entries.withLock { $0[session]?.stop ?? true } }

    /// Stops the sessions started on a connection (it closed); their ids.
    public func stop(connection: UInt64) -> [String] {
        entries.withLock { e in
            var stopped: [String] = []
            for (key, value) in e where value.connection == connection && !value.stop {
                e[key]?.stop = true
                stopped.append(key)
            }
            return stopped
        }
    }

    /// Stops `uid`'s sessions (of one document, when given); their ids.
    public func stop(uid: UInt32, documentIdentifier: String?) -> [String] {
        entries.withLock { e in
            var stopped: [String] = []
            for (key, value) in e
            where value.uid == uid && !value.stop
                && (documentIdentifier == nil || value.documentIdentifier == documentIdentifier)
            {
                e[key]?.stop = true
                stopped.append(key)
            }
            return stopped
        }
    }
}
