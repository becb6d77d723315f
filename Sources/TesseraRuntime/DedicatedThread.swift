internal import CSystemShims
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The one way to run blocking work (a C call that may wait: PKCS#11, PC/SC, libnfc; a helper program; file
/// loading) from async code: on an OS thread of its own, never on Swift's cooperative pool or a NIO event loop.
///
/// `DedicatedThread.run` runs one job on a new thread and suspends until it returns. An instance is a long-lived
/// serial thread, for state that must stay on one thread (a PKCS#11 session, a libnfc device, a PC/SC context):
/// jobs run one at a time in the order they were queued. The thread ends after `finish()` once its queued jobs
/// are done, or when the instance is released.
public final class DedicatedThread: Sendable {
    private let queue: JobQueue
    /// The thread's name (as `ps -L` and debuggers show it).
    public let name: String

    /// Starts a serial thread named `name`.
    public init(name: String) {
        self.name = name
        let queue = JobQueue()
        self.queue = queue
        Self.detach(name: name) { queue.loop() }
    }

    deinit { queue.finish() }

    /// Runs `body` on a new thread named `name` and suspends until it returns; the caller's thread stays free.
    public static func run<T: Sendable, E: Error>(
        name: String = "tessera.blocking", _ body: @escaping @Sendable () throws(E) -> T
    ) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            detach(name: name) {
                do throws(E) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    /// Starts `body` on a new thread named `name` and returns at once (serve loops, cleanup and retry loops
    /// nobody awaits). `stackSize` in bytes; the platform default when nil.
    /// A pthread, detached (nobody joins it); the kernel keeps the first 15 bytes of the name.
    public static func detach(name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
        let start = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(
            &thread, &attributes,
            { raw in
                let start = Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue()
                start.run()
                return nil
            }, start)
        // Out of threads or memory: Foundation's Thread stopped the process here too.
        precondition(result == 0, "cannot start thread \(name): \(String(cString: strerror(result)))")
    }

    /// Runs `body` on this thread after the jobs queued before it, and suspends until it returns.
    /// Throws `SHUTTING_DOWN` when the thread was finished before the job could be queued.
    public func run<T: Sendable>(
        _ body: @escaping @Sendable () throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        let result: Result<T, TesseraError> = await withCheckedContinuation { continuation in
            let accepted = queue.enqueue {
                continuation.resume(returning: Result { () throws(TesseraError) -> T in try body() })
            }
            if !accepted {
                continuation.resume(returning: .failure(TesseraError(.shuttingDown, "thread \(name) has finished")))
            }
        }
        return try result.get()
    }

    /// Queues `job` without waiting for it; false (and the job is dropped) when the thread was finished.
    @discardableResult
    public func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool { queue.enqueue(job) }

    /// Lets the thread run the jobs already queued, then end; later jobs are refused.
    public func finish() { queue.finish() }

    /// Blocks until the thread has ended (after `finish()`). Never call it from the thread itself.
    public func join() { queue.join() }
}

/// What a new pthread runs: its name, then the body.
private final class ThreadStart: Sendable {
    let name: String
    let body: @Sendable () -> Void

    init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }

    func run() {
        _ = tessera_set_thread_name(name)
        body()
    }
}

/// The queue a `DedicatedThread`'s thread drains; the thread holds it, not the `DedicatedThread`, so releasing
/// the instance ends the thread.
private final class JobQueue: @unchecked Sendable {
    // All state is guarded by `condition`.
    private let condition = PthreadMutex()
    private var jobs: [@Sendable () -> Void] = []
    private var finishing = false
    private var ended = false

    func loop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !finishing { condition.wait() }
            if jobs.isEmpty {
                ended = true
                condition.broadcast()
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }

    func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing else { return false }
        jobs.append(job)
        condition.broadcast()
        return true
    }

    func finish() {
        condition.lock()
        finishing = true
        condition.broadcast()
        condition.unlock()
    }

    func join() {
        condition.lock()
        while !ended { condition.wait() }
        condition.unlock()
    }
}
