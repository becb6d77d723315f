/// The one task executor: each job runs where `schedule` runs the closure it is handed (a `DedicatedThread`, a NIO
/// event loop), for async code that must run there (`withTaskExecutorPreference`, `Task(executorPreference:)`).
/// Blocking work on it delays the other jobs of that thread or loop.
public final class ScheduledTaskExecutor: TaskExecutor {
    private let schedule: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// Jobs run wherever `schedule` runs the closure it is handed.
    public init(_ schedule: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.schedule = schedule
    }

    /// Jobs run on `thread`, one at a time, in order; the executor keeps the thread.
    public convenience init(_ thread: DedicatedThread) {
        self.init { job in _ = thread.enqueue(job) }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        schedule { job.runSynchronously(on: executor) }
    }
}
