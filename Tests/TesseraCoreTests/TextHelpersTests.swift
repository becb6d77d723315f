import FoundationEssentials
import TesseraCore
import Testing

/// The trim and the path helpers that replace Foundation's `trimmingCharacters(in:)` and `NSString` path methods,
/// with the results Foundation gave.
@Suite struct TextHelpersTests {
    @Test func trimsWhitespaceAndLineBreaksAtBothEndsOnly() {
        #expect(" \t 123456 \r\n".trimmingWhitespace() == "123456")
        #expect("a b\u{00A0}".trimmingWhitespace() == "a b")
        #expect("  inner  space  ".trimmingWhitespace() == "inner  space")
        #expect(" \n\t ".trimmingWhitespace() == "")
        #expect("".trimmingWhitespace() == "")
        #expect("x".trimmingWhitespace() == "x")
        let line: Substring = "--  yes \n--".dropFirst(2).dropLast(2)
        #expect(line.trimmingWhitespace() == "yes")
    }

    @Test func trimsWhatThePredicateAccepts() {
        #expect("==abc=de==".trimming(where: { $0 == "=" }) == "abc=de")
        #expect("====".trimming(where: { $0 == "=" }) == "")
        #expect("abc".trimming(where: { $0 == "=" }) == "abc")
    }

    @Test func joinsPathsWithOneSlash() {
        #expect(FilePaths.join("/var/lib", "tessera") == "/var/lib/tessera")
        #expect(FilePaths.join("/var/lib/", "tessera") == "/var/lib/tessera")
        #expect(FilePaths.join("/var/lib//", "/tessera") == "/var/lib/tessera")
        #expect(FilePaths.join("/", "etc") == "/etc")
        #expect(FilePaths.join("", "etc") == "etc")
        #expect(FilePaths.join("a", "b/c") == "a/b/c")
    }

    @Test func splitsAPathIntoItsDirectoryAndName() {
        #expect(FilePaths.directory(of: "/run/tessera/pcscd.comm") == "/run/tessera")
        #expect(FilePaths.directory(of: "/run/tessera/") == "/run")
        #expect(FilePaths.directory(of: "/run") == "/")
        #expect(FilePaths.directory(of: "/") == "/")
        #expect(FilePaths.directory(of: "tessera.json") == "")
        #expect(FilePaths.directory(of: "etc/tessera.json") == "etc")
        #expect(FilePaths.name(of: "/run/tessera/pcscd.comm") == "pcscd.comm")
        #expect(FilePaths.name(of: "/run/tessera/") == "tessera")
        #expect(FilePaths.name(of: "/") == "/")
        #expect(FilePaths.name(of: "libsofthsm2.so") == "libsofthsm2.so")
        #expect(FilePaths.name(of: "") == "")
    }

    /// What `localizedDescription` gave at the call sites: a readable reason, not the error's dump.
    @Test func errorsHaveAShortReason() {
        #expect(TesseraError.reason(of: TesseraError(.invalidInput, "bad PIN")) == "bad PIN")
        #expect(TesseraError.reason(of: POSIXError(.EACCES)) == "Permission denied")
        do {
            try Data([1]).write(to: URL(fileURLWithPath: "/nonexistent-tessera/dir/file"))
            Issue.record("the write succeeded")
        } catch {
            #expect(TesseraError.reason(of: error) == "No such file or directory")
        }
        do {
            try FileManager.default.createDirectory(atPath: "/proc/tessera/x", withIntermediateDirectories: true)
            Issue.record("the directory was created")
        } catch {
            #expect(TesseraError.reason(of: error) == "No such file or directory")
        }
    }
}
