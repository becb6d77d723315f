import CredentialStore
import FoundationEssentials
import TesseraCore
import TesseraTestSupport
import Testing

@Suite struct DaemonSecretTests {
    func tempDirectory() throws -> String { Scratch.directory("secret") }

    @Test func createdOnceAs0600AndReadBackTheSame() throws {
        let dir = try tempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let first = try DaemonSecret.loadOrCreate(directory: dir)
        #expect(first.count == 32)
        let attributes = try FileManager.default.attributesOfItem(atPath: dir + "/daemon.secret")
        #expect(attributes[.posixPermissions] as? UInt == 0o600)
        #expect(try DaemonSecret.loadOrCreate(directory: dir) == first)
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["daemon.secret"])
        let other = try tempDirectory()
        defer { try? FileManager.default.removeItem(atPath: other) }
        #expect(try DaemonSecret.loadOrCreate(directory: other) != first)
    }

    @Test func refusesAFileOthersCanReadOrOfTheWrongSize() throws {
        let dir = try tempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/daemon.secret"
        #expect(
            FileManager.default.createFile(
                atPath: path, contents: Data(repeating: 7, count: 32),
                attributes: [.posixPermissions: 0o644]))
        let open = thrown { () throws(TesseraError) in try DaemonSecret.loadOrCreate(directory: dir) }
        #expect(open?.code == .storageError && open?.message.contains(path) == true)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(try DaemonSecret.loadOrCreate(directory: dir) == [UInt8](repeating: 7, count: 32))
        try Data(repeating: 7, count: 31).write(to: URL(fileURLWithPath: path))
        #expect(
            thrown { () throws(TesseraError) in try DaemonSecret.loadOrCreate(directory: dir) }?.code == .storageError)
    }

    @Test func refusesASymbolicLink() throws {
        let dir = try tempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let target = dir + "/elsewhere"
        #expect(
            FileManager.default.createFile(
                atPath: target, contents: Data(repeating: 1, count: 32),
                attributes: [.posixPermissions: 0o600]))
        try FileManager.default.createSymbolicLink(atPath: dir + "/daemon.secret", withDestinationPath: target)
        #expect(
            thrown { () throws(TesseraError) in try DaemonSecret.loadOrCreate(directory: dir) }?.code == .storageError)
    }

    func thrown(_ body: () throws(TesseraError) -> [UInt8]) -> TesseraError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }
}
