import ArgumentParser
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the daemon's version, uptime, tokens and readers.")
    @OptionGroup var globals: GlobalOptions

    func run() async throws {
        try await globals.run("daemon.status", [:]) { r in
            var lines = ["tesserad \(r["version"]?.stringValue ?? "?") — up \(r["uptimeSeconds"]?.intValue ?? 0)s"]
            for t in r["tokens"]?.arrayValue ?? [] { lines.append("  token " + Tokens.describe(t)) }
            for rd in r["readers"]?.arrayValue ?? [] { lines.append("  reader \(rd["name"]?.stringValue ?? "?")") }
            return lines.joined(separator: "\n")
        }
    }
}

struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the tokens (PKCS#11 and PIV) the daemon can use.")
    @OptionGroup var globals: GlobalOptions

    static func describe(_ t: JSONValue) -> String {
        let flags = (t["flags"]?.objectValue ?? [:]).filter { $0.value.boolValue == true }.keys.sorted()
        return "\(t["id"]?.stringValue ?? "?")  \(t["label"]?.stringValue ?? "")  [\(t["backend"]?.stringValue ?? "")]"
            + "  \(t["manufacturer"]?.stringValue ?? "") \(t["model"]?.stringValue ?? "") serial \(t["serial"]?.stringValue ?? "")"
            + (flags.isEmpty ? "" : "  flags: " + flags.joined(separator: ","))
    }

    func run() async throws {
        try await globals.run("tokens.list", [:]) { r in
            let list = r["tokens"]?.arrayValue ?? []
            return list.isEmpty ? "no tokens" : list.map(Self.describe).joined(separator: "\n")
        }
    }
}

struct Enroll: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create a passkey on a token (passkey.enroll).",
        discussion: """
            Prints "credential ID created on token TOKEN-ID" (and "(user verified)" with a PIN); with --json the full registration (credentialId, attestationObject, clientDataJSON, ...).
            """)
    @OptionGroup var globals: GlobalOptions
    @Option(name: .customLong("rp-id"), help: "Relying party id (a domain).") var rpId: String
    @Option(name: .customLong("user-name"), help: "User name.") var userName: String
    @Option(name: .customLong("display-name"), help: "User display name (default: the user name).") var displayName:
        String?
    @Option(
        name: .customLong("user-id"), parsing: .unconditional,
        help: "User handle, base64url (default: random 16 bytes).") var userId: String?
    @Option(parsing: .unconditional, help: "Challenge, base64url (default: random 32 bytes).") var challenge: String?
    @Option(help: "Origin for clientDataJSON (default: https://<rp-id>).") var origin: String?
    @Option(name: .customLong("token"), help: "Token id or label (see `tessera tokens`).") var tokenId: String?
    @Option(help: "none or packed.") var attestation = "none"
    @Option(
        name: .customLong("exclude"), parsing: .unconditionalSingleValue,
        help: "Credential id that must not exist yet (repeatable).") var exclude: [String] = []
    @Flag(
        help:
            "Create it even when the user already has a credential here; the user's other credentials become replaced.")
    var replace = false
    @OptionGroup var pin: PINOptions

    func run() async throws {
        var p: [String: JSONValue] = [
            "rpId": .string(rpId),
            "user": [
                "id": .string(userId ?? Base64URL.encode(SecureRandom.bytes(16))), "name": .string(userName),
                "displayName": .string(displayName ?? userName),
            ],
            "challenge": .string(challenge ?? Base64URL.encode(SecureRandom.bytes(32))),
            "attestation": .string(attestation),
        ]
        if let origin { p["origin"] = .string(origin) }
        if let tokenId { p["tokenId"] = .string(tokenId) }
        if !exclude.isEmpty { p["excludeCredentials"] = .array(exclude.map { .string($0) }) }
        if replace { p["replace"] = true }
        try await pin.add(to: &p)
        try await globals.run("passkey.enroll", .object(p), pin: pin) { r in
            "credential \(r["credentialId"]?.stringValue ?? "?") created on token \(r["tokenId"]?.stringValue ?? "?")"
                + (r["userVerified"]?.boolValue == true ? " (user verified)" : "")
        }
    }
}

struct Authenticate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign an assertion with a passkey (passkey.authenticate).")
    @OptionGroup var globals: GlobalOptions
    @Option(name: .customLong("rp-id"), help: "Relying party id.") var rpId: String
    // base64url values may start with '-': these options take the next word whatever it looks like.
    @Option(
        name: .customLong("credential"), parsing: .unconditionalSingleValue,
        help: "Allowed credential id, base64url (repeatable, at least one).") var credentials: [String] = []
    @Option(parsing: .unconditional, help: "Challenge, base64url (default: random 32 bytes).") var challenge: String?
    @Option(help: "Origin for clientDataJSON (default: https://<rp-id>).") var origin: String?
    @Option(name: .customLong("user-verification"), help: "required, preferred or discouraged.") var userVerification =
        "preferred"
    @OptionGroup var pin: PINOptions

    func run() async throws {
        var p: [String: JSONValue] = [
            "rpId": .string(rpId),
            "challenge": .string(challenge ?? Base64URL.encode(SecureRandom.bytes(32))),
            "allowCredentials": .array(credentials.map { .string($0) }),
            "userVerification": .string(userVerification),
        ]
        if let origin { p["origin"] = .string(origin) }
        try await pin.add(to: &p)
        try await globals.run("passkey.authenticate", .object(p), pin: pin) { r in
            "assertion by \(r["credentialId"]?.stringValue ?? "?"), signCount \(r["signCount"]?.intValue ?? -1)"
                + (r["userVerified"]?.boolValue == true ? " (user verified)" : "")
        }
    }
}

struct Credentials: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, show, delete, suspend, resume or deactivate passkeys.",
        subcommands: [
            List.self, Get.self, Delete.self, Suspend.self, Resume.self,
            Deactivate.self, Check.self, History.self, Apply.self, Chown.self,
        ])

    static func describe(_ c: JSONValue) -> String {
        "\(c["credentialId"]?.stringValue ?? "?")  \(c["rpId"]?.stringValue ?? "")  user \(c["user"]?["name"]?.stringValue ?? "")"
            + "  token \(c["tokenId"]?.stringValue ?? "")  created \(c["createdAt"]?.stringValue ?? "")"
            + "  \(c["state"]?.stringValue ?? "")"
            + (c["ownerUid"]?.intValue.map { "  owner uid \($0)" } ?? "")
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List passkeys (credentials.list).")
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("rp-id"), help: "Only this relying party's passkeys.") var rpId: String?
        @Option(name: .customLong("user-id"), parsing: .unconditional, help: "User handle, base64url.") var userId:
            String?
        func run() async throws {
            var p: [String: JSONValue] = [:]
            if let rpId { p["rpId"] = .string(rpId) }
            if let userId { p["userId"] = .string(userId) }
            try await globals.run("credentials.list", .object(p)) { r in
                let list = r["credentials"]?.arrayValue ?? []
                return list.isEmpty ? "no credentials" : list.map(Credentials.describe).joined(separator: "\n")
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one passkey (credentials.get).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        func run() async throws {
            try await globals.run("credentials.get", ["credentialId": .string(credentialId)]) {
                String(decoding: $0.serialized(), as: UTF8.self)
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a passkey and its key on the token (credentials.delete).",
            discussion: "A token whose keys need a login (not logged in by the daemon) wants its PIN: --pin-stdin.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @OptionGroup var pin: PINOptions
        func run() async throws {
            var p: [String: JSONValue] = ["credentialId": .string(credentialId)]
            try await pin.add(to: &p)
            try await globals.run("credentials.delete", .object(p), pin: pin) { _ in "deleted" }
        }
    }
}

struct MRZCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mrz", abstract: "Machine-readable zone tools.",
        subcommands: [Parse.self])
    struct Parse: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Parse and check an MRZ (mrz.parse). Lines as separate arguments, or one argument with newlines.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "MRZ lines.") var lines: [String]
        func run() async throws {
            try await globals.run("mrz.parse", ["text": .string(lines.joined(separator: "\n"))]) { r in
                let keys = [
                    "format", "documentCode", "issuingState", "documentNumber", "primaryIdentifier",
                    "secondaryIdentifier", "nationality", "dateOfBirth", "sex", "dateOfExpiry", "optionalData",
                ]
                return keys.compactMap { k in r[k]?.stringValue.map { "\(k): \($0)" } }.joined(separator: "\n")
            }
        }
    }
}

struct Call: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Call any method with JSON params and print the JSON result.")
    @OptionGroup var globals: GlobalOptions
    @Argument(help: "Method name, e.g. daemon.status.") var method: String
    @Argument(help: "Params as a JSON object (default {}).") var params: String = "{}"
    func run() async throws {
        let p: JSONValue
        do { p = try JSONValue.parse(Array(params.utf8)) } catch { throw ValidationError("params are not valid JSON") }
        try await globals.run(method, p) { String(decoding: $0.serialized(), as: UTF8.self) }
    }
}

struct SSH: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "SSH keys on tokens, for tesserad's SSH agent socket (ssh.keygen, ssh.list).",
        subcommands: [Keygen.self, List.self])

    struct Keygen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a P-256 SSH key on a token (ssh.keygen); prints its authorized_keys line.",
            discussion:
                "On a PIV card (--token piv-…) the key goes into a free retired slot; the daemon needs the card's management key."
        )
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("token"), help: "Token id or label (see `tessera tokens`; default: the first token).")
        var tokenId: String?
        @Option(help: "Key comment (default: tessera@HOST).") var comment: String?
        @Flag(help: "Every signature with the key needs the daemon's presence command to approve it.") var confirm =
            false
        @OptionGroup var pin: PINOptions

        func run() async throws {
            var p: [String: JSONValue] = confirm ? ["confirm": true] : [:]
            if let tokenId { p["tokenId"] = .string(tokenId) }
            if let comment { p["comment"] = .string(comment) }
            if let pin = try await pin.value() { p["pin"] = .string(pin) }
            try await globals.run("ssh.keygen", .object(p), pin: pin) { r in r["publicKey"]?.stringValue ?? "" }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the authorized_keys lines of the keys the SSH agent offers (ssh.list).")
        @OptionGroup var globals: GlobalOptions

        func run() async throws {
            try await globals.run("ssh.list", [:]) { r in
                (r["keys"]?.arrayValue ?? []).compactMap { $0["publicKey"]?.stringValue }.joined(separator: "\n")
            }
        }
    }
}

struct CTAPCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctap", abstract: "The CTAP authenticator's PIN (docs/CTAP.md).", subcommands: [SetPIN.self])

    struct SetPIN: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-pin",
            abstract: "Give a PKCS#11 token the hashed form of a CTAP PIN as its PIN (ctap.setPin, admin).",
            discussion: """
                The token's PIN becomes the lower-case hex of LEFT(SHA-256(CTAP PIN), 16), what ClientPIN checks \
                (ctap.clientPin). The CTAP PIN is the current PIN unless --new-pin-stdin gives another one (on the \
                line after the current PIN). One C_SetPIN: a wrong current PIN costs one try.
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("token"), help: "Token id or label (default: ctap.tokenId, else the only token).")
        var tokenId: String?
        @OptionGroup var pin: PINOptions
        @Flag(
            name: .customLong("new-pin-stdin"),
            help:
                "Read the new CTAP PIN from the next line of standard input; on a terminal, ask for it twice without echo."
        )
        var newPINStdin = false

        func run() async throws {
            var p: [String: JSONValue] = [:]
            try await pin.add(to: &p)
            guard p["pin"] != nil else { throw ValidationError("give the token's current PIN: --pin-stdin") }
            if let tokenId { p["tokenId"] = .string(tokenId) }
            if newPINStdin {
                do throws(TesseraError) {
                    let new = try await PINOptions.read("New CTAP PIN: ", option: "--new-pin-stdin")
                    if TerminalPrompt.isTerminal, try await PINOptions.prompt("Repeat the new CTAP PIN: ") != new {
                        throw TesseraError(.invalidInput, "the two new PINs differ: nothing was changed")
                    }
                    p["newPin"] = .string(new)
                } catch {
                    throw GlobalOptions.fail(error)
                }
            }
            try await globals.run("ctap.setPin", .object(p)) { r in
                "token \(r["tokenId"]?.stringValue ?? "") now has the hashed form of its CTAP PIN"
            }
        }
    }
}
