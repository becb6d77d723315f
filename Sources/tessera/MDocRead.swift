import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

extension MDocCommand {
    /// `tessera mdoc read`: the daemon's `mdoc.read`.
    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read a mobile document over NFC and verify it (mdoc.read).",
            discussion: """
                The daemon reads the Handover Select from the phone or card in the reader (NFC static handover), \
                establishes the ISO/IEC 18013-5 session, requests the elements (default: portrait, names, birth date, \
                document number, expiry, issuing country of org.iso.18013.5.1) and verifies the response against its \
                IACA anchors (tesserad --iaca). Prints the verdict with its reasons and the elements; --json prints \
                the result verbatim (docs/API.md).

                EXIT STATUS
                  0 read (even when verification failed: see the verdict), 2 daemon error, 3 daemon unreachable.

                EXAMPLES
                  tessera mdoc read --reader 'Virtual PCD 00 00' --save-photo face.jpg
                  tessera mdoc read --elements family_name,age_over_18 --json
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(help: ArgumentHelp("Reader name; default: the first reader with a card.", valueName: "NAME"))
        var reader: String?
        @Option(
            help: ArgumentHelp("Comma-separated elements (identifier, or namespace/identifier).", valueName: "LIST"))
        var elements: String?
        @Option(name: .customLong("save-photo"), help: ArgumentHelp("Write the portrait to FILE.", valueName: "FILE"))
        var savePhoto: String?
        @Flag(name: .customLong("no-extended-length"), help: "Use short APDUs only (chained ENVELOPE, GET RESPONSE).")
        var noExtendedLength = false

        func run() async throws {
            var params: [String: JSONValue] = [:]
            if let reader { params["reader"] = .string(reader) }
            if let elements {
                params["elements"] = .array(
                    elements.split(separator: ",").map { .string($0.trimmingWhitespace()) })
            }
            if noExtendedLength { params["extendedLength"] = false }
            let result: JSONValue
            do throws(TesseraError) {
                let client = try await RPCClient.connect(path: globals.socketPath)
                defer { Task { await client.close() } }
                result = try await ProgressRenderer(output: .standardError, linesWhenNotTerminal: false).call(
                    client, "mdoc.read", .object(params), progress: "mdoc.progress")
            } catch {
                OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
                throw ExitCode(error.code == .daemonUnavailable ? 3 : 2)
            }
            let first = result["documents"]?.arrayValue?.first
            if let savePhoto {
                guard let text = first?["elements"]?["org.iso.18013.5.1"]?["portrait"]?.stringValue,
                    let bytes = Base64URL.decode(text)
                else {
                    OpenFile.standardError.write("error: the response has no portrait\n")
                    throw ExitCode(2)
                }
                guard FileManager.default.createFile(atPath: savePhoto, contents: Data(bytes)) else {
                    OpenFile.standardError.write("error: cannot write \(savePhoto)\n")
                    throw ExitCode(2)
                }
            }
            if globals.json {
                print(String(decoding: result.serialized(), as: UTF8.self))
                return
            }
            for doc in result["documents"]?.arrayValue ?? [] {
                let verdict = doc["verdict"]?.stringValue ?? "?"
                let reasons = (doc["reasons"]?.arrayValue ?? []).compactMap(\.stringValue)
                print(
                    "\(doc["docType"]?.stringValue ?? "?"): \(verdict)\(reasons.isEmpty ? "" : " (\(reasons.joined(separator: ", ")))")"
                )
                for (ns, values) in (doc["elements"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                    for (id, value) in (values.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                        let shown =
                            id == "portrait"
                            ? "\(Base64URL.decode(value.stringValue ?? "")?.count ?? 0) bytes"
                            : String(decoding: value.serialized(), as: UTF8.self)
                        print("  \(ns)/\(id): \(shown)")
                    }
                }
            }
            if result["documents"]?.arrayValue?.isEmpty ?? true {
                print("no document returned (status \(result["status"]?.intValue ?? -1))")
            }
        }
    }
}
