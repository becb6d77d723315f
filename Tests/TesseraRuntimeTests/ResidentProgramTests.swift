import FoundationEssentials
import TesseraCore
import TesseraRuntime
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `ResidentProgram` with real programs (/bin/sh scripts): kept running between requests, started again after it
/// dies or hangs, stopped when idle, and a dead reader never takes this process down with SIGPIPE.
@Suite struct ResidentProgramTests {
    /// Answers each line with its own pid and the line.
    static let echo = ["/bin/sh", "-c", #"while read -r line; do echo "$$ $line"; done"#]

    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func oneProgramAnswersEveryRequestInTurn() async throws {
        let program = ResidentProgram(command: Self.echo) { _ in }
        var pids: Set<String> = []
        for i in 0..<5 {
            let answer = text(try await program.request(Array("request \(i)".utf8), timeout: .seconds(10)))
            let parts = answer.split(separator: " ", maxSplits: 1)
            #expect(parts.last == "request \(i)")
            pids.insert(String(parts.first ?? ""))
        }
        #expect(pids.count == 1)
        #expect(await program.starts == 1)
        // Requests at the same time go one at a time, each getting its own answer.
        let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<8 {
                group.addTask { (i, self.text(try await program.request(Array("r\(i)".utf8), timeout: .seconds(10)))) }
            }
            var all: [Int: String] = [:]
            for try await (i, a) in group { all[i] = a }
            return all
        }
        for (i, a) in answers { #expect(a.hasSuffix(" r\(i)")) }
        #expect(await program.starts == 1)
        await program.stop()
        #expect(await !program.isRunning)
    }

    @Test func aProgramThatDiesIsStartedAgain() async throws {
        // Answers once, then exits: the second request finds it gone (closed output), the third starts it again.
        let program = ResidentProgram(command: ["/bin/sh", "-c", "read -r line; echo \"$$\"; exit 3"]) { _ in }
        let first = text(try await program.request(Array("a".utf8), timeout: .seconds(10)))
        await #expect(throws: TesseraError.self) { try await program.request(Array("b".utf8), timeout: .seconds(10)) }
        #expect(await !program.isRunning)
        let third = text(try await program.request(Array("c".utf8), timeout: .seconds(10)))
        #expect(first != third)
        #expect(await program.starts == 2)
        await program.stop()
    }

    @Test func aProgramThatDoesNotAnswerInTimeIsStopped() async throws {
        let program = ResidentProgram(command: ["/bin/sh", "-c", "exec sleep 60"]) { _ in }
        let start = ContinuousClock.now
        await #expect(throws: TesseraError.self) {
            try await program.request(Array("x".utf8), timeout: .milliseconds(300))
        }
        // Stopped at its timeout, not after the program's 60 s (the bound is loose: a loaded machine is slow).
        #expect(ContinuousClock.now - start < .seconds(40))
        #expect(await !program.isRunning)
        // A program that exits at once (nothing reads the request): an error, not a SIGPIPE for this process.
        let gone = ResidentProgram(command: ["/bin/sh", "-c", "exit 0"]) { _ in }
        let big = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
        await #expect(throws: TesseraError.self) { try await gone.request(big, timeout: .seconds(10)) }
        await #expect(throws: TesseraError.self) {
            try await ResidentProgram(command: ["/nonexistent/reader"]) { _ in }.request([], timeout: .seconds(1))
        }
    }

    /// The program gets its stdin, stdout and stderr and no other descriptor of this process (`SpawnedProcess`
    /// closes them in the child: a descriptor opened without close-on-exec, or a pipe end of another program being
    /// started at the same moment, never reaches it).
    @Test func theProgramInheritsNoOtherDescriptor() async throws {
        let null = open("/dev/null", O_RDONLY)
        let stray = fcntl(null, F_DUPFD, 300)  // no close-on-exec; above what the shell uses for itself
        close(null)
        #expect(stray >= 300)
        defer { close(stray) }
        let program = ResidentProgram(
            command: ["/bin/sh", "-c", #"while read -r l; do echo $(ls /proc/$$/fd); done"#]) { _ in }
        let fds = text(try await program.request(Array("x".utf8), timeout: .seconds(10))).split(separator: " ")
        #expect(fds.contains("0") && fds.contains("1") && fds.contains("2"))
        #expect(!fds.contains(Substring(String(stray))), "inherited: \(fds)")
        await program.stop()
    }

    @Test func anIdleProgramIsStopped() async throws {
        let program = ResidentProgram(command: Self.echo, idleTimeout: .milliseconds(300)) { _ in }
        _ = try await program.request(Array("a".utf8), timeout: .seconds(10))
        #expect(await program.isRunning)
        let deadline = ContinuousClock.now + .seconds(10)
        while await program.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(await !program.isRunning)
        _ = try await program.request(Array("b".utf8), timeout: .seconds(10))
        #expect(await program.starts == 2)
        await program.stop()
    }
}
