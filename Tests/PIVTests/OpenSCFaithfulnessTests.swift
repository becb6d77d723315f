import Crypto
import Emulation
import FoundationEssentials
import PIV
import TesseraCore
import TesseraTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// OpenSC's PIV driver (opensc-tool, piv-tool, opensc-pkcs11 via pkcs11-tool) against the emulated card.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct OpenSCFaithfulnessTests {
    static let module = "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"

    @Test func openSCRecognisesListsAndSignsWithTheEmulatedCard() async throws {
        let h = try await PIVHarness.start()
        defer { Task { await h.stop() } }
        let card = EmulatedPIVCard(state: .factoryNew(serial: 3001))
        let link = try await h.insert(card)
        defer { Task { await link.remove() } }
        let token = try #require(await h.token())  // pcscd has seen the card
        let dir = h.directory
        func run(_ args: [String], env: [String] = []) async throws -> (Int32, String) {
            try await h.pcscd.runClient("/usr/bin/env", env + args, timeout: 60)
        }

        var (status, out) = try await run(["opensc-tool", "--list-readers"])
        #expect(status == 0 && out.contains(h.pcscd.readerName), "\(out)")
        (status, out) = try await run(["opensc-tool", "--reader", "0", "--atr"])
        #expect(out.contains(Hex.encode(EmulatedPIVCard.defaultATR).chunked2()), "\(out)")
        (status, out) = try await run(["opensc-tool", "--reader", "0", "--name"])
        #expect(out.contains("Personal Identity Verification Card"), "\(out)")

        // piv-tool: mutual authentication with the default 3DES key (9B, alg 03), then P-256 generation in 9A.
        // (piv-tool 0.23 fails afterwards to rebuild the EC key with OpenSSL 3 — "invalid curve" — a piv-tool bug
        // on the host side; the card has generated the key by then, which is what is checked.)
        let keyFile = dir + "/mgmt.key"
        try Data(Hex.encode(PIV.defaultManagementKey).utf8).write(to: URL(fileURLWithPath: keyFile))
        (status, out) = try await run(
            ["piv-tool", "--reader", "0", "-A", "M:9B:03", "-G", "9A:11"], env: ["PIV_EXT_AUTH_KEY=\(keyFile)"])
        let point = try #require(await card.publicKey(slot: 0x9A), "piv-tool did not generate a key: \(out)")
        let publicKey = try P256.Signing.PublicKey(x963Representation: point)

        // A certificate for that key (signed by another key: OpenSC only needs its public key), loaded with piv-tool.
        let pubPEM = dir + "/pub.pem", signer = dir + "/signer.pem", certPEM = dir + "/cert.pem"
        try Data(publicKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: pubPEM))
        try Data(P256.Signing.PrivateKey().pemRepresentation.utf8).write(to: URL(fileURLWithPath: signer))
        (status, out) = try await run([
            "openssl", "x509", "-new", "-subj", "/CN=tessera-piv-test", "-key", signer,
            "-force_pubkey", pubPEM, "-days", "30", "-out", certPEM,
        ])
        #expect(status == 0, "\(out)")
        (status, out) = try await run(
            ["piv-tool", "--reader", "0", "-A", "M:9B:03", "-C", "9A", "-i", certPEM],
            env: ["PIV_EXT_AUTH_KEY=\(keyFile)"])
        #expect(await card.state.objects["5fc105"] != nil, "certificate not stored: \(out)")

        (status, out) = try await run(["pkcs11-tool", "--module", Self.module, "--list-objects", "--type", "cert"])
        #expect(out.contains("tessera-piv-test") && out.contains("ID:         01"), "\(out)")
        (status, out) = try await run([
            "pkcs11-tool", "--module", Self.module, "--login", "--pin", "123456",
            "--list-objects", "--type", "privkey",
        ])
        #expect(out.contains("Private Key Object; EC") && out.contains("PIV AUTH key"), "\(out)")

        let data = Array("signed by the emulated PIV card through opensc-pkcs11".utf8)
        let input = dir + "/data.bin", sigFile = dir + "/sig.bin"
        try Data(data).write(to: URL(fileURLWithPath: input))
        (status, out) = try await run([
            "pkcs11-tool", "--module", Self.module, "--login", "--pin", "123456", "--sign",
            "--id", "01", "-m", "ECDSA-SHA256", "-i", input, "-o", sigFile,
        ])
        #expect(status == 0, "\(out)")
        let raw = try #require(FileManager.default.contents(atPath: sigFile))
        #expect(raw.count == 64)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
        #expect(publicKey.isValidSignature(signature, for: SHA256.hash(data: data)))

        // Tessera works on the same card next to OpenSC and leaves 9A alone.
        let reg = try await h.enroll(tokenId: token.id)
        _ = try await h.authenticate(reg.credentialId)
        #expect(await card.publicKey(slot: 0x9A) == point)
        #expect(await card.keySlots.contains(0x82))
    }
}

extension String {
    /// "3b8d80" → "3b:8d:80" (opensc-tool's ATR format).
    func chunked2() -> String {
        var out: [String] = []
        var i = startIndex
        while i < endIndex {
            let j = index(i, offsetBy: 2, limitedBy: endIndex) ?? endIndex
            out.append(String(self[i..<j]))
            i = j
        }
        return out.joined(separator: ":")
    }
}
