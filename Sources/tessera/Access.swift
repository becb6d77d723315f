import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera access check|watch|issue|register|status|publish`: badges at the door (docs/ACCESS.md).
struct AccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "Check PIV badges at a door (SP 800-116 PKI-CAK), watch readers, issue and register badges.",
        discussion: """
            The daemon checks the card's Card Authentication key with a fresh challenge, validates its certificate to the accessControl.anchors (validity, CRLs, EKU), checks the CHUID's signature, expiration and identifiers, and the badge's lifecycle state (suspend, resume and deactivate a badge with `tessera credentials`, the badge id is its credential id). See docs/ACCESS.md.

            EXAMPLES
              tessera access check
              tessera access check --reader "Tessera VPCD 00 01"
              tessera access check --door server-room
              tessera access check --mode auth --pin-stdin
              tessera access watch --count 1
              tessera access issue --holder alice --auth-key
              tessera access register --holder bob
              tessera access status
              tessera access publish
            """,
        subcommands: [Check.self, Watch.self, Issue.self, Register.self, Status.self, Publish.self])

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the badge on a reader once (access.check); exit status 0 when granted, 1 when denied.",
            discussion: """
                Prints the decision: granted or denied, the reasons (stable codes such as CAK_SIGNATURE_INVALID, CERT_REVOKED, CHUID_MISMATCH, BADGE_SUSPENDED, DOOR_NOT_ALLOWED), the cardholder and the badge id. A reader of a door (accessControl.doors) is checked under that door's rule and mode and needs the `door` permission; a reader of no door gives a decision that opens nothing. With --mode auth the PIV Authentication key is used after the cardholder's PIN (two factors); the PIN rules apply (final-try guard, back-off).

                EXAMPLES
                  tessera access check
                  tessera access check --reader "Tessera VPCD 00 00" --mode auth --pin 123456
                  tessera --json access check --door server-room
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(help: "Reader name (see `tessera passport readers`; default: the first reader holding a card).")
        var reader: String?
        @Option(
            help: """
                cak: the Card Authentication key, no PIN; auth: the PIV Authentication key after the PIN (default: the \
                door's mode, else cak).
                """)
        var mode: String?
        @Option(help: "Check on this door's readers (accessControl.doors); it must be the reader's own door.")
        var door: String?
        @OptionGroup var pin: PINOptions

        func run() async throws {
            var p: [String: JSONValue] = [:]
            if let mode { p["mode"] = .string(mode) }
            if let reader { p["reader"] = .string(reader) }
            if let door { p["door"] = .string(door) }
            if let pin = try await pin.value() { p["pin"] = .string(pin) }
            let result = try await globals.call("access.check", .object(p), pin: pin)
            if globals.json {
                print(String(decoding: result.serialized(), as: UTF8.self))
            } else {
                print(AccessText.decision(result))
            }
            if result["decision"]?.stringValue != "granted" { throw ExitCode(1) }
        }
    }

    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check every badge presented on the readers (access.watch), one decision per line.",
            discussion: """
                Runs until interrupted, or until --count decisions were made. Each card put on a reader is checked once (PKI-CAK, no PIN) under the rule of the reader's door; with --json each decision is printed as one JSON line. A door controller runs this (it needs the `door` permission); the grantCommand of the door drives a relay on each grant.

                EXAMPLES
                  tessera access watch
                  tessera access watch --door server-room --json
                  tessera access watch --count 1
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(
            help: """
                A reader to watch (repeatable; default: --door's readers, else accessControl.readers, else the doors' \
                readers, else every reader).
                """)
        var reader: [String] = []
        @Option(help: "Watch this door's readers (accessControl.doors).")
        var door: String?
        @Option(help: "Stop after this many decisions.")
        var count: Int?

        func run() async throws {
            var p: [String: JSONValue] = [:]
            if !reader.isEmpty { p["readers"] = .array(reader.map { .string($0) }) }
            if let door { p["door"] = .string(door) }
            if let count { p["count"] = .number(Double(count)) }
            let json = globals.json
            do {
                let client = try await RPCClient.connect(path: globals.socketPath)
                defer { Task { await client.close() } }
                let printer = Task {
                    for await n in client.notifications where n.method == "access.decision" {
                        let line =
                            json ? String(decoding: n.params.serialized(), as: UTF8.self) : AccessText.line(n.params)
                        OpenFile.standardOutput.write((line + "\n"))
                    }
                }
                defer { printer.cancel() }
                _ = try await client.call("access.watch", .object(p))
                try? await Task.sleep(for: .milliseconds(100))
            } catch {
                OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
                throw ExitCode(error.code == .daemonUnavailable ? 3 : 2)
            }
        }
    }

    struct Issue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a badge onto the PIV card on a reader (access.issue), for a kiosk or a badge office.",
            discussion: """
                Generates the Card Authentication key (9E, and with --auth-key the PIV Authentication key 9A) on the card, has the badge CA of accessControl.issuer (its key on a PKCS#11 token) certify them, writes the certificates and a signed CHUID, registers the badge for --holder and prints the card read back as a door reads it. Needs the PIV management key (tesserad --piv-management-key-file). A holder whose badge is suspended or deactivated, or a card that already is a badge, is refused unless --replace.

                EXAMPLES
                  tessera access issue --holder alice
                  tessera access issue --holder alice --auth-key --validity-days 730 --reader "Tessera VPCD 00 00"
                  tessera access issue --holder alice --replace
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(help: "The holder the badge is registered to (the certificate's common name).")
        var holder: String
        @Option(help: "Reader name (default: the first reader holding a card).")
        var reader: String?
        @Flag(name: .customLong("auth-key"), help: "Also generate the PIV Authentication key (9A), for --mode auth.")
        var authKey = false
        @Option(name: .customLong("validity-days"), help: "Days the certificates and CHUID stay valid (default 365).")
        var validityDays: Int?
        @Flag(help: "Issue even when the decision tree refuses; the holder's earlier badges become replaced.")
        var replace = false

        func run() async throws {
            var p: [String: JSONValue] = ["holder": .string(holder)]
            if let reader { p["reader"] = .string(reader) }
            if authKey { p["authKey"] = true }
            if let validityDays { p["validityDays"] = .number(Double(validityDays)) }
            if replace { p["replace"] = true }
            try await globals.run("access.issue", .object(p), human: AccessText.decision)
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Register the badge on a reader for a holder (access.register), e.g. a PIV card issued elsewhere.",
            discussion: """
                The card must pass the door's check (certificate to accessControl.anchors, challenge, CHUID); the provisioning decision tree over the holder's badges applies (--replace to override).

                EXAMPLES
                  tessera access register --holder bob
                  tessera access register --holder bob --reader "Tessera VPCD 00 01" --replace
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(help: "The holder the badge is registered to.")
        var holder: String
        @Option(help: "Reader name (default: the first reader holding a card).")
        var reader: String?
        @Flag(help: "Register even when the decision tree refuses; the holder's earlier badges become replaced.")
        var replace = false

        func run() async throws {
            var p: [String: JSONValue] = ["holder": .string(holder)]
            if let reader { p["reader"] = .string(reader) }
            if replace { p["replace"] = true }
            try await globals.run("access.register", .object(p), human: AccessText.decision)
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Show a building's door list (access.status): at the office what it published, at a door what it follows.",
            discussion: """
                At the badge office (accessControl.publisher): the number of the last publication, when it was published and when it expires, how many badges it holds and how many certificates its CRL lists. At a door (accessControl.registry): the number of the list it decides with, its age, whether it is stale (every badge is then denied REGISTRY_STALE) and what it holds. See docs/ACCESS.md, "A building".
                """)
        @OptionGroup var globals: GlobalOptions

        func run() async throws {
            try await globals.run("access.status", .object([:]), human: AccessText.status)
        }
    }

    struct Publish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish the door list and the badge CA's CRL now (access.publish, at the badge office).",
            discussion: """
                The office also publishes after every badge change and at least every half of accessControl.publisher.validitySeconds. See docs/ACCESS.md, "A building".
                """)
        @OptionGroup var globals: GlobalOptions

        func run() async throws {
            try await globals.run("access.publish", .object([:]), human: AccessText.status)
        }
    }
}

enum AccessText {
    static func status(_ r: JSONValue) -> String {
        var lines = ["role        \(r["role"]?.stringValue ?? "")"]
        for key in [
            "number", "publishedAt", "issuedAt", "expiresAt", "age", "stale", "badges", "revoked", "bytes", "file",
            "crlNumber", "lastError",
        ] {
            guard let value = r[key], !value.isNull else { continue }
            let text = value.stringValue ?? String(decoding: value.serialized(), as: UTF8.self)
            lines.append(String((key + String(repeating: " ", count: 12)).prefix(12)) + text)
        }
        return lines.joined(separator: "\n")
    }

    static func decision(_ r: JSONValue) -> String {
        let reasons = (r["reasons"]?.arrayValue ?? []).compactMap(\.stringValue)
        var lines = ["decision    \(r["decision"]?.stringValue ?? "")"]
        if !reasons.isEmpty { lines.append("reasons     \(reasons.joined(separator: " "))") }
        if let c = r["cardholder"]?.stringValue { lines.append("cardholder  \(c)") }
        if let h = r["holder"]?.stringValue { lines.append("holder      \(h)") }
        if let b = r["badgeId"]?.stringValue { lines.append("badge id    \(b)") }
        if let reader = r["reader"]?.stringValue { lines.append("reader      \(reader)") }
        if let number = r["registry"]?["number"], !number.isNull {
            let age = r["registry"]?["age"].map { String(decoding: $0.serialized(), as: UTF8.self) } ?? "?"
            lines.append("list        \(String(decoding: number.serialized(), as: UTF8.self)) (\(age) s old)")
        }
        return lines.joined(separator: "\n")
    }

    static func line(_ r: JSONValue) -> String {
        let reasons = (r["reasons"]?.arrayValue ?? []).compactMap(\.stringValue)
        return [
            r["decision"]?.stringValue ?? "", r["cardholder"]?.stringValue ?? "-", r["badgeId"]?.stringValue ?? "-",
            reasons.joined(separator: ","),
        ].filter { !$0.isEmpty }.joined(separator: "  ")
    }
}
