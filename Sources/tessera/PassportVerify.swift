import ArgumentParser
import Documents
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

extension Passport {
    /// `tessera passport verify EVIDENCE.json`: the daemon's checks, offline, on a read's evidence.
    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-check the evidence of a read offline (documents.read with evidence: true).",
            discussion: """
                EVIDENCE.json is the `evidence` object of a documents.read result (or the whole result). Passive \
                authentication against --csca (with --master-list-trust and --crl as tesserad takes them) and active \
                authentication from the recorded challenge and signature, EF.CardSecurity's signature and chain, and \
                PACE-CAM from the recorded values run with the daemon's code. Prints the verdict JSON; exit status 0 when authentic, 1 otherwise. \
                What re-checks offline is listed under `offline.reverified`: passive authentication, EF.CardSecurity, \
                and an active authentication signature only over the nonce given with --aa-challenge (the one the \
                read was given; another recorded challenge makes it invalid). Chip Authentication and PACE-CAM, and \
                active authentication without --aa-challenge, are the reader's observation (`offline.readerObserved`): \
                online proofs a record cannot repeat.
                """)
        @Argument(help: "Evidence JSON file.") var evidence: String
        @Option(help: ArgumentHelp("CSCA certificate, directory or master list (repeatable).", valueName: "PATH"))
        var csca: [String] = []
        @Option(
            name: .customLong("master-list-trust"),
            help: ArgumentHelp("Anchor for master lists (repeatable).", valueName: "CERT"))
        var masterListTrust: [String] = []
        @Option(help: ArgumentHelp("CRL file or directory (repeatable).", valueName: "PATH")) var crl: [String] = []
        @Flag(
            name: .customLong("allow-clonable"),
            help: "Accept a chip without anti-clone support (no DG15, no PACE-CAM) as authentic.")
        var allowClonable = false
        @Option(
            name: .customLong("aa-challenge"),
            help: ArgumentHelp(
                "The active authentication nonce (base64url) you gave the read (aaChallenge).", valueName: "B64URL"))
        var aaChallenge: String?

        func run() async throws {
            do {
                guard let data = FileManager.default.contents(atPath: evidence) else {
                    throw TesseraError(.storageError, "cannot read \(evidence)")
                }
                let parsed = try DocumentEvidence(json: try JSONValue.parse([UInt8](data)))
                var nonce: [UInt8]?
                if let aaChallenge {
                    guard let b = Base64URL.decode(aaChallenge), b.count == 8 else {
                        throw TesseraError(.invalidInput, "--aa-challenge must be 8 bytes in base64url")
                    }
                    nonce = b
                }
                let store = try DocumentService.trustStore(paths: csca, masterListTrust: masterListTrust, crls: crl)
                let result = parsed.verificationJSON(
                    trustStore: store, allowClonable: allowClonable, aaChallenge: nonce)
                print(String(decoding: result.serialized(), as: UTF8.self))
                if result["verdict"]?.stringValue != "authentic" { throw ExitCode(1) }
            } catch let error as TesseraError {
                OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
                throw ExitCode(2)
            }
        }
    }
}
