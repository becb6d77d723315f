internal import CPKCS11
import TesseraCore

/// A bounded set of session workers for one token; async callers queue (FIFO) for a free one.
final class SessionPool: Sendable {
    let capacity: Int
    private let module: Module
    private let slot: Locked<ck_slot_id_t>
    private let threadName: String
    private let inline: Bool

    private struct State {
        var idle: [SessionWorker] = []
        var all: [SessionWorker] = []
        var waiters: [CheckedContinuation<SessionWorker?, Never>] = []
        var closed = false
    }
    private let state = Locked(State())

    /// `inline`: run calls on the caller's thread instead of a dedicated thread per session (software tokens).
    init(capacity: Int, module: Module, slot: Locked<ck_slot_id_t>, threadName: String, inline: Bool = false) {
        self.inline = inline
        self.capacity = max(1, capacity)
        self.module = module
        self.slot = slot
        self.threadName = threadName
    }

    private enum Step { case worker(SessionWorker), closed, wait }

    private func tryAcquire(_ s: inout State) -> Step {
        if s.closed { return .closed }
        if let w = s.idle.popLast() { return .worker(w) }
        if s.all.count < capacity {
            let w = SessionWorker(module: module, slot: slot, name: "\(threadName).\(s.all.count)", inline: inline)
            s.all.append(w)
            return .worker(w)
        }
        return .wait
    }

    /// A free worker, or nil once the pool is shut down.
    nonisolated(nonsending) func acquire() async -> SessionWorker? {
        switch state.withLock({ tryAcquire(&$0) }) {
        case .worker(let w): return w
        case .closed: return nil
        case .wait: break
        }
        return await withCheckedContinuation { (c: CheckedContinuation<SessionWorker?, Never>) in
            let step = state.withLock { s -> Step in
                let step = tryAcquire(&s)
                if case .wait = step { s.waiters.append(c) }
                return step
            }
            switch step {
            case .worker(let w): c.resume(returning: w)
            case .closed: c.resume(returning: nil)
            case .wait: break
            }
        }
    }

    /// Every worker of the pool (waiting for in-flight operations to finish), or nil once shut down.
    /// Callers must serialise drains among themselves.
    func acquireAll() async -> [SessionWorker]? {
        var held: [SessionWorker] = []
        for _ in 0..<capacity {
            guard let w = await acquire() else {
                held.forEach(release)
                return nil
            }
            held.append(w)
        }
        return held
    }

    func release(_ worker: SessionWorker) {
        let next = state.withLock { s -> CheckedContinuation<SessionWorker?, Never>? in
            if s.closed { return nil }
            if s.waiters.isEmpty { s.idle.append(worker); return nil }
            return s.waiters.removeFirst()
        }
        next?.resume(returning: worker)
    }

    /// Stops every worker thread (closing its session) and fails queued callers.
    func shutdown() {
        let (workers, waiters) = state.withLock {
            s -> ([SessionWorker], [CheckedContinuation<SessionWorker?, Never>]) in
            if s.closed { return ([], []) }
            s.closed = true
            defer { s.waiters = []; s.idle = [] }
            return (s.all, s.waiters)
        }
        for waiter in waiters { waiter.resume(returning: nil) }
        for worker in workers { worker.stop() }
        for worker in workers { worker.join() }
    }
}
