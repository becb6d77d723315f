import ArgumentParser
import FoundationEssentials
import MDoc
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab make-mdoc-reader DIR`: a test reader root and a reader authentication certificate it issued.
struct LabMakeMDocReader: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-mdoc-reader",
        abstract: "Make a test mdoc reader root and a reader certificate it issued (readerAuth), for the holder.",
        discussion: """
            Writes to DIR (created if needed): root.pem (the reader root a holding tesserad trusts: \
            --mdoc-reader-root), root-key.pem, reader.pem and reader-key.pem (what a reading tesserad signs its \
            requests with: --mdoc-reader-cert, --mdoc-reader-key; EKU 1.0.18013.5.1.6) and authority-key-id (the \
            root's subject key identifier, hex: what a registration lists in supportedAuthorityKeyIdentifiers, \
            `tessera lab make-mdoc --authority-key-id`). Prints the files and the options that use them; with \
            --json {root, rootKey, reader, readerKey, authorityKeyIdentifier}. P-256; the reader certificate is \
            valid for 90 days, the root for 9 years. Lab use only: the keys are files.

            EXAMPLES
              tessera lab make-mdoc-reader /tmp/reader
              tesserad --mdoc-reader-root /tmp/reader/root.pem --mdoc-reader-key /tmp/reader/reader-key.pem --mdoc-reader-cert /tmp/reader/reader.pem …
              tessera lab make-mdoc /tmp/mdl --token … --register --authority-key-id "$(cat /tmp/reader/authority-key-id)"
            """)

    @Argument(help: ArgumentHelp("Output directory.", valueName: "DIR")) var directory: String
    @Flag(help: "Print the paths and the key identifier as JSON.") var json = false

    func run() async throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw ValidationError("cannot create \(directory)") }
        func path(_ name: String) -> String { FilePaths.join(directory, name) }
        do {
            let pki = try MDocIssuer.testReaderRoot()
            guard let keyID = pki.root.certificate.subjectKeyIdentifier else {
                throw TesseraError(.internalError, "the reader root has no subject key identifier")
            }
            let hex = Hex.encode(keyID)
            try MDocFiles.write(Array(pki.root.certificatePEM.utf8), to: path("root.pem"))
            try MDocFiles.write(Array(pki.root.privateKeyPEM.utf8), to: path("root-key.pem"), private: true)
            try MDocFiles.write(Array(pki.reader.certificatePEM.utf8), to: path("reader.pem"))
            try MDocFiles.write(Array(pki.reader.privateKeyPEM.utf8), to: path("reader-key.pem"), private: true)
            try MDocFiles.write(Array((hex + "\n").utf8), to: path("authority-key-id"))
            if json {
                let out: JSONValue = [
                    "root": .string(path("root.pem")), "rootKey": .string(path("root-key.pem")),
                    "reader": .string(path("reader.pem")), "readerKey": .string(path("reader-key.pem")),
                    "authorityKeyIdentifier": .string(hex),
                ]
                print(String(decoding: out.serialized(), as: UTF8.self))
                return
            }
            print(
                """
                reader root          \(path("root.pem")) (authority key identifier \(hex))
                reader certificate   \(path("reader.pem")), key \(path("reader-key.pem"))
                holder trusts it:    tesserad --mdoc-reader-root \(path("root.pem"))
                reader signs with:   tesserad --mdoc-reader-key \(path("reader-key.pem")) --mdoc-reader-cert \(path("reader.pem"))
                registration lists:  tessera lab make-mdoc DIR --token TOKEN --register --authority-key-id \(hex)
                """)
        } catch let error as TesseraError {
            throw LabOutput.fail(error, status: 1)
        }
    }
}
