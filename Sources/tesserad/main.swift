import ArgumentParser
import Dispatch
import FoundationEssentials
import RPC
import TesseraDaemon
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The entry point: the daemon runs on the concurrency pool and the main thread only waits for it. Nothing in
/// tesserad is main-actor isolated, and valgrind 3.19 (`tessera-bench --callgrind`) cannot run an async main: it
/// crashes at the main executor's rt_sigsuspend.
@main
enum Entry {
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        Task.detached {
            await Tesserad.main()
            finished.signal()
        }
        finished.wait()
    }
}

struct Tesserad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tesserad",
        abstract: "Tessera daemon: passkeys on hardware tokens and ICAO 9303 document reading over a Unix socket.",
        discussion: """
            tesserad runs in the foreground and logs to stderr. It serves JSON-RPC 2.0 (one JSON object per line) on a Unix stream socket: --socket PATH, the socket passed by systemd (LISTEN_FDS) when socket-activated, or the default of its mode. It notifies systemd (READY=1) once serving and drains in-flight requests on SIGTERM/SIGINT. The methods and error codes are documented in docs/API.md.

            MODES
            System mode (the default; the system units tesserad.socket and tesserad.service): socket /run/tesserad/tesserad.sock, state /var/lib/tesserad, for kiosks and shared stations. Per-user mode (--user; the user units: systemctl --user enable --now tesserad.socket): the user's own daemon with sockets in $XDG_RUNTIME_DIR/tessera (tesserad.sock, ssh-agent.sock, ctap.sock) and state in $XDG_STATE_HOME/tessera (default ~/.local/state/tessera). tessera finds the user's socket before the system one. tesserad creates the mode's socket directory when it is missing; a --socket in a directory that does not exist stops start-up. See docs/INSTALL.md.

            KEY STORES
            Without --pkcs11-module, every PKCS#11 module registered with p11-kit is loaded (OpenSC, SoftHSM2, vendor modules); slots that fail are skipped. Keys are generated on the token and never leave it. When no usable token is found, an embedded SoftHSM2 token is created in STATE_DIR/softhsm through PKCS#11 (C_InitToken, C_InitPIN) with a random PIN kept in STATE_DIR/softhsm/user.pin (disable with --no-embedded-softhsm).

            PIV smart cards in PC/SC readers are key stores too (backend "piv"): keys go to retired slots 82-95 that Tessera created itself; creating them needs the card management key (--piv-management-key-file). pcscd may be absent at start: PIV cards and document readers recover when it appears.

            PINS
            Every caller PIN goes through the PIN rules (docs/API.md): a token's final try is spent only when the request says allowFinalPinTry: true (else PIN_FINAL_TRY_PROTECTED); after a wrong PIN the caller's uid waits before its next PIN (PIN_BACKOFF; pinBackoff in --config); every wrong PIN is logged with the caller's uid and pid. tesserad makes itself non-dumpable at start.

            DOCUMENTS
            documents.read reads ICAO 9303 passports and ID cards in PC/SC contactless readers and in libnfc devices given with --nfc-device (PACE preferred, BAC fallback), and verifies them against the CSCA trust anchors given with --csca (passive authentication over every data group the signed EF.SOD lists; active authentication when it lists DG15, PACE-CAM when DG14 announces it) and returns a verdict: authentic, notAuthentic (tampered data, a cloned chip, a document signer revoked by a --crl) or unverified. ICAO master lists given with --csca must be signed under a --master-list-trust certificate. SIGHUP (or trust.reload) reloads anchors and CRLs; a bad new set leaves the old one in force.

            KIOSK ENROLLMENT
            Workflows declared under "enrollment" in --config (steps such as EMAIL_INFO, PHONE_OTP, NFC_MRZ, NFC_PHASE, MDOC_PHASE, ATTRIBUTE_MATCHING, PASSKEY_CREATION), run one at a time through the enrollment.* methods and `tessera enroll-station`; every step is committed to the database, so an enrollment survives a crash and resumes. An unknown step key stops start-up. See docs/ENROLLMENT.md.

            SSH AGENT
            With --ssh-agent-socket PATH (or "sshAgent" in --config, or a second systemd socket named ssh-agent: tesserad-ssh-agent.socket), tesserad also speaks the SSH agent protocol: point SSH_AUTH_SOCK at it. It offers the SSH keys of every token (made with `tessera ssh keygen`, plus other P-256 and RSA keys on PKCS#11 tokens, also those with only a certificate, and the P-256/RSA 9A/9E keys of PIV cards that hold a certificate; never a passkey's key); a card's keys come and go with the card. `ssh-add -s TOKEN` (token id or label) logs that token in with the PIN it sends, one try, and a key that needs its token's PIN signs only after it (a login for another request does not count; a token with a PIN file counts as unlocked); `ssh-add -e TOKEN` logs it out; `ssh-add -x`/`-X` lock and unlock the agent for the calling user. Adding software keys (plain `ssh-add FILE`) is refused. Listing needs only access to the socket; signing, unlocking and locking need the `sign` permission of the policy.

            MOBILE DOCUMENTS (mdoc)
            mdoc.read reads ISO/IEC 18013-5 mdocs over NFC and verifies them against --iaca (readerAuth with --mdoc-reader-key/--mdoc-reader-cert). As a holder, tesserad keeps mdocs whose device key is a P-256 key on a PKCS#11 token (mdoc.createDeviceKey, mdoc.register; `tessera mdoc`), mdoc.present shows one as an NFC mdoc in a vpcd reader or in libnfc target mode, and mdoc.respond answers an ISO/IEC 18013-7 Annex C (Digital Credentials API) request with an HPKE-encrypted response: a request is considered only when its readerAuth chain validates by signature (and EKU) to a --mdoc-reader-root certificate whose key identifier the registration's supportedAuthorityKeyIdentifiers list, and released only after mdoc.approve by the same uid, signed by the token key (docs/MDOC.md).

            CTAP AUTHENTICATOR
            With --ctap-socket PATH (or "ctap" in --config), tesserad is a CTAP 2.1 authenticator (CTAPHID reports of 64 bytes, one per SOCK_SEQPACKET packet; with --ctap-uhid also a virtual FIDO HID device for browsers) whose credentials are the passkeys on the tokens: made over CTAP they appear in credentials.list and work with passkey.authenticate, and the other way round. User presence comes from the one presence broker ("presence" in --config: presence.command, or presence.confirm on the main socket with presence.confirmOnSocket); without either, requests that need presence are refused. Connecting needs the sign permission, making credentials enroll. With ctap.clientPin: true it offers ClientPIN (PIN/UV auth protocols 2 and 1), user verification and credential management; the token's PIN is then the lower-case hex of LEFT(SHA-256(PIN), 16), checked with C_Login (never stored, the final try never spent over CTAP) and changed with C_SetPIN; `tessera ctap set-pin` (ctap.setPin) converts a token's PIN to that form. See docs/CTAP.md.

            FILES
              STATE_DIR/tessera.sqlite
                  credentials, signature counters, enrollments and their audit
                  records, used activation tokens, mdoc registrations (SQLite, WAL)
              /run/tesserad/tesserad.sock, $XDG_RUNTIME_DIR/tessera/tesserad.sock (--user)
                  default socket when neither --socket nor systemd gives one
              $XDG_RUNTIME_DIR/tessera/ssh-agent.sock, $XDG_RUNTIME_DIR/tessera/ctap.sock
                  the SSH agent and CTAP sockets in per-user mode unless the options or the config name others
              /etc/tessera/tesserad.json
                  the packaged example configuration (pass it with --config)
              --config FILE
                  JSON: socketGroup, socketMode, policy, pinFiles, pinBackoff, maxRequestsInFlight,
                  maxQueuedNotifications, maxConnections, maxConnectionsPerUid, sshAgent, ctap
                  (docs/CONFIG.md); unknown keys stop start-up;
                  enrollment workflows, notifier, issuers (docs/ENROLLMENT.md)

            EXIT STATUS
              0   stopped by SIGTERM or SIGINT after draining connections
              1   start-up failed (an unknown key or invalid value in the config, an unknown socketGroup or
                  policy user/group, an unreadable or unparseable --csca file, an invalid enrollment workflow,
                  another tesserad serves the socket, a regular file at the socket path, database); the
                  reason, naming the setting or file, is on stderr
              64  usage error

            EXAMPLES
              tesserad
              tesserad --user
              tesserad --socket /tmp/t.sock --state-dir /tmp/t --pkcs11-module /usr/lib/x86_64-linux-gnu/opensc-pkcs11.so
              tesserad --socket /tmp/t.sock --state-dir /tmp/t --csca /etc/tessera/csca --nfc-device pn532_uart:/dev/ttyUSB0
            """,
        version: Daemon.version)

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Unix socket to listen on (created with its final mode, default 0660; a stale socket file is replaced). Default: /run/tesserad/tesserad.sock, or $XDG_RUNTIME_DIR/tessera/tesserad.sock with --user.",
            valueName: "PATH"))
    var socket: String?

    @Flag(
        name: .long,
        help:
            "Per-user mode: the defaults of the user's own daemon (sockets in $XDG_RUNTIME_DIR/tessera, including the SSH agent and CTAP sockets; state in $XDG_STATE_HOME/tessera). See MODES."
    )
    var user = false

    @Option(
        name: .customLong("state-dir"),
        help: ArgumentHelp(
            "Directory for the database, the daemon secret (daemon.secret, 0600) and the embedded token (created 0700). Default: $STATE_DIRECTORY, else /var/lib/tesserad, or $XDG_STATE_HOME/tessera with --user.",
            valueName: "DIR"))
    var stateDir: String?

    @Option(
        name: .customLong("pkcs11-module"),
        help: ArgumentHelp("PKCS#11 module to load instead of p11-kit's registry (repeatable).", valueName: "PATH"))
    var pkcs11Modules: [String] = []

    @Option(name: .long, help: ArgumentHelp("JSON configuration file.", valueName: "FILE"))
    var config: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "CSCA trust anchors for passive authentication: a certificate file, a directory of them, or an ICAO master list (repeatable). Every file must be readable and parse, else start-up fails; a master list is accepted only when its signature verifies and its signer chains to a --master-list-trust certificate.",
            valueName: "PATH"))
    var csca: [String] = []

    @Option(
        name: .customLong("master-list-trust"),
        help: ArgumentHelp(
            "Certificate (PEM/DER file or directory; a CSCA of the issuing state) that CSCA master lists given with --csca must be signed under (repeatable).",
            valueName: "CERT"))
    var masterListTrust: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Certificate revocation lists of the CSCAs (PEM/DER file or directory; repeatable). Each must be signed by a --csca anchor, or start-up fails. A revoked document signer makes passive authentication invalid (verdict reason DS_REVOKED).",
            valueName: "PATH"))
    var crl: [String] = []

    @Flag(name: .customLong("no-embedded-softhsm"), help: "Never create the embedded SoftHSM2 token.")
    var noEmbeddedSoftHSM = false

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    @Option(
        name: .customLong("nfc-device"),
        help: ArgumentHelp(
            "libnfc reader to offer beside PC/SC readers, as a connstring such as pn532_uart:/dev/ttyUSB0 or pn53x_usb:003:005; 'auto' = every device libnfc finds (repeatable).",
            valueName: "CONNSTRING"))
    var nfcDevices: [String] = []

    @Option(
        name: .customLong("piv-management-key-file"),
        help: ArgumentHelp(
            "File with the PIV card management key for creating and deleting keys: hex, optionally prefixed 3des:, aes128:, aes192: or aes256: (default by length: 24 bytes 3DES, 16 AES-128, 32 AES-256). Never logged.",
            valueName: "FILE"))
    var pivManagementKeyFile: String?

    @Flag(
        name: .customLong("allow-default-piv-management-key"),
        help:
            "Accept the well-known default PIV management key 010203…08 ×3 (used when no key file is given). Test cards only."
    )
    var allowDefaultPIVManagementKey = false

    @Option(
        name: .customLong("ssh-agent-socket"),
        help: ArgumentHelp(
            "Also serve the SSH agent protocol on this Unix socket (mode 0660; for SSH_AUTH_SOCK). See SSH AGENT.",
            valueName: "PATH"))
    var sshAgentSocket: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "IACA trust anchors for mdoc.read (ISO/IEC 18013-5 mobile documents): a PEM (one or more certificates) or DER certificate file (repeatable). A trust list of its own: CSCAs are never IACAs. Every file must parse, else start-up fails.",
            valueName: "PATH"))
    var iaca: [String] = []

    @Option(
        name: .customLong("mdoc-reader-key"),
        help: ArgumentHelp(
            "Private key (PEM, P-256/384/521) that signs mdoc.read requests (readerAuth); needs --mdoc-reader-cert.",
            valueName: "FILE"))
    var mdocReaderKey: String?

    @Option(
        name: .customLong("mdoc-reader-cert"),
        help: ArgumentHelp(
            "The reader authentication certificate chain for --mdoc-reader-key, PEM, leaf first.", valueName: "FILE"))
    var mdocReaderCert: String?

    @Option(
        name: .customLong("mdoc-reader-root"),
        help: ArgumentHelp(
            "A reader root certificate the mdoc holder trusts (PEM or DER file; repeatable): mdoc.present and mdoc.respond answer a request only when its readerAuth chain validates to one of them (signatures, validity, EKU 1.0.18013.5.1.6) and the registration lists its subject key identifier. Every file must parse, else start-up fails.",
            valueName: "PATH"))
    var mdocReaderRoot: [String] = []

    @Option(
        name: .customLong("ctap-socket"),
        help: ArgumentHelp(
            "Also serve a CTAP 2.1 authenticator on this SOCK_SEQPACKET Unix socket (mode 0660). See CTAP AUTHENTICATOR.",
            valueName: "PATH"))
    var ctapSocket: String?

    @Flag(
        name: .customLong("ctap-uhid"),
        help:
            "Also serve the CTAP 2.1 authenticator as a virtual FIDO HID device through /dev/uhid, for browsers (udev/70-tessera-ctap.rules). See CTAP AUTHENTICATOR."
    )
    var ctapUHID = false

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let paths: DaemonPaths
        do { paths = try DaemonPaths.of(user ? .user : .system, environment: environment) } catch {
            OpenFile.standardError.write("tesserad: \(error.message)\n")
            throw ExitCode(1)
        }
        let state = stateDir ?? environment["STATE_DIRECTORY"] ?? paths.stateDirectory
        var options = DaemonOptions(
            socketPath: socket, stateDir: state, pkcs11Modules: pkcs11Modules,
            configFile: config, cscaPaths: csca, embeddedSoftHSM: !noEmbeddedSoftHSM,
            logLevel: logLevel)
        options.nfcDevices = nfcDevices
        options.masterListTrustPaths = masterListTrust
        options.crlPaths = crl
        options.pivManagementKeyFile = pivManagementKeyFile
        options.allowDefaultPIVManagementKey = allowDefaultPIVManagementKey
        options.sshAgentSocket = sshAgentSocket
        options.iacaPaths = iaca
        options.mdocReaderKeyPath = mdocReaderKey
        options.mdocReaderCertificatePath = mdocReaderCert
        options.mdocReaderRootPaths = mdocReaderRoot
        options.ctapSocket = ctapSocket
        options.ctapUHID = ctapUHID
        options.paths = paths
        do {
            try await Daemon.run(options)
        } catch {
            OpenFile.standardError.write("tesserad: \(error)\n")
            throw ExitCode(1)
        }
    }
}
