import FoundationEssentials
import PKCS11
import TesseraCore
import TesseraTestSupport

/// One SoftHSM2 fixture and one provider (loaded by path) for the whole test process.
enum SoftHSMEnvironment {
    struct Shared: Sendable {
        let fixture: SoftHSMFixture
        let provider: PKCS11Provider
    }

    /// Created on first use; concurrent callers await the same task instead of blocking on a lazy global.
    private static let shared = Task { () -> Result<Shared, TesseraError> in
        do throws(TesseraError) {
            let fixture = try await SoftHSMFixture.shared()
            let provider = try PKCS11Provider(modulePaths: [fixture.modulePath])
            return .success(Shared(fixture: fixture, provider: provider))
        } catch {
            return .failure(error)
        }
    }

    static func get() async throws -> Shared { try await shared.value.get() }

    static func token(label: String) async throws -> PKCS11Token {
        let env = try await get()
        guard let token = env.provider.tokens().first(where: { $0.info.label == label }) else {
            throw TesseraError(.tokenNotPresent, "no token labelled \(label)")
        }
        return token
    }

    /// A spare token of its own (own login state), so tests do not depend on each other's order.
    static func freshToken(_ name: String) async throws -> PKCS11Token {
        try await token(label: try await get().fixture.claimSpareToken())
    }

    static func loggedInToken(_ name: String) async throws -> PKCS11Token {
        let token = try await freshToken(name)
        try await token.login(pin: SoftHSMFixture.defaultPIN)
        return token
    }
}

/// Checks an ECDSA P-256 / SHA-256 signature with the `openssl` CLI, independently of the token.
enum OpenSSLVerifier {
    static func verify(point: [UInt8], message: [UInt8], rawSignature: [UInt8]) async throws -> Bool {
        precondition(point.count == 65 && rawSignature.count == 64)
        let dir = URL(fileURLWithPath: Scratch.directory("p11-verify"))
        defer { try? FileManager.default.removeItem(at: dir) }

        // SubjectPublicKeyInfo { id-ecPublicKey, prime256v1 } BIT STRING(point)
        let spkiPrefix: [UInt8] = [
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A,
            0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ]
        let base64 = Data(spkiPrefix + point).base64EncodedString(options: [
            .lineLength64Characters, .endLineWithLineFeed,
        ])
        let pem = "-----BEGIN PUBLIC KEY-----\n\(base64)\n-----END PUBLIC KEY-----\n"
        let pemURL = dir.appendingPathComponent("pub.pem")
        let sigURL = dir.appendingPathComponent("sig.der")
        let msgURL = dir.appendingPathComponent("msg.bin")
        try Data(pem.utf8).write(to: pemURL)
        try Data(ECDSASignature.derFromRaw(rawSignature)).write(to: sigURL)
        try Data(message).write(to: msgURL)

        let r = try await Subprocess.run(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-verify", pemURL.path, "-signature", sigURL.path,
                msgURL.path,
            ])
        return r.status == 0 && r.output.contains("Verified OK")
    }
}

/// The `TesseraError` code thrown by `body`, or nil when it did not throw.
func errorCode<T>(_ body: () async throws -> T) async -> TesseraError.Code? {
    do {
        _ = try await body()
        return nil
    } catch let error as TesseraError {
        return error.code
    } catch {
        return "NOT_A_TESSERA_ERROR"
    }
}
