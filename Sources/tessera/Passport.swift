import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera passport …`: reading identity documents through the daemon.
struct Passport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read and verify e-passports and ID cards (ICAO 9303).",
        subcommands: [Read.self, Readers.self, Verify.self],
        aliases: ["documents"])

    struct Readers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the card readers the daemon sees (readers.list).")
        @OptionGroup var globals: GlobalOptions
        func run() async throws {
            try await globals.run("readers.list", [:]) { r in
                let list = r["readers"]?.arrayValue ?? []
                if list.isEmpty { return "no readers" }
                return list.map { rd in
                    "\(rd["name"]?.stringValue ?? "?")  [\(rd["stack"]?.stringValue ?? "")]  "
                        + (rd["cardPresent"]?.boolValue == true ? "card present" : "empty")
                }.joined(separator: "\n")
            }
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read a document's chip and verify it (documents.read).",
            discussion: """
                Unlocks the chip with the MRZ (--mrz, or --number/--birth/--expiry as printed on the data page) or with the 6-digit card access number (--can). The daemon runs PACE when the chip offers it and BAC otherwise, reads EF.COM, EF.SOD and every data group the SOD lists (showing the requested ones, default DG1 and DG2), checks passive authentication against its CSCA certificates (tesserad
                --csca), active authentication when the SOD lists DG15 and PACE-CAM when DG14 announces it.

                By default a summary is printed: the verdict (AUTHENTIC, NOT AUTHENTIC or UNVERIFIED) with its reason codes, holder, document, access protocol, each passive-authentication check (SOD signature, certificate chain, data group hashes), chip authenticity and active authentication. A chip without any anti-clone mechanism (no DG15, no PACE-CAM) is UNVERIFIED unless --allow-clonable. --json prints the documents.read result verbatim (docs/API.md). While reading, a progress bar is drawn on stderr when stderr is a terminal.

                EXIT STATUS
                  0  read (even when verification failed: see the verdict)
                  1  --save-photo or --save-evidence could not write its file
                  2  daemon error (NO_CARD, ACCESS_DENIED, CARD_REMOVED, ...), or --save-photo without a face image
                  3  daemon unreachable
                  64 usage error

                EXAMPLES
                  tessera passport read --mrz $'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\\nL898902C36UTO7408122F1204159ZE184226B<<<<<10'
                  tessera passport read --number L898902C3 --birth 740812 --expiry 120415 --save-photo face.jpg
                  tessera passport read --can 123456 --reader 'Tessera VPCD 00 00' --data-groups DG1,DG2,DG11 --json
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(help: ArgumentHelp("The whole MRZ (lines separated by newlines).", valueName: "TEXT"))
        var mrz: String?
        @Option(name: .customLong("number"), help: ArgumentHelp("Document number as printed.", valueName: "N"))
        var documentNumber: String?
        @Option(help: ArgumentHelp("Date of birth, YYMMDD.", valueName: "YYMMDD"))
        var birth: String?
        @Option(help: ArgumentHelp("Date of expiry, YYMMDD.", valueName: "YYMMDD"))
        var expiry: String?
        @Option(help: ArgumentHelp("Card access number (PACE only).", valueName: "NNNNNN"))
        var can: String?
        @Option(
            help: ArgumentHelp(
                "Reader name (see `tessera passport readers`); default: the first reader with a card.",
                valueName: "NAME"))
        var reader: String?
        @Option(
            name: .customLong("data-groups"),
            help: ArgumentHelp(
                "Comma-separated data groups to read, e.g. DG1,DG2,DG11 (default DG1,DG2).", valueName: "LIST"))
        var dataGroups: String?
        @Flag(name: .customLong("no-verify"), help: "Skip passive and active authentication (EF.SOD is not read).")
        var noVerify = false
        @Flag(
            name: .customLong("extended-length"), help: "Read with extended-length APDUs when the card supports them.")
        var extendedLength = false
        @Flag(
            name: .customLong("allow-clonable"),
            help: "Accept a chip without anti-clone support (no DG15, no PACE-CAM) as authentic.")
        var allowClonable = false
        @Option(
            name: .customLong("save-photo"),
            help: ArgumentHelp(
                "Write the first face image from DG2 to FILE (JPEG or JPEG 2000 as stored).", valueName: "FILE"))
        var savePhoto: String?
        @Option(
            name: .customLong("save-evidence"),
            help: ArgumentHelp(
                "Ask for the read's evidence and write it to FILE (JSON) for `tessera documents verify`.",
                valueName: "FILE"))
        var saveEvidence: String?
        @Option(
            name: .customLong("aa-challenge"),
            help: ArgumentHelp(
                "Active authentication challenge, 8 bytes base64url (default random).", valueName: "B64URL"))
        var aaChallenge: String?

        func validate() throws {
            let keys = [mrz != nil, documentNumber != nil || birth != nil || expiry != nil, can != nil].filter { $0 }
                .count
            guard keys == 1 else {
                throw ValidationError("give exactly one of --mrz, --number/--birth/--expiry, or --can")
            }
            if documentNumber != nil || birth != nil || expiry != nil,
                documentNumber == nil || birth == nil || expiry == nil
            {
                throw ValidationError("--number, --birth and --expiry go together")
            }
        }

        var params: JSONValue {
            var p: [String: JSONValue] = [:]
            if let mrz { p["mrz"] = .string(mrz) }
            if let documentNumber, let birth, let expiry {
                p["documentNumber"] = .string(documentNumber)
                p["dateOfBirth"] = .string(birth)
                p["dateOfExpiry"] = .string(expiry)
            }
            if let can { p["can"] = .string(can) }
            if let reader { p["reader"] = .string(reader) }
            if let dataGroups {
                p["dataGroups"] = .array(
                    dataGroups.split(separator: ",").map {
                        .string($0.trimmingWhitespace().uppercased())
                    })
            }
            if noVerify { p["verify"] = false }
            if extendedLength { p["extendedLength"] = true }
            if allowClonable { p["allowClonable"] = true }
            if saveEvidence != nil { p["evidence"] = true }
            if let aaChallenge { p["aaChallenge"] = .string(aaChallenge) }
            return .object(p)
        }

        func run() async throws {
            let result: JSONValue
            do throws(TesseraError) {
                let client = try await RPCClient.connect(path: globals.socketPath)
                defer { Task { await client.close() } }
                result = try await ProgressRenderer(output: .standardError, linesWhenNotTerminal: false).call(
                    client, "documents.read", params)
            } catch {
                OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
                throw ExitCode(error.code == .daemonUnavailable ? 3 : 2)
            }
            if let savePhoto {
                guard let text = result["faceImages"]?.arrayValue?.first?["data"]?.stringValue,
                    let bytes = Base64URL.decode(text)
                else {
                    OpenFile.standardError.write("error: the document returned no face image (read DG2)\n")
                    throw ExitCode(2)
                }
                do { try Data(bytes).write(to: URL(fileURLWithPath: savePhoto)) } catch {
                    OpenFile.standardError.write(
                        "error: cannot write \(savePhoto): \(TesseraError.reason(of: error))\n")
                    throw ExitCode(1)
                }
            }
            if let saveEvidence {
                do {
                    try Data((result["evidence"] ?? .null).prettyText().utf8).write(
                        to: URL(fileURLWithPath: saveEvidence))
                } catch {
                    OpenFile.standardError.write(
                        "error: cannot write \(saveEvidence): \(TesseraError.reason(of: error))\n")
                    throw ExitCode(1)
                }
            }
            if globals.json {
                print(String(decoding: result.serialized(), as: UTF8.self))
            } else {
                print(PassportSummary.render(result, savedPhoto: savePhoto))
            }
        }
    }
}

/// The human rendering of a `documents.read` result.
enum PassportSummary {
    static func render(_ r: JSONValue, savedPhoto: String?) -> String {
        var lines: [String] = []
        if let verdict = r["verdict"]?.stringValue {
            let shown =
                ["authentic": "AUTHENTIC", "notAuthentic": "NOT AUTHENTIC", "unverified": "UNVERIFIED"][verdict]
                ?? verdict
            let reasons = (r["reasons"]?.arrayValue ?? []).compactMap(\.stringValue)
            lines.append(
                "Verdict:          \(shown)" + (reasons.isEmpty ? "" : " (\(reasons.joined(separator: ", ")))"))
        }
        if let m = r["mrz"], !m.isNull {
            let name = [m["primaryIdentifier"]?.stringValue, m["secondaryIdentifier"]?.stringValue]
                .compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: ", ")
            lines.append("Name:             \(name)")
            lines.append(
                "Document:         \(m["documentCode"]?.stringValue ?? "?") \(m["documentNumber"]?.stringValue ?? "?")"
                    + " issued by \(m["issuingState"]?.stringValue ?? "?")")
            lines.append(
                "Nationality:      \(m["nationality"]?.stringValue ?? "?")   Sex: \(m["sex"]?.stringValue ?? "?")")
            lines.append("Date of birth:    \(m["dateOfBirth"]?.stringValue ?? "?")")
            lines.append("Date of expiry:   \(m["dateOfExpiry"]?.stringValue ?? "?")")
        } else {
            lines.append("MRZ:              not read")
        }
        let mapping = r["paceMapping"]?.stringValue.map { "-\($0)" } ?? ""
        lines.append(
            "Access protocol:  \(r["accessProtocol"]?.stringValue ?? "?")\(mapping) (reader \(r["reader"]?.stringValue ?? "?"))"
        )
        // Every file read (the returned ones and those read only to check their hashes, listed below).
        let read = (r["filesRead"]?.arrayValue ?? []).compactMap(\.stringValue)
        let groups = read.isEmpty ? Array((r["dataGroups"]?.objectValue ?? [:]).keys) : read
        lines.append("Files read:       \(groups.sorted { order($0) < order($1) }.joined(separator: " "))")
        let faces = r["faceImages"]?.arrayValue ?? []
        if let f = faces.first {
            var text = "\(faces.count) face image(s), \(f["mimeType"]?.stringValue ?? "?")"
            if let w = f["width"]?.intValue, let h = f["height"]?.intValue { text += " \(w)x\(h)" }
            if let savedPhoto { text += ", saved to \(savedPhoto)" }
            lines.append("Photo:            \(text)")
        }
        if let pa = r["passiveAuthentication"] {
            lines.append("Passive authentication: \(pa["status"]?.stringValue?.uppercased() ?? "?")")
            lines.append("  SOD signature:      \(pa["signature"]?.stringValue ?? "?")")
            lines.append(
                "  certificate chain:  \(pa["certificateChain"]?.stringValue ?? "?")"
                    + (pa["trustAnchor"]?.stringValue.map { " (\($0))" } ?? ""))
            if let revocation = pa["revocation"]?.stringValue {
                lines.append(
                    "  revocation:         \(revocation)"
                        + (pa["crlStale"]?.boolValue == true ? " (CRL past nextUpdate)" : ""))
            }
            let hashes = pa["dataGroupHashes"]?.objectValue ?? [:]
            for k in hashes.keys.sorted(by: { order($0) < order($1) }) {
                lines.append(
                    "  \(k) hash:" + String(repeating: " ", count: max(1, 13 - k.count))
                        + (hashes[k]?.stringValue ?? "?"))
            }
            if let reason = pa["reason"]?.stringValue { lines.append("  reason: \(reason)") }
        }
        if let missing = r["passiveAuthentication"]?["missingDataGroups"]?.arrayValue, !missing.isEmpty {
            lines.append(
                "  missing:            " + missing.compactMap { $0.intValue.map { "DG\($0)" } }.joined(separator: " "))
        }
        if let chip = r["chipAuthenticity"]?.stringValue { lines.append("Chip authenticity: \(chip)") }
        if let aa = r["activeAuthentication"] {
            lines.append(
                "Active authentication: \(aa["status"]?.stringValue?.uppercased() ?? "?")"
                    + (aa["reason"]?.stringValue.map { " (\($0))" } ?? ""))
        }
        if let ca = r["chipAuthentication"] {
            lines.append(
                "Chip authentication (\(ca["mechanism"]?.stringValue ?? "PACE-CAM")): \(ca["status"]?.stringValue?.uppercased() ?? "?")"
                    + (ca["reason"]?.stringValue.map { " (\($0))" } ?? ""))
        }
        if let cs = r["cardSecurity"], cs["status"]?.stringValue != "notPresent" {
            lines.append(
                "EF.CardSecurity:  \(cs["status"]?.stringValue?.uppercased() ?? "?")"
                    + (cs["reason"]?.stringValue.map { " (\($0))" } ?? ""))
        }
        if r["paceFallback"]?.boolValue == true {
            lines.append("PACE fallback:    BAC was used (\(r["paceFailure"]?.stringValue ?? "PACE failed"))")
        }
        for w in r["workarounds"]?.arrayValue ?? [] { lines.append("workaround: \(w.stringValue ?? "")") }
        for w in r["warnings"]?.arrayValue ?? [] { lines.append("warning: \(w.stringValue ?? "")") }
        if let s = r["stats"] {
            lines.append(
                "Stats:            \(s["apdus"]?.intValue ?? 0) APDUs, \(s["bytes"]?.intValue ?? 0) bytes,"
                    + " \(s["durationMs"]?.doubleValue.map { String(printf: "%.0f", $0) } ?? "?") ms")
        }
        return lines.joined(separator: "\n")
    }

    static func order(_ name: String) -> Int {
        if name == "COM" { return 0 }
        if name == "SOD" { return 100 }
        return Int(name.dropFirst(2)) ?? 50
    }
}
