import Foundation
import TesseraCore

/// Command-line options of `tesserad` (the stable contract; see `tesserad --help`).
public struct DaemonOptions: Sendable {
    public var socketPath: String?
    public var stateDir: String
    public var pkcs11Modules: [String]
    public var configFile: String?
    public var cscaPaths: [String]
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

    public init(socketPath: String?, stateDir: String, pkcs11Modules: [String] = [], configFile: String? = nil,
                cscaPaths: [String] = [], embeddedSoftHSM: Bool = true, logLevel: String = "info") {
        self.socketPath = socketPath; self.stateDir = stateDir; self.pkcs11Modules = pkcs11Modules
        self.configFile = configFile; self.cscaPaths = cscaPaths; self.embeddedSoftHSM = embeddedSoftHSM
        self.logLevel = logLevel
    }
}

/// The optional JSON configuration file (`--config FILE`); every key is optional. See docs/CONFIG.md.
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
    /// The SSH agent socket (docs/CONFIG.md).
    public var sshAgent: SSHAgentConfig?

    public init() {}

    public static func load(_ path: String) throws(TesseraError) -> ConfigFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError(.invalidInput, "cannot read config file \(path)")
        }
        do {
            return try JSONDecoder().decode(ConfigFile.self, from: data)
        } catch {
            throw TesseraError(.invalidInput, "config file \(path) is invalid: \(error)")
        }
    }
}

/// `policy` section: for each permission, the uids and gids (numbers or names) allowed.
public struct PolicyConfig: Codable, Sendable {
    public var sign: Rule?
    public var enroll: Rule?
    public var admin: Rule?

    public struct Rule: Codable, Sendable {
        public var users: [String]?
        public var groups: [String]?
    }
}

/// `sshAgent` section.
public struct SSHAgentConfig: Codable, Sendable {
    /// Socket path (the agent is off without it, unless `--ssh-agent-socket` or socket activation gives one).
    public var socket: String?
    /// Socket file mode in octal, default "0660" (group from `socketGroup`).
    public var socketMode: String?
    /// Seconds a token unlocked with `ssh-add -s` stays unlocked for the agent (default 900).
    public var pinCacheSeconds: Int?
    /// Program (argv) that approves a signature with a `confirm` key: JSON description on stdin, exit 0 = approve.
    public var presenceCommand: [String]?
    /// Seconds `presenceCommand` may take before the signature is refused (default 30).
    public var presenceTimeoutSeconds: Int?
}
