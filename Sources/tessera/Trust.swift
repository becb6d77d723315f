import ArgumentParser
import TesseraCore

struct Trust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "CSCA trust anchors and CRLs of passive authentication.",
        discussion: """
            The daemon loads them from tesserad --csca (certificates, directories, ICAO master lists checked against \
            --master-list-trust) and --crl. `reload` (admin; or SIGHUP to tesserad) reads every file again and swaps \
            the whole set in; when any file is bad the anchors in force stay and the error names the file.
            """,
        subcommands: [List.self, Reload.self])

    static func describe(_ r: JSONValue) -> String {
        var lines = ["\(r["anchorCount"]?.intValue ?? 0) anchor(s), loaded \(r["loadedAt"]?.stringValue ?? "?")"]
        for a in r["anchors"]?.arrayValue ?? [] {
            lines.append("\(a["country"]?.stringValue ?? "??")  \(a["count"]?.intValue ?? 0) anchor(s)")
            for c in a["certificates"]?.arrayValue ?? [] {
                lines.append(
                    "  \(c["subject"]?.stringValue ?? "?")  until \(c["notAfter"]?.stringValue ?? "?")"
                        + "  \(c["validity"]?.stringValue ?? "?")" + (c["source"]?.stringValue.map { "  \($0)" } ?? ""))
            }
        }
        let crls = r["crls"]?.arrayValue ?? []
        if !crls.isEmpty { lines.append("CRLs:") }
        for c in crls {
            lines.append(
                "  \(c["issuer"]?.stringValue ?? "?")  \(c["thisUpdate"]?.stringValue ?? "?") → "
                    + "\(c["nextUpdate"]?.stringValue ?? "-")" + (c["stale"]?.boolValue == true ? "  STALE" : "")
                    + "  \(c["revoked"]?.intValue ?? 0) revoked" + (c["source"]?.stringValue.map { "  \($0)" } ?? ""))
        }
        let lists = r["masterLists"]?.arrayValue ?? []
        if !lists.isEmpty { lines.append("Master lists:") }
        for l in lists {
            lines.append(
                "  \(l["count"]?.intValue ?? 0) certificate(s)  signed \(l["signedAt"]?.stringValue ?? "?") by "
                    + "\(l["signer"]?.stringValue ?? "?") (until \(l["signerNotAfter"]?.stringValue ?? "?"))"
                    + (l["stale"]?.boolValue == true ? "  STALE" : "")
                    + (l["source"]?.stringValue.map { "  \($0)" } ?? ""))
        }
        let missing = r["unanchoredIssuingStates"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if !missing.isEmpty { lines.append("issuing states read without an anchor: " + missing.joined(separator: " ")) }
        return lines.joined(separator: "\n")
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Anchors per country, CRLs, issuing states without an anchor (trust.status).")
        @OptionGroup var globals: GlobalOptions
        func run() async throws {
            try await globals.run("trust.status", [:]) { Trust.describe($0) }
        }
    }

    struct Reload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Reload anchors and CRLs from the daemon's files, atomically (trust.reload, admin).")
        @OptionGroup var globals: GlobalOptions
        func run() async throws {
            try await globals.run("trust.reload", [:]) { "reloaded\n" + Trust.describe($0) }
        }
    }
}
