import FoundationEssentials
import TesseraRuntime
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `AtomicFile`: the file is replaced whole, with the mode asked for whatever the umask, and leaves no temp file.
struct AtomicFileTests {
    @Test func replacesAFileWholeWithItsModeAndLeavesNoTempFile() throws {
        let dir = Scratch.directory("atomic")
        #expect(throws: Never.self) {
            try AtomicFile.write([1, 2, 3], directory: dir, name: "latest", mode: 0o644).get()
        }
        #expect(throws: Never.self) { try AtomicFile.write([4, 5], directory: dir, name: "latest", mode: 0o644).get() }
        #expect(FileManager.default.contents(atPath: dir + "/latest") == Data([4, 5]))
        var st = stat()
        #expect(stat(dir + "/latest", &st) == 0)
        #expect(st.st_mode & 0o777 == 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["latest"])
    }

    /// A large file round-trips through `write` and `read` byte for byte; an empty one too; a missing one is nil.
    @Test func readReturnsWhatWriteWrote() throws {
        let dir = Scratch.directory("atomic-read")
        // Bytes that differ from their neighbours, so a chunk read twice or skipped shows.
        let large = (0..<3_000_001).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
        try AtomicFile.write(large, directory: dir, name: "large").get()
        #expect(AtomicFile.read(dir + "/large") == large)
        #expect(FileManager.default.contents(atPath: dir + "/large") == Data(large))
        try AtomicFile.write([], directory: dir, name: "empty").get()
        #expect(AtomicFile.read(dir + "/empty") == [])
        #expect(AtomicFile.read(dir + "/missing") == nil)
        #expect(AtomicFile.read(dir) == nil)
    }

    @Test func aDirectoryThatIsNotThereIsAFailureWithItsReason() {
        guard case .failure(let error) = AtomicFile.write([1], directory: "/nonexistent-tessera-dir", name: "x") else {
            Issue.record("a write into a missing directory succeeded")
            return
        }
        #expect(error.reason.contains("No such file"))
    }
}
