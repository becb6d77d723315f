// swift-tools-version:6.2
import PackageDescription

/// Tessera: hardware-backed passkeys and ICAO 9303 document reading, served by `tesserad` over a Unix socket.
/// Layering (imports point downwards only): executables → TesseraDaemon → RPC / services → devices → protocols → C shims.

let package = Package(
    name: "Tessera",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "tesserad", targets: ["tesserad"]),
        .executable(name: "tessera", targets: ["tessera"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        // MARK: C libraries (thin system-library shims; only device/crypto wrapper modules import them)
        // pcsc-lite's pkg-config file adds -pthread, which SwiftPM rejects with a warning: the include path is
        // given to the one module that imports it instead (see the PCSC target).
        .systemLibrary(name: "CPCSCLite", path: "Sources/C/CPCSCLite", providers: [.apt(["libpcsclite-dev"])]),
        .systemLibrary(
            name: "CPKCS11", path: "Sources/C/CPKCS11", pkgConfig: "p11-kit-1",
            providers: [.apt(["libp11-kit-dev"])]),
        .systemLibrary(
            name: "CNFC", path: "Sources/C/CNFC", pkgConfig: "libnfc",
            providers: [.apt(["libnfc-dev"])]),
        /// The system SQLite, for the credential store's one small layer over it (CredentialStore/SQLite.swift).
        .systemLibrary(
            name: "CSQLite", path: "Sources/C/CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CLibCrypto", path: "Sources/C/CLibCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),

        /// Small POSIX helpers Swift cannot express without raw pointers (sd_notify, secret memory, prctl), and the
        /// PIN verifier's HMAC-SHA-256 with its states in secret memory (libcrypto's SHA-256).
        .target(
            name: "CSystemShims", path: "Sources/C/CSystemShims", linkerSettings: [.linkedLibrary("crypto")]),

        // MARK: Foundations and pure protocols (no I/O)
        .target(name: "TesseraCore"),
        /// What touches threads and processes, kept out of the pure TesseraCore: `DedicatedThread`,
        /// `ScheduledTaskExecutor`, `ProgramRunner`, `Failpoint`, `AtomicFile`.
        .target(name: "TesseraRuntime", dependencies: ["TesseraCore", "CSystemShims"]),
        /// Who asks at a front door, and the owner rule every door applies (docs/API.md, "Owners").
        .target(name: "Ownership"),
        .target(name: "CBOR", dependencies: ["TesseraCore"]),
        .target(
            name: "WebAuthn",
            dependencies: [
                "TesseraCore", "CBOR", "CryptoPrimitives", .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .target(name: "APDU", dependencies: ["TesseraCore"]),
        .target(name: "MRZ", dependencies: ["TesseraCore"]),
        .target(name: "PIV", dependencies: ["TesseraCore", "APDU", "CryptoPrimitives"]),
        .target(
            name: "CryptoPrimitives",
            dependencies: [
                "TesseraCore", "CLibCrypto", .product(name: "Crypto", package: "swift-crypto"),
            ]),
        /// The SSH agent protocol (RFC 9987): wire format, key and signature blobs, the agent state machine.
        .target(
            name: "SSHAgent",
            dependencies: [
                "TesseraCore", "Ownership", "CryptoPrimitives", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),
        /// CTAPHID framing and channels (CTAP 2.1 §11.2), transport-free.
        .target(name: "CTAPHID"),
        /// The CTAP 2.1 authenticator state machine over the `CTAP2Backend` seam.
        .target(
            name: "CTAP2",
            dependencies: [
                "TesseraCore", "CBOR", "CryptoPrimitives", .product(name: "Crypto", package: "swift-crypto"),
            ]),
        /// X.509 certificates as documents and mdoc read them (`ParsedCertificate`, `PEM`), the DER helpers they share,
        /// and the throw-away test CA (`TestCA`).
        .target(name: "X509Support", dependencies: ["TesseraCore", "APDU", "CryptoPrimitives"]),
        .target(
            name: "ICAO",
            dependencies: [
                "TesseraCore", "APDU", "MRZ", "CryptoPrimitives", "X509Support",
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]),

        /// ISO/IEC 18013-5 mobile documents (mdoc): engagement, session encryption, requests, responses, COSE,
        /// verification and test issuance. Pure: no I/O. docs/MDOC.md
        .target(
            name: "MDoc",
            dependencies: [
                "TesseraCore", "CBOR", "APDU", "CryptoPrimitives", "X509Support",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ]),

        /// The one presence broker of every front door (CTAP user presence, SSH `confirm` keys, mdoc release): the
        /// configured command through `ProgramRunner`, or an answer on the socket from the asking uid or an admin.
        .target(
            name: "Presence",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "Pinentry", .product(name: "Logging", package: "swift-log"),
            ]),
        /// pinentry's Assuan protocol (the line codec and one dialog) and the program run through `ProgramRunner`.
        .target(name: "Pinentry", dependencies: ["TesseraCore", "TesseraRuntime"]),
        /// The face matcher program's protocol and runner (docs/ENROLLMENT.md, "Face matching").
        .target(
            name: "FaceMatching",
            dependencies: ["TesseraCore", "TesseraRuntime", .product(name: "Logging", package: "swift-log")]),

        /// The token interface every key user sees (`KeyStoreToken`, `KeyStore`, `TokenKey`, `RSASignatureHash`) and
        /// the PIN rules applied to a caller's PIN on the way to a token (`PINRules`, `PINAttempt`, `PINCaller`).
        .target(
            name: "KeyStores",
            dependencies: [
                "TesseraCore", "Ownership", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),

        // MARK: Devices and storage (I/O at the edges)
        .target(
            name: "PKCS11",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "CPKCS11", "CSystemShims", "CryptoPrimitives", "KeyStores",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .target(
            name: "PCSC", dependencies: ["TesseraCore", "TesseraRuntime", "APDU", "CPCSCLite"],
            swiftSettings: [.unsafeFlags(["-Xcc", "-I/usr/include/PCSC"])]),
        .target(
            name: "VPCD",
            dependencies: [
                "TesseraCore", "APDU",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]),
        .target(
            name: "Emulation",
            dependencies: [
                "TesseraCore", "APDU", "MRZ", "ICAO", "CryptoPrimitives", "PIV", "MDoc", "X509Support",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .target(name: "NFC", dependencies: ["TesseraCore", "TesseraRuntime", "APDU", "CNFC"]),
        .target(
            name: "PN532Emulator", dependencies: ["TesseraCore", "TesseraRuntime", "APDU", "CSystemShims"]),
        /// The daemon's SQLite database and its stores, on the system libsqlite3.
        .target(name: "CredentialStore", dependencies: ["TesseraCore", "TesseraRuntime", "CSQLite"]),

        // MARK: Services
        .target(
            name: "Passkeys",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "Ownership", "WebAuthn", "PKCS11", "KeyStores", "CredentialStore",
                "CryptoPrimitives",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        .target(
            name: "PIVKeyStore",
            dependencies: [
                "TesseraCore", "APDU", "PIV", "PCSC", "KeyStores", "CryptoPrimitives", "CredentialStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ]),
        .target(
            name: "Documents",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "APDU", "MRZ", "ICAO", "PCSC", "NFC", "CryptoPrimitives",
                "X509Support",
                .product(name: "Logging", package: "swift-log"),
            ]),

        /// A building's door list (docs/ACCESS.md, "A building"): the signed, numbered, expiring list a badge office
        /// publishes and the rules a door follows it by, and the badge CA's CRL. Pure: no I/O.
        .target(
            name: "DoorList",
            dependencies: ["TesseraCore", "APDU", "ICAO", "CryptoPrimitives", "X509Support"]),

        /// Badges at the door (docs/ACCESS.md): the PIV PKI-CAK / PKI-AUTH check over any APDU transport, the
        /// decision with the badge's lifecycle, badge issuance onto a PIV card, badges in the credential store.
        .target(
            name: "AccessControl",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "APDU", "PIV", "CryptoPrimitives", "ICAO", "KeyStores", "Passkeys",
                "CredentialStore", "Documents", "X509Support", "DoorList",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ]),

        /// Kiosk enrollment: resumable multi-step workflows (contact, OTP, chip read, matching, passkey). docs/ENROLLMENT.md
        .target(
            name: "Enrollment",
            dependencies: [
                "TesseraCore", "MRZ", "Documents", "Passkeys", "Ownership", "CredentialStore", "MDoc", "CBOR",
                "FaceMatching", .product(name: "Crypto", package: "swift-crypto"), "TesseraRuntime", "KeyStores",
                .product(name: "Logging", package: "swift-log"),
            ]),

        // MARK: Socket
        .target(
            name: "RPC",
            dependencies: [
                "TesseraCore", "TesseraRuntime",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        /// The kiosk station's screen (`tessera kiosk`): an HTTP server (swift-nio) serving the station's page from the
        /// binary and bridging it to the enrollment methods of tesserad for one workflow. docs/KIOSK.md
        .target(
            name: "KioskStation",
            dependencies: [
                "TesseraCore", "RPC", "CLISupport", "MRZ",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]),

        // MARK: Daemon wiring and executables
        /// The CTAP 2.1 authenticator door: its backend on the passkey service, the CTAPHID hub and its transports
        /// (the SEQPACKET socket, `/dev/uhid`). docs/CTAP.md
        .target(
            name: "CTAPAuthenticator",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "CBOR", "CSystemShims", "CTAP2", "CTAPHID", "CredentialStore",
                "KeyStores", "Ownership",
                "Passkeys",
                "Presence", "RPC", "WebAuthn", .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]),
        /// The SSH agent door: the `SSHAgentBackend` on the key stores, the agent socket's frames and service.
        .target(
            name: "SSHAgentDoor",
            dependencies: [
                "TesseraCore", "CredentialStore", "Ownership", "PKCS11", "Passkeys", "Pinentry", "Presence", "RPC",
                "SSHAgent", .product(name: "Logging", package: "swift-log"), "KeyStores",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]),
        /// The mdoc holder door (docs/MDOC.md, "Holder"): device keys on tokens, registrations by owner, reader
        /// trust by readerAuth chain to the reader roots, the release of a DeviceResponse after consent.
        .target(
            name: "MDocHolderDoor",
            dependencies: [
                "TesseraCore", "CredentialStore", "KeyStores", "MDoc", "Ownership", "Passkeys", "X509Support",
                "Presence", "Emulation", "NFC", "VPCD", "TesseraRuntime",
            ]),
        .target(
            name: "TesseraDaemon",
            dependencies: [
                "FaceMatching",
                "TesseraCore", "RPC", "CSystemShims", "Passkeys", "Ownership", "CredentialStore", "MRZ", "Documents",
                "PIVKeyStore", "PIV", "KeyStores",
                "ICAO", "NFC", "Enrollment", "Emulation", "SSHAgent", "MDoc", "APDU",
                "CTAP2", "CTAPAuthenticator", "MDocHolderDoor", "Pinentry", "Presence", "SSHAgentDoor", "AccessControl",
                "DoorList", "TesseraRuntime", "CryptoPrimitives",
                .product(name: "Logging", package: "swift-log"), .product(name: "X509", package: "swift-certificates"),
                "X509Support",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]),
        .executableTarget(
            name: "tesserad",
            dependencies: [
                "TesseraDaemon", "RPC", "TesseraRuntime",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        /// The tessera CLI's pure logic (enroll-station's JSON-schema forms, progress text), unit-tested.
        .target(name: "CLISupport", dependencies: ["TesseraCore"]),
        .executableTarget(
            name: "tessera",
            dependencies: [
                "TesseraCore", "RPC", "CLISupport", "MRZ", "Emulation", "VPCD", "ICAO", "PN532Emulator", "NFC", "APDU",
                "PCSC", "Documents", .product(name: "ArgumentParser", package: "swift-argument-parser"), "MDoc", "CBOR",
                "FaceMatching", "KioskStation", .product(name: "Crypto", package: "swift-crypto"), "AccessControl",
                "PIV",
                .product(name: "X509", package: "swift-certificates"), "TesseraRuntime", "X509Support",
            ]),

        // MARK: Benchmarks (a small harness; run with `make bench`)
        .executableTarget(
            name: "tessera-bench",
            dependencies: [
                "TesseraCore", "TesseraRuntime", "RPC", "PKCS11", "TesseraTestSupport",
                "APDU", "PIV", "PCSC", "Emulation", "VPCD",
            ],
            path: "Benchmarks/tessera-bench",
            // main.swift holds `@main`; with a second source file it must be parsed as a library.
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]),
        .executableTarget(
            name: "document-bench",
            dependencies: [
                "Documents", "Emulation", "ICAO", "MRZ", "MDoc", "CBOR", "APDU", "PCSC", "VPCD", "TesseraCore",
                "TesseraTestSupport", .product(name: "Crypto", package: "swift-crypto"), "AccessControl",
                "CredentialStore", "PIV", "PN532Emulator", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/document-bench"),

        // MARK: Tests
        /// Starts real components for tests: SoftHSM2 tokens in temp dirs, a private pcscd with vpcd readers.
        .target(name: "TesseraTestSupport", dependencies: ["TesseraCore", "TesseraRuntime"]),
        /// A passkey service on a spare SoftHSM2 token over a temporary database, for the front doors' unit tests.
        .target(
            name: "PasskeyTestSupport",
            dependencies: [
                "CredentialStore", "KeyStores", "Passkeys", "TesseraCore", "TesseraTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "TesseraRuntimeTests", dependencies: ["TesseraRuntime", "TesseraCore", "TesseraTestSupport"]),
        .testTarget(
            name: "TesseraCoreTests",
            dependencies: ["TesseraCore", "TesseraTestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "CBORTests", dependencies: ["CBOR", "TesseraCore", "TesseraTestSupport"]),
        .testTarget(
            name: "SSHAgentTests",
            dependencies: [
                "SSHAgent", "TesseraCore", "TesseraTestSupport", .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "FaceMatchingTests",
            dependencies: [
                "FaceMatching", "TesseraCore", "TesseraTestSupport", .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "PresenceTests",
            dependencies: [
                "Pinentry", "Presence", "TesseraCore", "TesseraTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "WebAuthnTests",
            dependencies: [
                "WebAuthn", "CBOR", "TesseraCore", "TesseraTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(name: "APDUTests", dependencies: ["APDU", "TesseraCore"]),
        .testTarget(
            name: "PinentryTests", dependencies: ["Pinentry", "TesseraCore", "TesseraRuntime", "TesseraTestSupport"]),
        .testTarget(name: "CTAPHIDTests", dependencies: ["CTAPHID", "TesseraTestSupport"]),
        .testTarget(
            name: "CTAPAuthenticatorTests",
            dependencies: [
                "PasskeyTestSupport",
                "CTAPAuthenticator", "CTAP2", "CTAPHID", "CredentialStore", "KeyStores", "Passkeys", "Presence", "RPC",
                "TesseraCore",
                "TesseraTestSupport", .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "SSHAgentDoorTests",
            dependencies: [
                "PasskeyTestSupport",
                "SSHAgentDoor", "SSHAgent", "CredentialStore", "KeyStores", "Ownership", "Passkeys", "Presence",
                "TesseraCore",
                "TesseraTestSupport", .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "MDocHolderDoorTests",
            dependencies: [
                "PasskeyTestSupport",
                "MDocHolderDoor", "MDoc", "CBOR", "CredentialStore", "ICAO", "KeyStores", "Passkeys", "TesseraCore",
                "X509Support", "Presence",
                "TesseraTestSupport", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "CTAP2Tests",
            dependencies: ["CTAP2", "CBOR", "TesseraCore", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "MRZTests", dependencies: ["MRZ", "TesseraCore"]),
        .testTarget(name: "X509SupportTests", dependencies: ["X509Support", "TesseraCore", "TesseraTestSupport"]),
        .testTarget(
            name: "ICAOTests",
            dependencies: [
                "ICAO", "CryptoPrimitives", "APDU", "MRZ", "TesseraCore", "TesseraTestSupport", "X509Support",
            ]),
        .testTarget(
            name: "PKCS11Tests",
            dependencies: [
                "PKCS11", "TesseraCore", "TesseraRuntime", "TesseraTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            // A PKCS#11 module the tests compile themselves (TransientFailureTests), not a source of the target.
            exclude: ["Fixtures"]),
        .testTarget(name: "PasskeysTests", dependencies: ["Passkeys", "TesseraCore", "CredentialStore"]),
        .testTarget(
            name: "KeyStoresTests",
            dependencies: ["KeyStores", "TesseraCore", .product(name: "Logging", package: "swift-log")]),
        .testTarget(
            name: "CredentialStoreTests",
            dependencies: [
                "CredentialStore", "TesseraCore", "TesseraTestSupport",
            ],
            // Databases written by earlier releases (Fixtures/README.md), read through `#filePath`.
            exclude: ["Fixtures"]),
        .testTarget(name: "OwnershipTests", dependencies: ["Ownership"]),
        .testTarget(name: "CLISupportTests", dependencies: ["CLISupport", "TesseraCore"]),
        .testTarget(name: "KioskStationTests", dependencies: ["KioskStation", "RPC", "TesseraCore"]),
        .testTarget(
            name: "RPCTests",
            dependencies: [
                "RPC", "TesseraCore", "TesseraTestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(name: "PCSCTests", dependencies: ["PCSC", "VPCD", "APDU", "TesseraCore", "TesseraTestSupport"]),
        .testTarget(
            name: "DocumentsTests",
            dependencies: [
                "Documents", "Emulation", "ICAO", "APDU", "MRZ", "CryptoPrimitives", "TesseraCore",
                "TesseraTestSupport",
            ]),
        .testTarget(
            name: "PIVTests",
            dependencies: [
                "PIV", "PIVKeyStore", "KeyStores", "Passkeys", "Emulation", "PCSC", "VPCD", "APDU", "TesseraCore",
                "TesseraTestSupport",
                "CredentialStore", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "NFCTests",
            dependencies: [
                "NFC", "PN532Emulator", "Emulation", "APDU", "TesseraCore", "TesseraTestSupport", "ICAO",
            ]),
        .testTarget(
            name: "EnrollmentTests",
            dependencies: [
                "Enrollment", "MRZ", "TesseraCore", "MDoc", "CBOR",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "MDocTests",
            dependencies: [
                "MDoc", "CBOR", "APDU", "ICAO", "CryptoPrimitives", "TesseraCore", "TesseraTestSupport", "X509Support",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "AccessControlTests",
            dependencies: [
                "AccessControl", "APDU", "CredentialStore", "Emulation", "ICAO", "PCSC", "PIV", "Passkeys",
                "TesseraCore", "X509Support", "DoorList",
                "TesseraTestSupport", "VPCD", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]),
        .testTarget(
            name: "EmulationTests",
            dependencies: [
                "Emulation", "ICAO", "APDU", "MRZ", "TesseraCore", "TesseraTestSupport",
                "PCSC", "VPCD", "CryptoPrimitives", "X509Support",
                "PIV", .product(name: "Crypto", package: "swift-crypto"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)

// MARK: Fuzzing (only with TESSERA_FUZZ=1, as `make fuzz` sets it: `swift build`/`swift test` never see this target)
/// One libFuzzer binary; `TESSERA_FUZZ_TARGET` picks the parser. Built with `-sanitize=fuzzer,address`
/// into `.build-fuzz` by scripts/fuzz.sh. See CONTRIBUTING.md, "Fuzzing and sanitizers".
if Context.environment["TESSERA_FUZZ"] == "1" {
    package.targets.append(
        .executableTarget(
            name: "tessera-fuzz",
            dependencies: [
                "TesseraCore", "RPC", "CBOR", "APDU", "MRZ", "ICAO", "Enrollment", "PN532Emulator", "VPCD", "SSHAgent",
                "MDoc", "CTAPHID", "CTAP2", "FaceMatching", "AccessControl", "TesseraRuntime",
                .product(name: "X509", package: "swift-certificates"), "X509Support",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ], path: "Tests/Fuzz/Harness",
            // The harness's @main looks libFuzzer's driver up with dlsym.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--export-dynamic-symbol=LLVMFuzzerRunDriver"])]))
}

// Warnings are errors in every Tessera target (tests and benchmarks too) and in every build, local and CI alike,
// so "no warnings" cannot drift. Dependencies are not affected.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [.treatAllWarnings(as: .error)]
}
