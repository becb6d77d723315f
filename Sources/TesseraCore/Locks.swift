import Foundation

/// A value guarded by a lock, for state touched from more than one thread: the project's one lock type. The body
/// must not suspend. An `NSLock` (pthread mutex) rather than `Synchronization.Mutex`: ThreadSanitizer does not see
/// Mutex's futex on Linux and reports the code it guards as races; it sees this lock.
///
/// `@unchecked Sendable` is sound because `value` is reached only inside `withLock`, under the lock, and the body
/// gets it `inout` for that call only; a body must not let a non-Sendable part of it escape.
public final class Locked<Value>: @unchecked Sendable {
    @usableFromInline let lock = NSLock()
    @usableFromInline var value: Value

    public init(_ value: Value) { self.value = value }

    /// Inlinable: specialised where it is used (no generic call with type metadata on every request's path).
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    public var current: Value { withLock { $0 } }
}

/// A FIFO mutual-exclusion lock for async code that holds it across suspension points
/// (e.g. one card transaction at a time); waiters resume in arrival order.
public final class AsyncLock: Sendable {
    private struct State {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    public init() {}

    public func withLock<T, E: Error>(_ body: () async throws(E) -> T) async throws(E) -> T {
        await acquire()
        do {
            let value = try await body()
            release()
            return value
        } catch {
            release()
            throw error
        }
    }

    private func acquire() async {
        let acquired = state.withLock { s -> Bool in
            if s.held { return false }
            s.held = true
            return true
        }
        if acquired { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if !s.held { s.held = true; return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty { s.held = false; return nil }
            return s.waiters.removeFirst()  // ownership passes on
        }
        next?.resume()
    }
}
