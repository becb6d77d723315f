import FoundationEssentials
import TesseraCore
import Testing

@testable import Enrollment

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct OTPNotifierTests {
    /// The drop file is written under an unpredictable temp name (issue #27): a file or directory already at
    /// the name the old code used does not stop the delivery, and the code arrives with mode 0600 and no temp
    /// file left behind.
    @Test func dropIgnoresAPredictableTempName() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/tessera-otp-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/.e1-otp-1.tmp", withIntermediateDirectories: true)
        let message: JSONValue = ["type": "otp", "code": "123456"]
        try OTPNotifier.drop(message, directory: dir, name: "e1-otp-1")
        let final = dir + "/e1-otp-1.json"
        #expect(FileManager.default.contents(atPath: final) == Data(message.serialized()))
        var st = stat()
        #expect(stat(final, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600)
        // A second code for the same name replaces the first.
        let second: JSONValue = ["type": "otp", "code": "654321"]
        try OTPNotifier.drop(second, directory: dir, name: "e1-otp-1")
        #expect(FileManager.default.contents(atPath: final) == Data(second.serialized()))
        let left = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        #expect(left == [".e1-otp-1.tmp", "e1-otp-1.json"])
    }
}
