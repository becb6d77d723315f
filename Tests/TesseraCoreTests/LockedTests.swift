import Dispatch
import TesseraCore
import Testing

@Suite struct LockedTests {
    /// Threads (not tasks) incrementing one counter with a read, then a write: without mutual exclusion
    /// increments overlap and get lost, so the total would fall short.
    @Test func concurrentIncrementsAreSerialized() {
        let counter = Locked(0)
        let threads = 8
        let increments = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<increments {
                counter.withLock { value in
                    let read = value
                    value = read + 1
                }
            }
        }
        #expect(counter.current == threads * increments)
    }

    @Test func typedErrorsPassThroughAndReleaseTheLock() {
        let locked = Locked([1, 2])
        do throws(TesseraError) {
            try locked.withLock { (values: inout [Int]) throws(TesseraError) in
                values.append(3)
                throw TesseraError(.invalidInput, "stop")
            }
            Issue.record("the error was lost")
        } catch {
            #expect(error.code == .invalidInput)
        }
        #expect(locked.withLock { $0 } == [1, 2, 3])
    }
}
