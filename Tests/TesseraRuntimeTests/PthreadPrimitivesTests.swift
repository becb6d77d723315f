import TesseraCore
import TesseraRuntime
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The pthread primitives that replace Foundation's `NSCondition` and `Thread`.
@Suite struct PthreadPrimitivesTests {
    /// Waiters on threads of their own sleep in `wait()` (the lock released meanwhile, or the producer could never
    /// take it) until a `broadcast()` made under the lock; every waiter wakes and sees the value set before it.
    @Test func waitReleasesTheLockUntilABroadcast() async {
        let mutex = PthreadMutex()
        let shared = Shared()
        let waiters = 4
        let done = Locked(0)
        for i in 0..<waiters {
            DedicatedThread.detach(name: "test.waiter.\(i)") {
                mutex.lock()
                shared.waiting += 1
                while !shared.ready { mutex.wait() }
                shared.woken += 1
                mutex.unlock()
                done.withLock { $0 += 1 }
            }
        }
        await DedicatedThread.run(name: "test.producer") {
            mutex.lock()
            while shared.waiting < waiters {
                mutex.unlock()
                usleep(1_000)
                mutex.lock()
            }
            shared.ready = true
            mutex.broadcast()
            mutex.unlock()
        }
        while done.current < waiters { try? await Task.sleep(for: .milliseconds(2)) }
        mutex.lock()
        #expect(shared.woken == waiters)
        mutex.unlock()
    }

    /// A detached thread carries its name as the kernel shows it (`/proc/thread-self/comm`), cut to the 15
    /// bytes Linux keeps, and so does a serial thread.
    @Test func threadsAreNamed() async throws {
        let seen = Locked<String?>(nil)
        DedicatedThread.detach(name: "tessera.test.named-thread", stackSize: 1 << 20) {
            let comm = try? OpenFile.contents(of: "/proc/thread-self/comm")
            seen.withLock { $0 = String(decoding: comm ?? [], as: UTF8.self) }
        }
        while seen.current == nil { try await Task.sleep(for: .milliseconds(2)) }
        #expect(seen.current == "tessera.test.na\n")
        let serial = DedicatedThread(name: "test.serial")
        let comm = try await serial.run { () throws(TesseraError) -> [UInt8] in
            do throws(OpenFile.Failure) {
                return try OpenFile.contents(of: "/proc/thread-self/comm")
            } catch {
                throw .internalError("\(error)")
            }
        }
        #expect(comm == Array("test.serial\n".utf8))
    }

    /// Guarded by the mutex in the test above.
    private final class Shared: @unchecked Sendable {
        var waiting = 0
        var ready = false
        var woken = 0
    }
}
