import ArgumentParser
import Foundation
import TesseraCore

extension Credentials {
    /// `tessera credentials suspend|resume|deactivate`: one state change by an administrator.
    struct Suspend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Suspend a passkey: its assertions fail with CREDENTIAL_SUSPENDED until resumed (credentials.suspend).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws { try await Credentials.transition("credentials.suspend", credentialId, reason, globals) }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Resume a suspended passkey (credentials.resume).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws { try await Credentials.transition("credentials.resume", credentialId, reason, globals) }
    }

    struct Deactivate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deactivate a passkey for good: it never signs again (credentials.deactivate).",
            discussion: "The key stays on its token; `tessera credentials delete` removes it.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (one starting with '-' goes after `--`).") var credentialId: String
        @Option(help: "Why (kept in the audit trail).") var reason: String?
        func run() async throws { try await Credentials.transition("credentials.deactivate", credentialId, reason, globals) }
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
            discussion: "Prints provision, alreadyProvisioned, deactivated, suspended or provisionedOnOtherToken and the user's credentials.")
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("rp-id"), help: "Relying party id.") var rpId: String
        @Option(name: .customLong("user-id"), parsing: .unconditional, help: "User handle, base64url.") var userId: String
        @Option(name: .customLong("token"), help: "Token id (default: the token passkey.enroll would use).") var tokenId: String?
        func run() async throws {
            var p: [String: JSONValue] = ["rpId": .string(rpId), "userId": .string(userId)]
            if let tokenId { p["tokenId"] = .string(tokenId) }
            try await globals.run("credentials.provisioningCheck", .object(p)) { r in
                ([r["decision"]?.stringValue ?? "?"] + (r["credentials"]?.arrayValue ?? []).map(Credentials.describe))
                    .joined(separator: "\n")
            }
        }
    }

    /// `tessera credentials history`: the audit trail.
    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the credentials' audit trail (credentials.history).")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: "Credential id, base64url (default: every credential).") var credentialId: String?
        @Option(help: "At most this many entries, the newest.") var limit: Int?
        func run() async throws {
            var p: [String: JSONValue] = [:]
            if let credentialId { p["credentialId"] = .string(credentialId) }
            if let limit { p["limit"] = .number(Double(limit)) }
            try await globals.run("credentials.history", .object(p)) { r in
                let events = r["events"]?.arrayValue ?? []
                return events.isEmpty ? "no events" : events.map { e in
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
