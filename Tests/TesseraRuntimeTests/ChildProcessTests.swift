import FoundationEssentials
import TesseraCore
import TesseraRuntime
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `ChildProcess` (a program that outlives a call, on `SpawnedProcess`) and `OpenFile` (a descriptor read or
/// written whole), the replacements of Foundation's `Process` and `FileHandle`.
@Suite struct ChildProcessTests {
    /// Output and error are appended to the file (what was there stays), the environment is merged, stdin is at
    /// its end, and the status is the exit code.
    @Test func appendsBothStreamsToAFileAndReportsTheExitStatus() async throws {
        let dir = Scratch.directory("child")
        let log = dir + "/log"
        try OpenFile.forWriting(log, truncate: true).write(Array("before\n".utf8))
        let child = try ChildProcess.start(
            ["/bin/sh", "-c", "echo out:$GREETING; echo err >&2; cat; exit 3"],
            environment: ["GREETING": "hello"], output: .file(log))
        while child.isRunning { try await Task.sleep(for: .milliseconds(5)) }
        #expect(child.status == 3)
        #expect(child.stop(grace: .seconds(1)) == 3)
        let text = String(decoding: try OpenFile.contents(of: log), as: UTF8.self)
        #expect(text == "before\nout:hello\nerr\n")
    }

    /// `stop` ends a running program with SIGTERM, and one that ignores SIGTERM with SIGKILL after the grace.
    @Test func stopTerminatesThenKills() async throws {
        let polite = try ChildProcess.start(["/bin/sleep", "30"], output: .discard)
        #expect(polite.isRunning)
        let status = await DedicatedThread.run { polite.stop(grace: .seconds(5)) }
        #expect(status == SIGTERM)
        #expect(!polite.isRunning)
        #expect(kill(polite.pid, 0) != 0)

        let stubborn = try ChildProcess.start(
            ["/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"], output: .discard)
        try await Task.sleep(for: .milliseconds(200))
        let started = ContinuousClock.now
        let killed = await DedicatedThread.run { stubborn.stop(grace: .milliseconds(300)) }
        #expect(killed == SIGKILL)
        #expect(ContinuousClock.now - started >= .milliseconds(300))
    }

    @Test func aMissingProgramIsInvalidInput() {
        #expect(throws: TesseraError.self) {
            try ChildProcess.start(["/nonexistent/tessera-program"], output: .discard)
        }
    }

    /// A program whose file is open for writing (ETXTBSY) is started once the writer lets go within the wait
    /// (a child forked elsewhere holds the writer's descriptor only until its exec); one held for good is
    /// INVALID_INPUT naming the reason.
    @Test func aProgramBusyForAMomentStartsAndOneBusyForGoodIsInvalidInput() async throws {
        let dir = Scratch.directory("child")
        let path = dir + "/busy.sh"
        let writer = try OpenFile.forWriting(path, truncate: true, mode: 0o755)
        try writer.write(Array("#!/bin/sh\nexit 7\n".utf8))
        #expect(throws: TesseraError.self) { try ChildProcess.start([path], output: .discard) }
        do {
            _ = try ChildProcess.start([path], output: .discard)
        } catch {
            #expect(error.code == .invalidInput && error.message.contains("Text file busy"))
        }

        DedicatedThread.detach(name: "writer") {
            var pause = timespec(tv_sec: 0, tv_nsec: 10_000_000)
            nanosleep(&pause, nil)
            writer.close()
        }
        let child = try await DedicatedThread.run { () throws(TesseraError) in
            try ChildProcess.start([path], output: .discard)
        }
        while child.isRunning { try await Task.sleep(for: .milliseconds(5)) }
        #expect(child.status == 7)
    }

    /// Writes retry until every byte is out; a read goes to the end even where the size shows 0 (`/proc`); a
    /// failed open names its errno.
    @Test func openFileWritesAndReadsWhole() throws {
        let dir = Scratch.directory("child")
        let big = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let file = try OpenFile.forWriting(dir + "/big", truncate: true, mode: 0o600)
        try file.write(big)
        try file.write(big[0..<10])
        file.close()
        #expect(try OpenFile.contents(of: dir + "/big") == big + big[0..<10])
        let again = try OpenFile.forWriting(dir + "/big", truncate: true)
        again.write("short")
        again.close()
        #expect(try OpenFile.contents(of: dir + "/big") == Array("short".utf8))
        let status = String(decoding: try OpenFile.contents(of: "/proc/self/status"), as: UTF8.self)
        #expect(status.contains("\nPid:\t\(getpid())\n"))
        #expect(throws: OpenFile.Failure(errno: ENOENT)) { try OpenFile.contents(of: dir + "/missing") }
    }
}
