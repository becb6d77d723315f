import Dispatch
import FoundationEssentials
import TesseraCore
import TesseraRuntime
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DedicatedThreadTests {
    @Test func serialThreadRunsJobsInOrderOnOneThread() async throws {
        let thread = DedicatedThread(name: "test.serial")
        let seen = Locked<[Int]>([])
        let threads = Locked<Set<UInt>>([])
        for i in 0..<50 {
            thread.enqueue {
                seen.withLock { $0.append(i) }
                threads.withLock { _ = $0.insert(UInt(pthread_self())) }
            }
        }
        let last = try await thread.run { () throws(TesseraError) -> Int in seen.withLock { $0.count } }
        #expect(last == 50)
        #expect(seen.withLock { $0 } == Array(0..<50))
        #expect(threads.withLock { $0 }.count == 1)
        #expect(threads.withLock { $0 }.first != UInt(pthread_self()))
    }

    @Test func errorsComeBackTyped() async {
        let thread = DedicatedThread(name: "test.errors")
        do throws(TesseraError) {
            try await thread.run { () throws(TesseraError) in throw TesseraError(.tokenError, "boom") }
            Issue.record("the error was lost")
        } catch {
            #expect(error.code == .tokenError)
        }
    }

    @Test func finishRunsQueuedJobsThenRefusesNewOnes() async throws {
        let thread = DedicatedThread(name: "test.finish")
        let ran = Locked(0)
        let gate = DispatchSemaphore(value: 0)
        thread.enqueue { gate.wait() }
        for _ in 0..<3 { thread.enqueue { ran.withLock { $0 += 1 } } }
        thread.finish()
        #expect(thread.enqueue { ran.withLock { $0 += 100 } } == false)
        gate.signal()
        thread.join()
        #expect(ran.withLock { $0 } == 3)
        do throws(TesseraError) {
            _ = try await thread.run { () throws(TesseraError) in 1 }
            Issue.record("a finished thread ran a job")
        } catch {
            #expect(error.code == .shuttingDown)
        }
    }

    /// More jobs blocked at once than the cooperative pool has threads: they can all be blocked together only
    /// because none of them holds a pool thread (on the pool, this test would never finish).
    @Test func blockingJobsLeaveThePoolFree() async throws {
        let release = DispatchSemaphore(value: 0)
        let blocked = Locked(0)
        let jobs = ProcessInfo.processInfo.activeProcessorCount + 2
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<jobs {
                group.addTask {
                    await DedicatedThread.run(name: "test.blocked") {
                        blocked.withLock { $0 += 1 }
                        release.wait()
                        return true
                    }
                }
            }
            while blocked.withLock({ $0 }) < jobs { try await Task.sleep(for: .milliseconds(5)) }
            for _ in 0..<jobs { release.signal() }
            var finished = 0
            for try await done in group where done { finished += 1 }
            #expect(finished == jobs)
        }
    }
}

@Suite struct ProgramRunnerTests {
    @Test func capturesStatusInputAndOutput() async throws {
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "cat; echo err >&2; exit 3"], input: Array("in".utf8),
            timeout: .seconds(30))
        #expect(r.status == 3 && !r.timedOut && !r.cancelled)
        #expect(r.stdout == Array("in".utf8) && r.stderr == Array("err\n".utf8))
    }

    @Test func environmentAndDirectory() async throws {
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "echo $TESSERA_RUNNER_TEST; pwd"],
            environment: ["TESSERA_RUNNER_TEST": "x1"], directory: "/",
            timeout: .seconds(30))
        #expect(String(decoding: r.stdout, as: UTF8.self) == "x1\n/\n")
    }

    /// A program that ignores SIGTERM and leaves a grandchild holding its output still ends the call: SIGKILL
    /// after the grace period, and no wait on the grandchild.
    @Test func timeoutCannotHang() async throws {
        let script = "trap '' TERM; sleep 10 & sleep 10"
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", script], timeout: .milliseconds(200),
            killGrace: .milliseconds(200))
        #expect(r.timedOut && !r.cancelled)
        #expect(r.status == nil || r.status == SIGKILL)
        #expect(
            try await ProgramRunner.run(["/bin/sh", "-c", script], input: [], timeout: .milliseconds(200)) == .timedOut)
    }

    /// Input larger than a pipe's buffer, to a program that never reads it: no writer blocks.
    @Test func unreadLargeInputDoesNotBlock() async throws {
        let outcome = try await ProgramRunner.run(
            ["/bin/true"], input: [UInt8](repeating: 0x41, count: 1 << 20),
            timeout: .seconds(30))
        #expect(outcome == .exited(0))
    }

    /// 8 MiB in and out at once (and 1 MiB on stderr): the runner writes and reads concurrently, nobody blocks.
    @Test func largeInputAndOutputFlowTogether() async throws {
        let input = (0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ $0 >> 13) }
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "cat; head -c 1048576 /dev/zero >&2"], input: input, timeout: .seconds(60))
        #expect(r.status == 0 && !r.timedOut)
        #expect(r.stdout == input)
        #expect(r.stderr.count == 1 << 20)
    }

    /// A program (and the grandchild it leaves) that never stops writing does not keep the runner past its deadline.
    @Test func anEndlessWriterStillTimesOut() async throws {
        let start = ContinuousClock.now
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "yes & yes >&2 & sleep 10"], timeout: .milliseconds(300), killGrace: .milliseconds(200),
            outputLimit: 1 << 16)
        #expect(r.timedOut && r.stdout.count == 1 << 16)
        #expect(ContinuousClock.now - start < .seconds(10))
    }

    /// Output past `outputLimit` is read and dropped: the program still ends normally.
    @Test func outputPastTheLimitIsDropped() async throws {
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "head -c 4194304 /dev/zero; echo done >&2"], timeout: .seconds(60),
            outputLimit: 1 << 20)
        #expect(r.status == 0 && r.stdout.count == 1 << 20 && r.stderr == Array("done\n".utf8))
    }

    /// The program's standard input, output and error are pipes, never files (a PIN or a face image given to or
    /// answered by a program touches no file system; before, they were unlinked files in $TMPDIR).
    @Test func standardStreamsArePipesNotFiles() async throws {
        let r = try await ProgramRunner.capture(
            ["/bin/sh", "-c", "cat >/dev/null; readlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2 >&2"],
            input: Array("1234".utf8), timeout: .seconds(30))
        let links = String(decoding: r.stderr, as: UTF8.self).split(separator: "\n")
        #expect(links.count == 3 && links.allSatisfy { $0.hasPrefix("pipe:") }, "\(links)")
    }

    @Test func cancellationTerminatesWithSIGTERM() async throws {
        let task = Task { try await ProgramRunner.capture(["/bin/sleep", "30"], timeout: .seconds(60)) }
        try await Task.sleep(for: .milliseconds(200))
        task.cancel()
        let r = try await task.value
        #expect(r.cancelled && !r.timedOut)
        // SIGKILL (9) would mean SIGTERM was blocked in the child until the grace period ran out.
        #expect(r.status == SIGTERM)
    }

    @Test func unstartableProgram() async {
        await #expect(throws: TesseraError.self) {
            try await ProgramRunner.run(["/nonexistent/program"], input: [], timeout: .seconds(5))
        }
        await #expect(throws: TesseraError.self) { try await ProgramRunner.run([], input: [], timeout: .seconds(5)) }
    }
}
