import APDU
import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import Testing

@testable import ICAO

/// An in-test chip answering INTERNAL AUTHENTICATE with a fixed private key (or a fixed status word).
private struct AAChip: APDUTransport {
    var privateKey: [UInt8]
    var hash: SignatureHash = .sha256
    var refuse: StatusWord?

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let c = try CommandAPDU(parsing: command)
        guard c.ins == 0x88, c.data.count == 8 else { return ResponseAPDU(sw: .insNotSupported).encoded }
        if let refuse { return ResponseAPDU(sw: refuse).encoded }
        let sig = try ActiveAuthentication.sign(challenge: c.data, privateKey: privateKey, hash: hash)
        return ResponseAPDU(data: sig, sw: .success).encoded
    }
}

@Suite struct ActiveAuthTests {
    /// Signs an ISO/IEC 9796-2 scheme 1 message built here with the raw RSA private operation of the openssl CLI
    /// (`pkeyutl -decrypt -pkeyopt rsa_padding_mode:none`, i.e. m^d mod n; `-sign` refuses inputs longer than a hash).
    private func openSSL9796(bits: Int, hash: String, challenge: [UInt8]) async throws -> (
        spki: [UInt8], signature: [UInt8]
    ) {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await OpenSSLCLI.run(
            ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(bits)", "-out", "aa.key"], in: dir)
        let spki = try await OpenSSLCLI.run(["pkey", "-in", "aa.key", "-pubout", "-outform", "DER"], in: dir)
        let k = bits / 8
        let (hashLength, trailer): (Int, [UInt8]) = hash == "sha1" ? (20, [0xBC]) : (32, [0x34, 0xCC])
        let m1 = (0..<(k - 1 - hashLength - trailer.count)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        try OpenSSLCLI.write(m1 + challenge, "m.bin", in: dir)
        let digest = try await OpenSSLCLI.run(["dgst", "-\(hash)", "-binary", "m.bin"], in: dir)
        try OpenSSLCLI.write([0x6A] + m1 + digest + trailer, "block.bin", in: dir)
        try await OpenSSLCLI.run(
            [
                "pkeyutl", "-decrypt", "-inkey", "aa.key", "-pkeyopt", "rsa_padding_mode:none",
                "-in", "block.bin", "-out", "sig.bin",
            ], in: dir)
        return (spki, try OpenSSLCLI.read("sig.bin", in: dir))
    }

    @Test(arguments: [(1024, "sha1"), (2048, "sha1"), (2048, "sha256")])
    func rsaISO9796FromOpenSSL(bits: Int, hash: String) async throws {
        let challenge: [UInt8] = [0x78, 0x17, 0x23, 0x86, 0x0C, 0x06, 0xC2, 0x26]
        let (spki, signature) = try await openSSL9796(bits: bits, hash: hash, challenge: challenge)
        let ok = ActiveAuthentication.verify(challenge: challenge, response: signature, publicKeyInfo: spki)
        #expect(ok.status == .valid, "\(ok.reason ?? "")")
        #expect(ok.hash == (hash == "sha1" ? .sha1 : .sha256))
        var other = challenge
        other[0] ^= 1
        #expect(
            ActiveAuthentication.verify(challenge: other, response: signature, publicKeyInfo: spki).status == .invalid)
        var badSig = signature
        badSig[5] ^= 1
        #expect(
            ActiveAuthentication.verify(challenge: challenge, response: badSig, publicKeyInfo: spki).status == .invalid)
        // The signer may send n - s instead of s (ISO/IEC 9796-2): still valid.
        let n = try #require(ActiveAuthentication.rsaModulus(spki))
        let complement = ActiveAuthentication.subtract(n, signature)
        #expect(
            ActiveAuthentication.verify(challenge: challenge, response: complement, publicKeyInfo: spki).status
                == .valid)
    }

    @Test func ecdsaFromOpenSSL() async throws {
        let dir = try OpenSSLCLI.tempDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await OpenSSLCLI.run(["genpkey"] + OpenSSLCLI.genpkeyArgs("brainpoolP256r1") + ["-out", "aa.key"], in: dir)
        let spki = try await OpenSSLCLI.run(["pkey", "-in", "aa.key", "-pubout", "-outform", "DER"], in: dir)
        let challenge: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        try OpenSSLCLI.write(challenge, "c.bin", in: dir)
        let der = try await OpenSSLCLI.run(["dgst", "-sha256", "-sign", "aa.key", "c.bin"], in: dir)
        let plain = try ECDSASignature.rawFromDER(der, group: .init(componentLength: 32))
        #expect(plain.count == 64)
        let byKeySize = ActiveAuthentication.verify(challenge: challenge, response: plain, publicKeyInfo: spki)
        #expect(byKeySize.status == .valid)
        #expect(byKeySize.hash == .sha256)
        #expect(
            ActiveAuthentication.verify(challenge: challenge, response: plain, publicKeyInfo: spki, hashHint: .sha256)
                .status == .valid)
        #expect(
            ActiveAuthentication.verify(challenge: challenge, response: plain, publicKeyInfo: spki, hashHint: .sha384)
                .status == .invalid)
        #expect(
            ActiveAuthentication.verify(challenge: [0] + challenge.dropFirst(), response: plain, publicKeyInfo: spki)
                .status == .invalid)
        #expect(
            ActiveAuthentication.verify(challenge: challenge, response: Array(plain.dropLast()), publicKeyInfo: spki)
                .status == .invalid)
    }

    @Test(arguments: [SignatureKeySpec.rsa(bits: 2048), .ec(curve: "prime256v1"), .ec(curve: "brainpoolP384r1")])
    func performOverTransport(spec: SignatureKeySpec) async throws {
        let key = try Signatures.generateKey(spec)
        let dg15 = try DG15(parsing: LDSBuilder.dg15(publicKeyInfo: key.publicKeyDER))
        let dg14 = try DG14(parsing: LDSBuilder.dg14(securityInfos: LDSBuilder.activeAuthenticationInfo(hash: .sha256)))
        let chip = AAChip(privateKey: key.privateKeyDER)
        let result = try await ActiveAuthentication.perform(over: chip, dg15: dg15, dg14: dg14)
        #expect(result.status == .valid, "\(result.reason ?? "")")
        #expect(result.json["status"] == "valid")

        let rsaSHA1 = AAChip(privateKey: key.privateKeyDER, hash: .sha1)
        let r2 = try await ActiveAuthentication.perform(over: rsaSHA1, dg15: dg15)
        #expect(r2.status == .valid)

        // A chip with a different key fails.
        let impostor = AAChip(privateKey: try Signatures.generateKey(spec).privateKeyDER)
        #expect(try await ActiveAuthentication.perform(over: impostor, dg15: dg15, dg14: dg14).status == .invalid)
    }

    @Test func notSupportedCases() async throws {
        let key = try Signatures.generateKey(.ec(curve: "prime256v1"))
        let dg15 = try DG15(parsing: LDSBuilder.dg15(publicKeyInfo: key.publicKeyDER))
        let refusing = AAChip(privateKey: key.privateKeyDER, refuse: .insNotSupported)
        #expect(try await ActiveAuthentication.perform(over: refusing, dg15: dg15).status == .notSupported)
        #expect(try await ActiveAuthentication.perform(over: refusing, dg15: nil).status == .notSupported)
        let failing = AAChip(privateKey: key.privateKeyDER, refuse: .securityStatusNotSatisfied)
        #expect(try await ActiveAuthentication.perform(over: failing, dg15: dg15).status == .invalid)
    }
}
