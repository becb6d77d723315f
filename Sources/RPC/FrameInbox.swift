import NIOCore
import TesseraCore

/// Frames handed from a connection's channel handler (on its event loop) to the task that serves the connection:
/// one consumer, in order. Requests so run as child tasks of that task, with its task-local values (graceful
/// shutdown among them) and its cancellation.
final class FrameInbox: Sendable {
    enum Event: Sendable {
        case frame([UInt8])
        /// The connection is closed: no frame follows. `cancelRequests`: the peer went away, so the requests in
        /// flight are cancelled.
        case closed(cancelRequests: Bool)
    }

    private struct State {
        var queue = CircularBuffer<Event>()
        var waiter: UnsafeContinuation<Event, Never>?
        var closed = false
    }
    private let state = Locked(State())

    func push(_ event: Event) {
        let waiter = state.withLock { s -> UnsafeContinuation<Event, Never>? in
            if case .closed = event { s.closed = true }
            if let waiter = s.waiter {
                s.waiter = nil
                return waiter
            }
            s.queue.append(event)
            return nil
        }
        waiter?.resume(returning: event)
    }

    /// Whether `.closed` has been pushed: frames still queued then have nobody to answer.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// The next event, waiting for one.
    nonisolated(nonsending) func next() async -> Event {
        if let event = state.withLock({ $0.queue.popFirst() }) { return event }
        return await withUnsafeContinuation { continuation in
            let ready = state.withLock { s -> Event? in
                if let event = s.queue.popFirst() { return event }
                s.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

extension EventLoop {
    /// Runs `body` at once when called on this loop, else as the loop's next job: a connection's task hands its
    /// results to the connection's channel handler this way.
    func runOnLoop(_ body: @escaping @Sendable () -> Void) {
        if inEventLoop { body() } else { execute(body) }
    }
}
