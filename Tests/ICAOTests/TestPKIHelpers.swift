import FoundationEssentials
import TesseraCore
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Runs the `openssl` CLI for independent cross-checks; fails loudly when it is missing or fails.
enum OpenSSLCLI {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs `openssl args…` in `directory`, returning stdout. Throws with stderr on a non-zero exit.
    @discardableResult
    static func run(_ args: [String], in directory: URL, stdin: [UInt8]? = nil) async throws -> [UInt8] {
        let r = try await Subprocess.run("openssl", args, input: stdin ?? [], directory: directory.path, timeout: 120)
        guard r.status == 0 else {
            throw Failure(description: "openssl \(args.joined(separator: " ")) failed: \(r.stderrText)")
        }
        return r.stdout
    }

    /// A fresh temporary directory (under `Scratch.root`: gone when the test process exits).
    static func tempDirectory() throws -> URL {
        URL(fileURLWithPath: Scratch.directory("icao-tests"))
    }

    static func write(_ bytes: [UInt8], _ name: String, in dir: URL) throws {
        try Data(bytes).write(to: dir.appendingPathComponent(name))
    }

    static func read(_ name: String, in dir: URL) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: dir.appendingPathComponent(name)))
    }

    /// Key generation arguments for `openssl genpkey`.
    static func genpkeyArgs(_ kind: String) -> [String] {
        switch kind {
        case "rsa": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
        case "rsa1024": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"]
        default: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(kind)"]
        }
    }

    /// Creates csca.pem/csca.key and ds.pem/ds.key in `dir` with the openssl CLI (CA with keyCertSign,
    /// DS with digitalSignature and key identifiers). `pss` signs the certificates with RSA-PSS.
    static func makePKI(
        in dir: URL, kind: String, pss: Bool = false, explicitCSCA: Bool = false,
        cscaSubject: String = "/C=UT/O=OpenSSL Test/CN=CSCA OpenSSL"
    ) async throws {
        try await run(["genpkey"] + genpkeyArgs(kind) + ["-out", "csca.key"], in: dir)
        if explicitCSCA {
            try await run(["ec", "-in", "csca.key", "-param_enc", "explicit", "-out", "csca.key"], in: dir)
        }
        try await run(["genpkey"] + genpkeyArgs(kind) + ["-out", "ds.key"], in: dir)
        let ext = """
            [req]
            distinguished_name = dn
            [dn]
            [ca]
            basicConstraints = critical, CA:true, pathlen:0
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid:always
            [ds]
            keyUsage = critical, digitalSignature
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid:always
            """
        try write(Array(ext.utf8), "ext.cnf", in: dir)
        let sigopts = pss ? ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:32"] : []
        try await run(
            [
                "req", "-new", "-x509", "-key", "csca.key", "-subj", cscaSubject, "-days", "3650", "-sha256",
                "-config", "ext.cnf", "-extensions", "ca", "-out", "csca.pem",
            ] + sigopts, in: dir)
        try await run(
            [
                "req", "-new", "-key", "ds.key", "-subj", "/C=UT/O=OpenSSL Test/CN=DS OpenSSL", "-out", "ds.csr",
                "-config", "ext.cnf",
            ], in: dir)
        try await run(
            [
                "x509", "-req", "-in", "ds.csr", "-CA", "csca.pem", "-CAkey", "csca.key", "-set_serial", "4660",
                "-days", "1000", "-sha256", "-extfile", "ext.cnf", "-extensions", "ds", "-out", "ds.pem",
            ] + sigopts, in: dir)
    }
}
