import ArgumentParser
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera mdoc …`: ISO/IEC 18013-5 mobile documents.
struct MDocCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mdoc",
        abstract: "Mobile documents (ISO/IEC 18013-5 mdoc, e.g. mobile driving licences).",
        subcommands: [
            Read.self, Verify.self, CreateDeviceKey.self, Register.self, Registrations.self, Remove.self, Present.self,
            Respond.self, Approve.self,
        ])

    /// `tessera mdoc verify RESPONSE.cbor --iaca PATH`: the reader's checks, offline.
    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify a DeviceResponse offline against IACA trust anchors.",
            discussion: """
                RESPONSE.cbor is a DeviceResponse (binary CBOR). Checks, per document: issuerAuth (COSE_Sign1) by the \
                document signer of its x5chain, the document signer issued by an --iaca anchor, the MSO digest of every \
                returned element, the MSO validity against now (or --at), the docType, and DeviceAuth (deviceSignature) \
                over DeviceAuthentication with the SessionTranscript of --session-transcript (SessionTranscriptBytes, \
                binary CBOR). Without --session-transcript device authentication is not checked (verdict unverified). \
                deviceMac needs the reader's ephemeral key and is only checked by a live read. Prints \
                {"documents": [...]}; exit status 0 when every document is authentic, 1 otherwise, 2 on an error.
                """)
        @Argument(help: ArgumentHelp("DeviceResponse, binary CBOR.", valueName: "RESPONSE.cbor")) var response: String
        @Option(help: ArgumentHelp("IACA certificate file, PEM (one or more) or DER (repeatable).", valueName: "PATH"))
        var iaca: [String] = []
        @Option(
            name: .customLong("session-transcript"),
            help: ArgumentHelp("SessionTranscriptBytes, binary CBOR.", valueName: "FILE"))
        var sessionTranscript: String?
        @Option(
            name: .customLong("doc-type"),
            help: ArgumentHelp("The docType every document must have.", valueName: "TYPE"))
        var docType: String?
        @Option(
            help: ArgumentHelp(
                "Check validity at this time instead of now (RFC 3339, e.g. 2020-12-01T00:00:00Z).", valueName: "TIME"))
        var at: String?

        func run() async throws {
            do {
                let bytes = try MDocFiles.read(response)
                let anchors = try iaca.flatMap { path throws(TesseraError) in try MDocFiles.certificates(path) }
                let transcript = try sessionTranscript.map { p throws(TesseraError) in
                    try SessionTranscript(taggedBytes: try MDocFiles.read(p))
                }
                var now = Date()
                if let at {
                    guard let date = MDocDate.parse(at) else { throw ValidationError("--at must be RFC 3339") }
                    now = date
                }
                let parsed = try DeviceResponse(bytes: bytes)
                let results = MDocVerifier.verify(
                    response: parsed, session: transcript.map { .init(transcript: $0) },
                    iacas: anchors, now: now, expectedDocType: docType)
                let out: JSONValue = [
                    "status": .number(Double(parsed.status)), "documents": .array(results.map(\.json)),
                ]
                print(String(decoding: out.serialized(), as: UTF8.self))
                if results.isEmpty || results.contains(where: { $0.verdict != .authentic }) { throw ExitCode(1) }
            } catch let error as TesseraError {
                throw LabOutput.fail(error, status: 2)
            }
        }
    }
}

/// File helpers of the mdoc commands.
enum MDocFiles {
    static func read(_ path: String) throws(TesseraError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError(.storageError, "cannot read \(path)")
        }
        return [UInt8](data)
    }

    static func write(_ bytes: [UInt8], to path: String, private isPrivate: Bool = false) throws(TesseraError) {
        guard
            FileManager.default.createFile(
                atPath: path, contents: Data(bytes),
                attributes: [.posixPermissions: isPrivate ? 0o600 : 0o644])
        else { throw TesseraError(.storageError, "cannot write \(path)") }
    }

    /// Every certificate of a PEM file, or the one DER certificate of a binary file.
    static func certificates(_ path: String) throws(TesseraError) -> [ParsedCertificate] {
        let bytes = try read(path)
        let pem = PEM.blocks(bytes, label: "CERTIFICATE")
        if pem.isEmpty { return [try ParsedCertificate(der: bytes)] }
        return try pem.map { der throws(TesseraError) in try ParsedCertificate(der: der) }
    }
}
