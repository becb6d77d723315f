#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a lock, for state touched from more than one thread: the project's one lock type. The body
/// must not suspend. A pthread mutex rather than `Synchronization.Mutex`: ThreadSanitizer does not see Mutex's
/// futex on Linux and reports the code it guards as races; it sees this lock.
///
/// `@unchecked Sendable` is sound because `value` is reached only inside `withLock`, under the lock, and the body
/// gets it `inout` for that call only; a body must not let a non-Sendable part of it escape.
public final class Locked<Value>: @unchecked Sendable {
    @usableFromInline let mutex = PthreadMutex()
    @usableFromInline var value: Value

    public init(_ value: Value) { self.value = value }

    /// Inlinable: specialised where it is used (no generic call with type metadata on every request's path).
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        mutex.lock()
        defer { mutex.unlock() }
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

/// A pthread mutex at a fixed address (a `pthread_mutex_t` must not move once initialised), with a condition
/// variable on it for threads that wait for a change (`DedicatedThread`'s queue). Blocking: never hold it across a
/// suspension point.
public final class PthreadMutex: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Releases the lock, sleeps until `broadcast()` (or a spurious wake-up: wait in a loop on the condition you
    /// need), and takes the lock again. Call it with the lock held.
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// Wakes every thread in `wait()`. Call it with the lock held.
    public func broadcast() { pthread_cond_broadcast(condition) }
}
