import ArgumentParser
import FoundationEssentials
import TesseraCore

extension Credentials {
    /// `tessera credentials suspend|resume|deactivate`: one state change by an administrator.
    struct Suspend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Suspend a passkey: its assertions fail with CREDENTIAL_SUSPENDED until resumed (credentials.suspend).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws {
            try await Credentials.transition("credentials.suspend", credentialId, reason, globals)
        }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Resume a suspended passkey (credentials.resume).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws {
            try await Credentials.transition("credentials.resume", credentialId, reason, globals)
        }
    }

    struct Deactivate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deactivate a passkey for good: it never signs again (credentials.deactivate).",
            discussion: "The key stays on its token; `tessera credentials delete` removes it.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws {
            try await Credentials.transition("credentials.deactivate", credentialId, reason, globals)
        }
    }

    static func transition(_ method: String, _ id: String, _ reason: String?, _ globals: GlobalOptions) async throws {
        var p: [String: JSONValue] = ["credentialId": .string(id)]
        if let reason { p["reason"] = .string(reason) }
        try await globals.run(method, .object(p)) { r in
            let state = r["credential"]?["state"]?.stringValue ?? "?"
            return r["changed"]?.boolValue == true ? "credential is now \(state)" : "credential was already \(state)"
        }
    }

    /// `tessera credentials check`: the pre-provisioning decision.
    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Whether a passkey may be provisioned for a user (credentials.provisioningCheck).",
            discussion:
                "Prints provision, alreadyProvisioned, deactivated, suspended or provisionedOnOtherToken and the user's credentials."
        )
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("rp-id"), help: "Relying party id.") var rpId: String
        @Option(name: .customLong("user-id"), parsing: .unconditional, help: "User handle, base64url.") var userId:
            String
        @Option(name: .customLong("token"), help: "Token id or label (default: the token passkey.enroll would use).")
        var tokenId: String?
        func run() async throws {
            var p: [String: JSONValue] = ["rpId": .string(rpId), "userId": .string(userId)]
            if let tokenId { p["tokenId"] = .string(tokenId) }
            try await globals.run("credentials.provisioningCheck", .object(p)) { r in
                ([r["decision"]?.stringValue ?? "?"] + (r["credentials"]?.arrayValue ?? []).map(Credentials.describe))
                    .joined(separator: "\n")
            }
        }
    }

    /// `tessera credentials chown`: an administrator hands a credential to another uid.
    struct Chown: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Hand a passkey to another user (credentials.chown; administrators only).",
            discussion:
                "A credential belongs to the uid that created it: only that uid and administrators see, use or delete it. Credentials made before owners were recorded belong to the daemon's uid; this gives one to a user. The change is kept in the audit trail."
        )
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Argument(help: "The new owner: a user name or a numeric uid.") var user: String
        func run() async throws {
            try await globals.run(
                "credentials.chown", ["credentialId": .string(credentialId), "owner": .string(user)]
            ) { r in
                "credential now belongs to uid \(r["credential"]?["ownerUid"]?.intValue.map(String.init) ?? "?")"
            }
        }
    }

    /// `tessera credentials history`: the audit trail.
    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the credentials' audit trail (credentials.history).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (default: every credential).") var credentialId: String?
        @Option(help: "At most this many entries, the newest.") var limit: Int?
        func run() async throws {
            var p: [String: JSONValue] = [:]
            if let credentialId { p["credentialId"] = .string(credentialId) }
            if let limit { p["limit"] = .number(Double(limit)) }
            try await globals.run("credentials.history", .object(p)) { r in
                let events = r["events"]?.arrayValue ?? []
                return events.isEmpty
                    ? "no events"
                    : events.map { e in
                        "\(e["at"]?.stringValue ?? "")  \(e["credentialId"]?.stringValue ?? "")  \(e["from"]?.stringValue ?? "-") → "
                            + "\(e["to"]?.stringValue ?? "?")  by \(e["actor"]?.stringValue ?? "?")"
                            + (e["reason"]?.stringValue.map { "  (\($0))" } ?? "")
                    }.joined(separator: "\n")
            }
        }
    }

    /// `tessera credentials apply`: a lifecycle command from the access-control backend.
    struct Apply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply a lifecycle command (a JWS from a configured issuer) (credentials.applyLifecycle).",
            discussion: "The command is read from the argument or, with '-', from standard input.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "The compact JWS, or '-' for standard input.") var command: String
        func run() async throws {
            let text = command == "-" ? (readLine(strippingNewline: true) ?? "") : command
            try await globals.run("credentials.applyLifecycle", ["command": .string(text)]) { r in
                "\(r["action"]?.stringValue ?? "?"): \(r["changed"]?.arrayValue?.count ?? 0) of "
                    + "\(r["credentials"]?.arrayValue?.count ?? 0) credential(s) changed"
            }
        }
    }
}

/// `tessera stepup`: an assertion after a verified read of the holder's document (stepup.start).
struct StepUpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stepup",
        abstract: "Step-up: read and verify the holder's document, then sign an assertion (stepup.start).",
        discussion:
            "The document in the reader must be authentic and match the passkey's identity binding (or --expect). "
            + "Prints the assertion; with --json also the document verdict and the echoed operation context. "
            + "A step-up survives a daemon restart: --continue ID goes on with it (stepup.submit; with --mrz or "
            + "--can while its document was not verified yet, and the PIN), --status ID shows it (stepup.status).")
    @OptionGroup var globals: GlobalOptions
    @Option(name: .customLong("rp-id"), help: "Relying party id (to start a step-up).") var rpId: String?
    @Option(
        name: .customLong("credential"), parsing: .unconditionalSingleValue,
        help: "Allowed credential id, base64url (repeatable, at least one).") var credentials: [String] = []
    @Option(parsing: .unconditional, help: "Challenge, base64url (default: random 32 bytes).") var challenge: String?
    @Option(help: "Origin for clientDataJSON (default: https://<rp-id>).") var origin: String?
    @Option(help: "The document's MRZ (lines separated by newlines).") var mrz: String?
    @Option(help: "The document's card access number.") var can: String?
    @Option(help: "Reader name (default: the first holding a card).") var reader: String?
    @Option(help: "Expected attributes as JSON (instead of the passkey's identity binding).") var expect: String?
    @Option(help: "Operation context shown to the station's UI, as text (sent base64).") var context: String?
    @Option(help: "MIME type of --context.") var mime = "application/json"
    @Option(name: .customLong("expires-in"), help: "Seconds until the challenge expires.") var expiresIn: Int?
    @Option(name: .customLong("continue"), help: "Continue the interrupted step-up with this id (stepup.submit).")
    var continueId: String?
    @Option(name: .customLong("status"), help: "Show the step-up with this id (stepup.status).") var statusId: String?
    @OptionGroup var pin: PINOptions

    func run() async throws {
        if let statusId {
            try await globals.run("stepup.status", ["stepUpId": .string(statusId)]) { r in
                "step-up \(statusId): \(r["state"]?.stringValue ?? "?")"
                    + (r["error"]?["code"]?.stringValue.map { " (\($0))" } ?? "")
            }
            return
        }
        guard (mrz == nil) || (can == nil) else { throw ValidationError("give at most one of --mrz and --can") }
        var document: [String: JSONValue] = [:]
        if let mrz { document["mrz"] = .string(mrz) }
        if let can { document["can"] = .string(can) }
        if let reader { document["reader"] = .string(reader) }
        if let continueId {
            var p: [String: JSONValue] = ["stepUpId": .string(continueId)]
            if !document.isEmpty { p["payload"] = .object(document) }
            try await pin.add(to: &p)
            try await globals.run("stepup.submit", .object(p), pin: pin, human: Self.summary)
            return
        }
        guard let rpId else { throw ValidationError("give --rp-id") }
        guard !credentials.isEmpty else { throw ValidationError("give at least one --credential") }
        guard (mrz == nil) != (can == nil) else { throw ValidationError("give exactly one of --mrz and --can") }
        document["required"] = true
        if let expect {
            guard let e = try? JSONValue.parse(Array(expect.utf8)), e.objectValue != nil else {
                throw ValidationError("--expect must be a JSON object")
            }
            document["expected"] = e
        }
        var p: [String: JSONValue] = [
            "rpId": .string(rpId), "allowCredentials": .array(credentials.map { .string($0) }),
            "challenge": .string(challenge ?? Base64URL.encode(SecureRandom.bytes(32))), "document": .object(document),
        ]
        if let origin { p["origin"] = .string(origin) }
        if let context {
            p["operationContext"] = [
                "contentB64": .string(Data(context.utf8).base64EncodedString()), "mime": .string(mime),
            ]
        }
        if let expiresIn { p["expiresAt"] = .number((Date().timeIntervalSince1970 + Double(expiresIn)).rounded()) }
        try await pin.add(to: &p)
        try await globals.run("stepup.start", .object(p), pin: pin, human: Self.summary)
    }

    static func summary(_ r: JSONValue) -> String {
        "step-up \(r["stepUpId"]?.stringValue ?? "?"): document \(r["document"]?["verdict"]?.stringValue ?? "?"), "
            + "signature by \(r["credentialId"]?.stringValue ?? "?") (signCount \(r["signCount"]?.intValue ?? 0))"
    }
}

/// `tessera recover`: a replacement passkey after a verified document read (recovery.start).
struct RecoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract:
            "Recover a lost passkey at this station: recovery token + document → replacement passkey (recovery.start).",
        discussion:
            "The recovery token (a JWS from a configured issuer) is read from --recovery-token or, with '-', from "
            + "standard input (then the PIN, with --pin-stdin, from the next line). Starting again with the same "
            + "--attempt resumes an interrupted attempt.")
    @OptionGroup var globals: GlobalOptions
    @Option(help: "Recovery attempt id (default: a new one).") var attempt: String?
    @Option(name: .customLong("recovery-token"), help: "The recovery token, or '-' for standard input.")
    var recoveryToken: String
    @Option(help: "The document's MRZ (lines separated by newlines).") var mrz: String?
    @Option(help: "The document's card access number.") var can: String?
    @Option(help: "Reader name (default: the first holding a card).") var reader: String?
    @Option(name: .customLong("token"), help: "Token id or label for the new passkey (see `tessera tokens`).")
    var tokenId: String?
    @Flag(help: "Cancel the attempt given with --attempt instead.") var cancel = false
    @OptionGroup var pin: PINOptions

    func run() async throws {
        let token = recoveryToken == "-" ? (readLine(strippingNewline: true) ?? "") : recoveryToken
        if cancel {
            guard let attempt else { throw ValidationError("--cancel needs --attempt") }
            try await globals.run("recovery.cancel", ["recoveryAttemptId": .string(attempt)]) { r in
                r["cancelled"]?.boolValue == true ? "cancelled" : "nothing to cancel"
            }
            return
        }
        var document: [String: JSONValue] = [:]
        if let mrz { document["mrz"] = .string(mrz) }
        if let can { document["can"] = .string(can) }
        if let reader { document["reader"] = .string(reader) }
        var p: [String: JSONValue] = [
            "recoveryAttemptId": .string(attempt ?? UUID().uuidString.lowercased()),
            "recoveryToken": .string(token),
        ]
        if !document.isEmpty { p["document"] = .object(document) }
        if let tokenId { p["tokenId"] = .string(tokenId) }
        try await pin.add(to: &p)
        try await globals.run("recovery.start", .object(p), pin: pin) { r in
            "attempt \(r["recoveryAttemptId"]?.stringValue ?? "?"): credential \(r["credentialId"]?.stringValue ?? "?") "
                + "created on token \(r["tokenId"]?.stringValue ?? "?"); \(r["replaced"]?.arrayValue?.count ?? 0) replaced"
        }
    }
}
