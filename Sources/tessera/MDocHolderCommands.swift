import ArgumentParser
import FoundationEssentials
import RPC
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera mdoc create-device-key|register|registrations|remove|present|respond|approve`: the holder side (docs/MDOC.md).
extension MDocCommand {
    struct CreateDeviceKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create-device-key",
            abstract: "Generate an mdoc device key (P-256) on a PKCS#11 token (mdoc.createDeviceKey).",
            discussion: """
                The private key is generated on the token and never leaves it. The key is labelled tessera:mdoc:UID, so \
                it is never offered as a passkey or by the SSH agent. Prints the token id, the key id (for `tessera \
                mdoc register --key-id`) and the device key as a base64url COSE_Key (EC2, P-256) for the issuer.

                EXAMPLES
                  tessera mdoc create-device-key --token pkcs11-…
                  tessera --json mdoc create-device-key
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(name: .customLong("token"), help: "Token id or label (see `tessera tokens`; default: the first token).")
        var tokenId: String?
        @OptionGroup var pin: PINOptions

        func run() async throws {
            var p: [String: JSONValue] = [:]
            if let tokenId { p["tokenId"] = .string(tokenId) }
            if let pin = try await pin.value() { p["pin"] = .string(pin) }
            if pin.allowFinalPinTry { p["allowFinalPinTry"] = true }
            try await globals.run("mdoc.createDeviceKey", .object(p), pin: pin) { r in
                """
                tokenId    \(r["tokenId"]?.stringValue ?? "")
                keyId      \(r["keyId"]?.stringValue ?? "")
                deviceKey  \(r["deviceKey"]?.stringValue ?? "")
                """
            }
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register an mdoc whose device key is on a token (mdoc.register).",
            discussion: """
                ISSUER-SIGNED.cbor is the IssuerSigned CBOR the issuer returned for the device key made by `tessera \
                mdoc create-device-key`. The daemon checks that it parses, that its MSO's docType is --doc-type and \
                that its MSO's deviceKey is the token key --key-id (MDOC_DEVICE_KEY_MISMATCH otherwise). A request is \
                offered only when its readerAuth chain validates by signature to a reader root certificate the daemon \
                holds (tesserad --mdoc-reader-root) whose subject key identifier is one of the --authority-key-id \
                values (none: no request is offered); after --invalidation-date or the MSO's \
                validUntil the registration is not offered.

                EXAMPLES
                  tessera mdoc register /tmp/mdl/issuer-signed.cbor --key-id KEYID --token pkcs11-… \\
                      --authority-key-id 0a1b2c… --document-id my-mdl
                """)
        @OptionGroup var globals: GlobalOptions
        @Argument(help: ArgumentHelp("IssuerSigned, binary CBOR.", valueName: "ISSUER-SIGNED.cbor"))
        var issuerSigned: String
        @Option(name: .customLong("key-id"), help: "The device key's id (from create-device-key).") var keyId: String
        @Option(name: .customLong("token"), help: "The device key's token, by id or label (default: the first token).")
        var tokenId: String?
        @Option(name: .customLong("doc-type"), help: "docType (default: org.iso.18013.5.1.mDL).")
        var docType = "org.iso.18013.5.1.mDL"
        @Option(name: .customLong("document-id"), help: "documentIdentifier (default: a generated UUID).")
        var documentId: String?
        @Option(
            name: .customLong("authority-key-id"),
            help: ArgumentHelp("A trusted reader root's subject key identifier, hex (repeatable).", valueName: "HEX"))
        var authorityKeyIds: [String] = []
        @Option(
            name: .customLong("invalidation-date"),
            help: ArgumentHelp("Not offered after this time (RFC 3339).", valueName: "TIME"))
        var invalidationDate: String?

        func run() async throws {
            guard let data = FileManager.default.contents(atPath: issuerSigned) else {
                throw ValidationError("cannot read \(issuerSigned)")
            }
            var p: [String: JSONValue] = [
                "issuerSigned": .string(Base64URL.encode([UInt8](data))), "keyId": .string(keyId),
                "docType": .string(docType),
                "supportedAuthorityKeyIdentifiers": .array(authorityKeyIds.map { .string($0) }),
            ]
            if let tokenId { p["tokenId"] = .string(tokenId) }
            if let documentId { p["documentIdentifier"] = .string(documentId) }
            if let invalidationDate { p["invalidationDate"] = .string(invalidationDate) }
            try await globals.run("mdoc.register", .object(p)) { MDocHolderText.registration($0) }
        }
    }

    struct Registrations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List your mdoc registrations (an administrator sees all) (mdoc.registrations).")
        @OptionGroup var globals: GlobalOptions

        func run() async throws {
            try await globals.run("mdoc.registrations", [:]) { r in
                let list = r["registrations"]?.arrayValue ?? []
                return list.isEmpty
                    ? "no registrations" : list.map(MDocHolderText.registration).joined(separator: "\n\n")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an mdoc registration (mdoc.removeRegistration; the owner or an administrator).",
            discussion: "The device key stays on the token.")
        @OptionGroup var globals: GlobalOptions
        @Argument(help: ArgumentHelp("documentIdentifier.", valueName: "DOCUMENT-ID")) var documentId: String

        func run() async throws {
            try await globals.run("mdoc.removeRegistration", ["documentIdentifier": .string(documentId)]) { r in
                r["removed"]?.boolValue == true ? "removed \(documentId)" : "\(documentId) was not registered"
            }
        }
    }

    struct Present: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Present a registered mdoc over NFC as a card (mdoc.present) until the reader is done.",
            discussion: """
                The daemon acts as the mdoc: NFC engagement and retrieval in a vpcd reader (--device HOST:PORT, \
                pcscd's reader.conf CHANNELID port) or in libnfc target mode (--device CONNSTRING). A request is \
                considered only when its readerAuth verifies and its chain validates to a daemon reader root listed in \
                the registration; then it \
                is printed as an `mdoc.request` line (presentationId, reader, elements) and nothing is released until \
                `tessera mdoc approve PRESENTATION-ID` (same uid) within --approval-timeout. Declined, timed out or \
                untrusted requests end the session with status 20 (an `mdoc.refused` line says why). Prints a line per \
                event (the card is in the reader, a request with its presentation id, released, refused, not \
                delivered) and the summary when the reader ends the session, --duration passes, `mdoc.stop` or on \
                Ctrl-C; with --json one JSON line per event ({"event": "mdoc.presenting" | "mdoc.request" | \
                "mdoc.released" | "mdoc.refused" | "mdoc.undelivered", "params": …}) and the result.

                EXAMPLES
                  tessera mdoc present my-mdl --device 127.0.0.1:35963
                  tessera mdoc approve 3f2c… --element org.iso.18013.5.1/family_name
                """)
        @OptionGroup var globals: GlobalOptions
        @Argument(help: ArgumentHelp("documentIdentifier.", valueName: "DOCUMENT-ID")) var documentId: String
        @Option(help: ArgumentHelp("vpcd HOST:PORT or a libnfc connstring.", valueName: "DEVICE")) var device: String
        @Option(help: ArgumentHelp("Stop after this many seconds (default 120).", valueName: "SECONDS"))
        var duration: Int?
        @Option(
            name: .customLong("approval-timeout"),
            help: ArgumentHelp(
                "Decline a request not approved within this many seconds (default 60).", valueName: "SECONDS"))
        var approvalTimeout: Int?

        func run() async throws {
            var p: [String: JSONValue] = ["documentIdentifier": .string(documentId), "device": .string(device)]
            if let duration { p["durationSeconds"] = .number(Double(duration)) }
            if let approvalTimeout { p["approvalTimeoutSeconds"] = .number(Double(approvalTimeout)) }
            let result = try await MDocHolderText.callPrintingEvents(
                globals, "mdoc.present", .object(p), inWords: !globals.json)
            print(globals.json ? String(decoding: result.serialized(), as: UTF8.self) : MDocHolderText.summary(result))
        }
    }

    struct Respond: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Answer an ISO/IEC 18013-7 Annex C request (Digital Credentials API) with a registered mdoc "
                + "(mdoc.respond).",
            discussion: """
                --request FILE is the request data a web page passed to navigator.credentials.get for the protocol \
                org-iso-mdoc: {"deviceRequest": base64url, "encryptionInfo": base64url}. --origin is the page's \
                origin (scheme://host[:port]); it is bound into the SessionTranscript, so a reader signature made for \
                another origin is refused. The daemon takes --document-id (default: the first of your offered \
                registrations of a requested docType whose authority key identifiers trust the request's reader), \
                checks the readerAuth chain against the daemon's reader roots that its supportedAuthorityKeyIdentifiers \
                list, then prints an `mdoc.request` \
                line ({"event": "mdoc.request", "params": {presentationId, origin, reader, elements, …}}) and waits \
                for `tessera mdoc approve PRESENTATION-ID` (same uid) within --approval-timeout. Only the approved \
                elements are released, signed by the device key on the token and encrypted (HPKE) to the reader's \
                key. Prints the result as one JSON line: {"response": base64url EncryptedResponse, \
                "documentIdentifier", "released": ["namespace/identifier", …]}; the page's response data is \
                {"response": …}. --out also writes the EncryptedResponse (binary CBOR) to FILE. Nothing is released \
                when the reader is not trusted (MDOC_READER_NOT_TRUSTED), the request is declined or not answered in \
                time (MDOC_NOT_APPROVED) or does not parse (MDOC_REQUEST_MALFORMED): the error is printed on stderr \
                and the exit status is 2 (3 when the daemon is unavailable).

                EXAMPLES
                  tessera mdoc respond --request request.json --origin https://verifier.example
                  tessera mdoc approve 3f2c… --element org.iso.18013.5.1/age_over_18
                """)
        @OptionGroup var globals: GlobalOptions
        @Option(
            name: .customLong("request"),
            help: ArgumentHelp("The Annex C request data, JSON {deviceRequest, encryptionInfo}.", valueName: "FILE"))
        var requestFile: String
        @Option(help: ArgumentHelp("The requesting web origin, scheme://host[:port].", valueName: "ORIGIN"))
        var origin: String
        @Option(
            name: .customLong("document-id"),
            help: ArgumentHelp(
                "The registration to answer with (default: chosen by docType and trust).",
                valueName: "DOCUMENT-ID"))
        var documentId: String?
        @Option(
            name: .customLong("approval-timeout"),
            help: ArgumentHelp(
                "Decline the request if not approved within this many seconds (default 60).", valueName: "SECONDS"))
        var approvalTimeout: Int?
        @Option(
            name: .customLong("out"),
            help: ArgumentHelp("Also write the EncryptedResponse, binary CBOR, here.", valueName: "FILE"))
        var out: String?

        func run() async throws {
            guard let data = FileManager.default.contents(atPath: requestFile) else {
                throw ValidationError("cannot read \(requestFile)")
            }
            let request: JSONValue
            do { request = try JSONValue.parse([UInt8](data)) } catch {
                throw ValidationError("\(requestFile) is not JSON: \(error.message)")
            }
            var p: [String: JSONValue] = ["request": request, "origin": .string(origin)]
            if let documentId { p["documentIdentifier"] = .string(documentId) }
            if let approvalTimeout { p["approvalTimeoutSeconds"] = .number(Double(approvalTimeout)) }
            let result = try await MDocHolderText.callPrintingEvents(globals, "mdoc.respond", .object(p))
            if let out {
                guard let text = result["response"]?.stringValue, let bytes = Base64URL.decode(text),
                    FileManager.default.createFile(atPath: out, contents: Data(bytes))
                else { throw ValidationError("cannot write \(out)") }
            }
            print(String(decoding: result.serialized(), as: UTF8.self))
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Approve (or --decline) a pending mdoc request (mdoc.approve; the presenting uid or an admin).",
            discussion: """
                Without --element every requested element the document holds is released; with --element only those \
                (namespace/identifier, repeatable) that were also requested. Prints the released elements. A token \
                that needs its PIN to sign takes --pin / --pin-stdin (one try, the daemon's PIN rules).
                """)
        @OptionGroup var globals: GlobalOptions
        @Argument(help: ArgumentHelp("From the mdoc.request line.", valueName: "PRESENTATION-ID")) var presentationId:
            String
        @Flag(help: "Decline: nothing is released.") var decline = false
        @Option(
            name: .customLong("element"),
            help: ArgumentHelp("Release only this element (repeatable).", valueName: "NAMESPACE/IDENTIFIER"))
        var elements: [String] = []
        @OptionGroup var pin: PINOptions

        func run() async throws {
            var p: [String: JSONValue] = ["presentationId": .string(presentationId), "approve": .bool(!decline)]
            if !elements.isEmpty { p["elements"] = .array(elements.map { .string($0) }) }
            if let pin = try await pin.value() { p["pin"] = .string(pin) }
            if pin.allowFinalPinTry { p["allowFinalPinTry"] = true }
            try await globals.run("mdoc.approve", .object(p), pin: pin) { r in
                guard r["approved"]?.boolValue == true else { return "declined" }
                let released = (r["released"]?.arrayValue ?? []).compactMap(\.stringValue)
                return "released " + (released.isEmpty ? "nothing" : released.joined(separator: " "))
            }
        }
    }
}

enum MDocHolderText {
    /// Calls a long-running holder method, printing each `mdoc.*` notification as a JSON line
    /// `{"event", "params"}`; an error goes to stderr with exit status 2 (3: daemon unavailable).
    /// `inWords`: each event as a line for people (`words`) instead.
    static func callPrintingEvents(
        _ globals: GlobalOptions, _ method: String, _ params: JSONValue, inWords: Bool = false
    ) async throws -> JSONValue {
        do {
            let client = try await RPCClient.connect(path: globals.socketPath)
            defer { Task { await client.close() } }
            let printer = Task {
                for await n in client.notifications where n.method.hasPrefix("mdoc.") {
                    let line: JSONValue = ["event": .string(n.method), "params": n.params]
                    let text = inWords ? words(n.method, n.params) : String(decoding: line.serialized(), as: UTF8.self)
                    OpenFile.standardOutput.write((text + "\n"))
                }
            }
            defer { printer.cancel() }
            return try await client.call(method, params)
        } catch {
            OpenFile.standardError.write("error: \(error.code.rawValue): \(error.message)\n")
            throw ExitCode(error.code == .daemonUnavailable ? 3 : 2)
        }
    }

    /// One holder event in words (without --json).
    static func words(_ event: String, _ p: JSONValue) -> String {
        let id = p["presentationId"]?.stringValue ?? "?"
        let elements = (p["elements"]?.arrayValue ?? []).compactMap { e in
            e.stringValue ?? e["identifier"]?.stringValue
        }
        let list = elements.isEmpty ? "nothing" : elements.joined(separator: " ")
        switch event {
        case "mdoc.presenting":
            return
                "presenting \(p["documentIdentifier"]?.stringValue ?? "?") on \(p["device"]?.stringValue ?? "?"): the reader may read now"
        case "mdoc.request":
            let reader = p["reader"]?["subject"]?.stringValue ?? p["origin"]?.stringValue ?? "?"
            return """
                request \(id) from \(reader) for \(list)
                  approve: tessera mdoc approve \(id) [--element NAMESPACE/IDENTIFIER …]   decline: tessera mdoc approve --decline \(id)
                """
        case "mdoc.released": return "released \(id): \(list)"
        case "mdoc.refused":
            return "refused \(id): \(p["code"]?.stringValue ?? "?"): \(p["message"]?.stringValue ?? "")"
        case "mdoc.undelivered":
            return "not delivered \(id): \(p["message"]?.stringValue ?? "")"
        default: return "\(event) \(String(decoding: p.serialized(), as: UTF8.self))"
        }
    }

    /// `mdoc.present`'s result in words.
    static func summary(_ r: JSONValue) -> String {
        let requests = r["requests"]?.intValue ?? 0
        let presentations = r["presentations"]?.arrayValue ?? []
        let released = presentations.filter { $0["outcome"]?.stringValue == "released" }.count
        return
            "ended (\(r["reason"]?.stringValue ?? "?")): \(requests) request\(requests == 1 ? "" : "s"), \(released) released"
    }

    static func registration(_ r: JSONValue) -> String {
        let ids = (r["supportedAuthorityKeyIdentifiers"]?.arrayValue ?? []).compactMap(\.stringValue)
        var lines = [
            "documentIdentifier  \(r["documentIdentifier"]?.stringValue ?? "")",
            "docType             \(r["docType"]?.stringValue ?? "")",
            "token / key         \(r["tokenId"]?.stringValue ?? "") \(r["keyId"]?.stringValue ?? "")",
            "authority key ids   \(ids.isEmpty ? "(none: never offered)" : ids.joined(separator: " "))",
            "validUntil          \(r["validUntil"]?.stringValue ?? "")",
        ]
        if let d = r["invalidationDate"]?.stringValue { lines.append("invalidationDate    \(d)") }
        lines.append("offered             \(r["offered"]?.boolValue == true ? "yes" : "no (expired)")")
        return lines.joined(separator: "\n")
    }
}
