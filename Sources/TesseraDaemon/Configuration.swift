import FoundationEssentials
import KeyStores
import Passkeys
import RPC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Command-line options of `tesserad` (the stable contract; see `tesserad --help`).
public struct DaemonOptions: Sendable {
    public var socketPath: String?
    public var stateDir: String
    public var pkcs11Modules: [String]
    public var configFile: String?
    public var cscaPaths: [String]
    /// Certificates that CSCA master lists given in `cscaPaths` must chain to (`--master-list-trust`, repeatable).
    public var masterListTrustPaths: [String] = []
    /// CRL files or directories (`--crl`, repeatable), each CRL signed by a CSCA of `cscaPaths`.
    public var crlPaths: [String] = []
    /// Create a SoftHSM2 token in the state dir when no usable hardware token is found.
    public var embeddedSoftHSM: Bool
    public var logLevel: String
    /// libnfc connstrings (`--nfc-device`, repeatable; `auto` = every device libnfc finds).
    public var nfcDevices: [String] = []
    /// File holding the PIV card management key in hex (`--piv-management-key-file`); its content is never logged.
    public var pivManagementKeyFile: String?
    /// Accept the well-known default PIV management key (`--allow-default-piv-management-key`).
    public var allowDefaultPIVManagementKey = false
    /// Serve the SSH agent protocol on this Unix socket (`--ssh-agent-socket`; overrides `sshAgent.socket`).
    public var sshAgentSocket: String?
    /// IACA trust anchors for mdoc verification (`--iaca`, repeatable; PEM or DER files), separate from the CSCAs.
    public var iacaPaths: [String] = []
    /// readerAuth for `mdoc.read`: the reader's private key (`--mdoc-reader-key`) and certificate chain, leaf first
    /// (`--mdoc-reader-cert`, PEM).
    public var mdocReaderKeyPath: String?
    public var mdocReaderCertificatePath: String?
    /// Reader root certificates the holder trusts (`--mdoc-reader-root`, repeatable; PEM or DER files): a request's
    /// readerAuth chain must validate to one whose key identifier the registration lists.
    public var mdocReaderRootPaths: [String] = []
    /// Serve a CTAP 2.1 authenticator on this SOCK_SEQPACKET socket (`--ctap-socket`; overrides `ctap.socket`).
    public var ctapSocket: String?
    /// Also serve the authenticator as a virtual FIDO HID device through /dev/uhid (`--ctap-uhid`).
    public var ctapUHID = false
    /// The mode's default paths (`--user`: per-user mode): the JSON-RPC socket when neither `socketPath` nor systemd
    /// gives one; in per-user mode also the SSH agent and CTAP sockets when neither an option nor the config names
    /// them. The daemon creates `paths.runtimeDirectory` when a socket goes there and it is missing.
    public var paths: DaemonPaths = .system

    public init(
        socketPath: String?, stateDir: String, pkcs11Modules: [String] = [], configFile: String? = nil,
        cscaPaths: [String] = [], embeddedSoftHSM: Bool = true, logLevel: String = "info"
    ) {
        self.socketPath = socketPath; self.stateDir = stateDir; self.pkcs11Modules = pkcs11Modules
        self.configFile = configFile; self.cscaPaths = cscaPaths; self.embeddedSoftHSM = embeddedSoftHSM
        self.logLevel = logLevel
    }
}

/// The optional JSON configuration file (`--config FILE`); every key is optional, an unknown key stops start-up.
/// The JSON keys are the stored property names (`knownKeys`): a new key is only a new property. See docs/CONFIG.md.
public struct ConfigFile: Codable, Sendable {
    /// Group (name or number) that owns the socket; members may connect.
    public var socketGroup: String?
    /// Socket file mode in octal, default "0660".
    public var socketMode: String?
    /// PKCS#11 module paths used in addition to `--pkcs11-module`.
    public var pkcs11Modules: [String]?
    /// PIN files for unattended software tokens, keyed by token label or token id. Refused for hardware tokens.
    public var pinFiles: [String: String]?
    /// Who may do what; see `Policy`.
    public var policy: PolicyConfig?
    /// Size of the durably reserved signature-counter block.
    public var counterBlock: Int?
    /// Sessions per software token / HSM (smart cards always get one).
    public var sessionsPerToken: Int?
    /// Kiosk enrollment: workflows, OTP notifier, activation-token issuers (docs/ENROLLMENT.md).
    public var enrollment: JSONValue?
    /// The face matcher of the enrollment's face steps and `face.compare` (docs/CONFIG.md).
    public var faceMatching: JSONValue?
    /// The MRZ reader the kiosk sends camera frames to (`mrz.read`): `{command, timeoutSeconds}` (MRZMethods.swift).
    public var mrzReader: JSONValue?
    /// Per-uid wait after a wrong PIN (docs/CONFIG.md).
    public var pinBackoff: PINBackoffConfig?
    /// Requests one connection may have in flight; more are answered `BUSY`.
    public var maxRequestsInFlight: Int?
    /// Notifications queued for one connection whose client does not read; past it the connection is closed.
    public var maxQueuedNotifications: Int?
    /// Connections open at once over all the daemon's sockets (JSON-RPC, SSH agent, CTAP); more are refused.
    public var maxConnections: Int?
    /// Connections one peer uid may have open at once over all the daemon's sockets; more are refused.
    public var maxConnectionsPerUid: Int?
    /// The SSH agent socket (docs/CONFIG.md).
    public var sshAgent: SSHAgentConfig?
    /// The CTAP 2.1 authenticator (docs/CTAP.md).
    public var ctap: CTAPConfig?
    /// The mdoc holder (docs/MDOC.md).
    public var mdoc: MDocHolderConfig?
    /// The one presence broker of every front door (docs/CONFIG.md).
    public var presence: PresenceConfig?
    /// The pinentry program the SSH agent asks for PINs and `presence.pinentry` for confirmations (docs/CONFIG.md).
    public var pinentry: PinentryConfig?
    /// Badges at the door (docs/ACCESS.md).
    public var accessControl: AccessControlConfig?

    public init() {}

    /// The top-level keys the file may hold: the names of the stored properties above.
    public static var knownKeys: Set<String> { propertyNames(of: ConfigFile()) }

    public static func load(_ path: String) throws(TesseraError) -> ConfigFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError(.invalidInput, "cannot read config file \(path)")
        }
        let config: ConfigFile
        do {
            try rejectUnknownKeys(JSONValue.parse([UInt8](data)))
            config = try JSONDecoder().decode(ConfigFile.self, from: data)
        } catch let error as TesseraError {
            throw TesseraError(.invalidInput, "config file \(path): \(error.message)")
        } catch {
            throw TesseraError(.invalidInput, "config file \(path) is invalid: \(error)")
        }
        try config.validate(path)
        return config
    }

    /// Per-door presence keys of earlier versions and the `presence` key that replaces each.
    static let retiredKeys: [(section: String, key: String, replacement: String)] = [
        ("ctap", "presenceCommand", "presence.command"),
        ("ctap", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
        ("ctap", "confirmOnSocket", "presence.confirmOnSocket"),
        ("mdoc", "presenceCommand", "presence.command"),
        ("mdoc", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
        ("sshAgent", "presenceCommand", "presence.command"),
        ("sshAgent", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
    ]

    /// Refuses keys that no setting reads: a misspelled security setting must not fall back to a default.
    static func rejectUnknownKeys(_ root: JSONValue) throws(TesseraError) {
        guard let top = root.objectValue else { throw TesseraError.invalidInput("the file must hold one JSON object") }
        for retired in retiredKeys where top[retired.section]?.objectValue?[retired.key] != nil {
            throw TesseraError.invalidInput(
                """
                \(retired.section).\(retired.key) is no longer read: one presence broker serves every door; use \
                \(retired.replacement) (the "presence" section: command, timeoutSeconds, confirmOnSocket; docs/CONFIG.md)
                """)
        }
        try unknown(in: top, known: knownKeys, section: nil)
        if let backoff = top["pinBackoff"]?.objectValue {
            try unknown(in: backoff, known: propertyNames(of: PINBackoffConfig()), section: "pinBackoff")
        }
        if let ctap = top["ctap"]?.objectValue {
            try unknown(in: ctap, known: propertyNames(of: CTAPConfig()), section: "ctap")
        }
        if let mdoc = top["mdoc"]?.objectValue {
            try unknown(in: mdoc, known: propertyNames(of: MDocHolderConfig()), section: "mdoc")
        }
        if let agent = top["sshAgent"]?.objectValue {
            try unknown(in: agent, known: propertyNames(of: SSHAgentConfig()), section: "sshAgent")
        }
        if let presence = top["presence"]?.objectValue {
            try unknown(in: presence, known: propertyNames(of: PresenceConfig()), section: "presence")
        }
        if let pinentry = top["pinentry"]?.objectValue {
            try unknown(in: pinentry, known: propertyNames(of: PinentryConfig()), section: "pinentry")
        }
        if let access = top["accessControl"]?.objectValue {
            try unknown(in: access, known: propertyNames(of: AccessControlConfig()), section: "accessControl")
            if let doors = access["doors"]?.objectValue {
                for (name, door) in doors.sorted(by: { $0.key < $1.key }) {
                    guard let fields = door.objectValue else {
                        throw TesseraError.invalidInput(
                            """
                            accessControl.doors.\(name) is a list of holders, the shape of earlier versions: a door now \
                            names its readers, {"\(name)": {"readers": [READER...], "allow": [HOLDER|BADGE-ID...], \
                            "grantCommand"?: [ARGV...], "mode"?: "cak"|"auth"}} (docs/ACCESS.md, "Doors")
                            """)
                    }
                    try unknown(
                        in: fields, known: propertyNames(of: AccessControlConfig.Door()),
                        section: "accessControl.doors.\(name)")
                }
            }
            if let issuer = access["issuer"]?.objectValue {
                let known = propertyNames(of: AccessControlConfig.Issuer(tokenId: "", keyLabel: "", certificate: ""))
                try unknown(in: issuer, known: known, section: "accessControl.issuer")
            }
            if let publisher = access["publisher"]?.objectValue {
                let known = propertyNames(
                    of: AccessControlConfig.Publisher(tokenId: "", keyLabel: "", certificate: "", directory: ""))
                try unknown(in: publisher, known: known, section: "accessControl.publisher")
            }
            if let registry = access["registry"]?.objectValue {
                let known = propertyNames(
                    of: AccessControlConfig.Registry(directory: "", publisher: "", maxAgeSeconds: 0, pollSeconds: 0))
                try unknown(in: registry, known: known, section: "accessControl.registry")
            }
        }
        guard let policy = top["policy"], !policy.isNull else { return }
        guard let rules = policy.objectValue else { throw TesseraError.invalidInput("policy must be an object") }
        try unknown(in: rules, known: propertyNames(of: PolicyConfig()), section: "policy")
        for (permission, rule) in rules {
            guard let fields = rule.objectValue else { continue }
            try unknown(in: fields, known: propertyNames(of: PolicyConfig.Rule()), section: "policy.\(permission)")
        }
    }

    private static func unknown(
        in object: [String: JSONValue], known: Set<String>,
        section: String?
    ) throws(TesseraError) {
        guard let key = object.keys.sorted().first(where: { !known.contains($0) && !$0.hasPrefix("//") }) else {
            return
        }
        let place = section.map { "key '\(key)' in \($0)" } ?? "key '\(key)'"
        throw TesseraError.invalidInput("unknown \(place) (known: \(known.sorted().joined(separator: ", ")))")
    }

    private static func propertyNames(of value: Any) -> Set<String> {
        Set(Mirror(reflecting: value).children.compactMap(\.label))
    }

    /// Range checks of the settings whose wrong value would weaken the daemon.
    func validate(_ path: String) throws(TesseraError) {
        func bad(_ message: String) -> TesseraError { TesseraError(.invalidInput, "config file \(path): \(message)") }
        do { _ = try Self.socketMode(socketMode) } catch { throw bad(error.message) }
        if let pinBackoff { do { _ = try pinBackoff.policy() } catch { throw bad(error.message) } }
        if let block = counterBlock, !Self.counterBlockRange.contains(block) {
            throw bad("counterBlock \(block) is out of range 1…1000000")
        }
        if let limit = maxRequestsInFlight, !(1...65_536).contains(limit) {
            throw bad("maxRequestsInFlight \(limit) is out of range 1…65536")
        }
        if let limit = maxQueuedNotifications, !(1...1_000_000).contains(limit) {
            throw bad("maxQueuedNotifications \(limit) is out of range 1…1000000")
        }
        let connections = maxConnections ?? Self.defaultMaxConnections
        if !(1...65_536).contains(connections) {
            throw bad("maxConnections \(connections) is out of range 1…65536")
        }
        if let perUid = maxConnectionsPerUid, !(1...connections).contains(perUid) {
            throw bad("maxConnectionsPerUid \(perUid) is out of range 1…maxConnections (\(connections))")
        }
        if let ctap {
            do { _ = try Self.socketMode(ctap.socketMode) } catch { throw bad("ctap: \(error.message)") }
        }
        if let t = presence?.timeoutSeconds, !(1...3600).contains(t) {
            throw bad("presence.timeoutSeconds \(t) is out of range 1…3600")
        }
        if presence?.command?.isEmpty == true { throw bad("presence.command must name a program") }
        if let t = pinentry?.timeoutSeconds, !(1...3600).contains(t) {
            throw bad("pinentry.timeoutSeconds \(t) is out of range 1…3600")
        }
        if pinentry?.program?.isEmpty == true { throw bad("pinentry.program must name a program") }
        if pinentry?.environment?.keys.contains(where: { $0.isEmpty || $0.contains("=") }) == true {
            throw bad("pinentry.environment names must be non-empty and without '='")
        }
        if mdoc?.presentDevices?.contains(where: \.isEmpty) == true {
            throw bad("mdoc.presentDevices must not hold an empty device")
        }
        if accessControl?.grantCommand?.isEmpty == true { throw bad("accessControl.grantCommand must name a program") }
        if let t = accessControl?.grantTimeoutSeconds, !(1...600).contains(t) {
            throw bad("accessControl.grantTimeoutSeconds \(t) is out of range 1…600")
        }
        if let t = accessControl?.publisher?.validitySeconds, !(10...31_536_000).contains(t) {
            throw bad("accessControl.publisher.validitySeconds \(t) is out of range 10…31536000")
        }
        if let registry = accessControl?.registry {
            if !(1...31_536_000).contains(registry.maxAgeSeconds) {
                throw bad("accessControl.registry.maxAgeSeconds \(registry.maxAgeSeconds) is out of range 1…31536000")
            }
            if let t = registry.pollSeconds, !(1...3600).contains(t) {
                throw bad("accessControl.registry.pollSeconds \(t) is out of range 1…3600")
            }
            if accessControl?.publisher != nil {
                throw bad("accessControl: a door that follows an office's registry does not publish one")
            }
        }
        if let t = accessControl?.crlRefreshSeconds, !(1...86_400).contains(t) {
            throw bad("accessControl.crlRefreshSeconds \(t) is out of range 1…86400")
        }
        if accessControl != nil { do { _ = try accessControl?.doorTable() } catch { throw bad(error.message) } }
    }

    static let counterBlockRange = 1...1_000_000
    static let defaultMaxConnections = 256
    static let defaultMaxConnectionsPerUid = 32

    /// The connection bounds every socket of the daemon shares.
    func connectionGate() -> ConnectionGate {
        let total = maxConnections ?? Self.defaultMaxConnections
        return ConnectionGate(
            maxConnections: total,
            maxConnectionsPerUid: maxConnectionsPerUid ?? min(Self.defaultMaxConnectionsPerUid, total))
    }

    /// `socketMode` as a mode (default 0660, or `defaultMode`: 0600 for a per-user daemon); only permission bits,
    /// written in octal.
    static func socketMode(_ text: String?, default defaultMode: UInt32 = 0o660) throws(TesseraError) -> UInt32 {
        guard let text else { return defaultMode }
        guard !text.isEmpty, text.count <= 4, let mode = UInt32(text, radix: 8), mode <= 0o777 else {
            throw TesseraError.invalidInput("socketMode '\(text)' is not an octal file mode between 0 and 0777")
        }
        return mode
    }
}

/// `policy` section: for each permission, the uids and gids (numbers or names) allowed.
public struct PolicyConfig: Codable, Sendable {
    public init() {}
    public var sign: Rule?
    public var enroll: Rule?
    public var admin: Rule?
    /// Who may check badges on a door's readers (closed without a rule, like `admin`).
    public var door: Rule?

    public struct Rule: Codable, Sendable {
        public init() {}
        public var users: [String]?
        public var groups: [String]?
    }
}

/// `pinBackoff` section: after a wrong PIN from a uid, its next PIN waits `initialSeconds`, doubling with each
/// further wrong PIN in a row up to `maxSeconds`; a correct PIN resets it. `initialSeconds: 0` turns it off.
public struct PINBackoffConfig: Codable, Sendable {
    public var initialSeconds: Double?
    public var maxSeconds: Double?

    public init() {}

    func policy() throws(TesseraError) -> PINBackoffPolicy {
        let initial = initialSeconds ?? 2
        let maximum = maxSeconds ?? max(60, initial)
        guard initial >= 0, initial <= 3600, maximum >= initial, maximum <= 86_400 else {
            throw TesseraError(
                .invalidInput, "pinBackoff: need 0 ≤ initialSeconds ≤ 3600 and initialSeconds ≤ maxSeconds ≤ 86400")
        }
        return PINBackoffPolicy(
            initial: .milliseconds(Int64(initial * 1000)), maximum: .milliseconds(Int64(maximum * 1000)))
    }
}

/// `mdoc` section: the holder's devices (its consent besides `mdoc.approve` is the `presence` section's).
public struct MDocHolderConfig: Codable, Sendable {
    /// Devices `mdoc.present` may open for callers without `admin`, besides the `--nfc-device` readers: vpcd
    /// `HOST:PORT` addresses or libnfc connstrings.
    public var presentDevices: [String]?
    public init() {}
}

/// `presence` section: the one presence broker of every front door (CTAP user presence, SSH `confirm` keys, mdoc
/// release).
public struct PresenceConfig: Codable, Sendable {
    /// Program (argv) asked for each request: the request as JSON on stdin, exit 0 = confirm, another status = deny.
    public var command: [String]?
    /// Seconds a request waits for an answer (1…3600, default 30).
    public var timeoutSeconds: Int?
    /// Whether `presence.confirm` / `presence.deny` on the main socket, from the requesting uid or an admin, answer.
    public var confirmOnSocket: Bool?
    /// Whether a pinentry CONFIRM (the `pinentry` section's program) answers too (default false).
    public var pinentry: Bool?

    public init() {}
}

/// `pinentry` section: the program that asks the user for a PIN (SSH agent) or a confirmation (`presence.pinentry`).
public struct PinentryConfig: Codable, Sendable {
    /// A program name looked up on PATH, or a path (default "pinentry").
    public var program: String?
    /// Seconds the dialog waits for the user (1…3600, default 60).
    public var timeoutSeconds: Int?
    /// Variables set for the program over the daemon's own (DISPLAY, WAYLAND_DISPLAY, XAUTHORITY…).
    public var environment: [String: String]?
    /// Whether the SSH agent asks for the PIN of a token that is not unlocked (default true).
    public var sshAgent: Bool?

    public init() {}
}

/// `sshAgent` section.
public struct SSHAgentConfig: Codable, Sendable {
    /// Socket path (the agent is off without it, unless `--ssh-agent-socket` or socket activation gives one).
    public var socket: String?
    /// Socket file mode in octal, default "0660" (group from `socketGroup`).
    public var socketMode: String?
    /// Seconds a token unlocked with `ssh-add -s` stays unlocked for the agent (default 900).
    public var pinCacheSeconds: Int?
    /// Whether a forwarded connection (`ssh -A`, known from `session-bind@openssh.com`) may sign (default true).
    public var allowForwarded: Bool?

    public init() {}
}

/// `accessControl` section: badges at the door (docs/ACCESS.md). Paths are relative to the config file's directory.
public struct AccessControlConfig: Codable, Sendable {
    /// Badge CA certificates (PEM or DER files) a badge's certificate and CHUID signer must chain to.
    public var anchors: [String]?
    /// CRL files (PEM or DER) of those CAs.
    public var crls: [String]?
    /// Seconds between readings of the anchor and CRL files (besides SIGHUP and `trust.reload`; default: never).
    public var crlRefreshSeconds: Int?
    /// Program (argv) run on each grant with the decision JSON on stdin (a relay, an external controller).
    public var grantCommand: [String]?
    /// Seconds `grantCommand` may run before it is stopped (1…600, default 10).
    public var grantTimeoutSeconds: Int?
    /// Readers `access.watch` watches when the request names none (default: every reader).
    public var readers: [String]?
    /// Door name → its readers, whom it admits, its mode and grant command (docs/ACCESS.md, "Doors").
    public var doors: [String: Door]?
    /// The badge CA of `access.issue`: its key on a PKCS#11 token and its certificate.
    public var issuer: Issuer?
    /// A building's badge office: publishes the signed door list and the badge CA's CRL into a directory.
    public var publisher: Publisher?
    /// A building's door: follows the office's list from a directory instead of its own registry.
    public var registry: Registry?

    /// `accessControl.publisher` (docs/ACCESS.md, "A building").
    public struct Publisher: Codable, Sendable {
        /// The token holding the publisher key (its PIN comes from `pinFiles`).
        public var tokenId: String
        /// CKA_LABEL of the publisher's P-256 key (the badge CA key, or a key whose certificate doors pin).
        public var keyLabel: String
        /// The publisher key's certificate (PEM or DER): the doors' `registry.publisher`.
        public var certificate: String
        /// Where the list, its `latest` pointer and the CRL are written (served to the doors by any web server).
        public var directory: String
        /// Seconds a publication is valid (10…31536000, default 86400); one is made at least every half of it.
        public var validitySeconds: Int?
    }

    /// `accessControl.registry` (docs/ACCESS.md, "A building").
    public struct Registry: Codable, Sendable {
        /// The directory the sync unit fills with the office's files.
        public var directory: String
        /// The office's publisher certificate (PEM or DER): a list must verify with its key.
        public var publisher: String
        /// The freeze bound: past this many seconds since its list was issued, the door denies every badge
        /// (REGISTRY_STALE) until a newer one arrives (1…31536000).
        public var maxAgeSeconds: Int
        /// Seconds between two looks at the directory (1…3600, default 2).
        public var pollSeconds: Int?
    }

    /// One door: a reader belongs to at most one door; a check on it applies this door's rule.
    public struct Door: Codable, Sendable {
        /// The door's readers (PC/SC reader names, libnfc connstrings); required.
        public var readers: [String]?
        /// Holders (as registered) and badge ids admitted; "*" admits every registered badge; required.
        public var allow: [String]?
        /// Program (argv) run on each grant at this door; default `accessControl.grantCommand`.
        public var grantCommand: [String]?
        /// "cak" (default) or "auth" (the PIV Authentication key after the PIN).
        public var mode: String?

        public init(readers: [String]? = nil, allow: [String]? = nil) { self.readers = readers; self.allow = allow }
    }

    public struct Issuer: Codable, Sendable {
        /// The token holding the CA key (see `tokens.list`; its PIN comes from `pinFiles`).
        public var tokenId: String
        /// CKA_LABEL of the CA's P-256 key.
        public var keyLabel: String
        /// The CA certificate (PEM or DER); it must be one of `anchors` for the badges it issues to be granted.
        public var certificate: String
    }

    public init() {}
}
