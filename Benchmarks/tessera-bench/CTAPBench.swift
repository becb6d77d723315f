import FoundationEssentials
@_spi(Benchmarks) @_spi(Testing) import PKCS11
import RPC
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `--ctap`: getAssertion latency over `--ctap-socket` (one client, `up: false` so no presence program runs per
/// assertion) against `passkey.authenticate` over the JSON-RPC socket and raw C_Sign, same token and key, one run.
enum CTAPBench {
    static func run(seconds: Double, tesserad: String) async throws {
        let token = try await BenchToken.make()
        let hsm = token.hsm
        defer { hsm.removeDirectory() }
        let socket = token.socket, ctapSocket = token.directory + "/ctap.sock"
        let daemon = try ChildProcess.start(
            [tesserad] + token.daemonArguments(["--ctap-socket", ctapSocket]), output: .inherit)
        do {
            var client: RPCClient?
            while client == nil {
                client = try? await RPCClient.connect(path: socket)
                if client == nil { try await Task.sleep(for: .milliseconds(5)) }
            }
            let reg = try await BenchToken.enroll(on: client!)
            let credentialId = reg["credentialId"]!.stringValue!
            guard let rawId = Base64URL.decode(credentialId), rawId.count == 32 else {
                throw BenchError("credential id")
            }

            let provider = try PKCS11Provider(modulePaths: [hsm.modulePath])
            guard let token = provider.tokens().first(where: { $0.info.label == "bench" }) else {
                throw BenchError("no token")
            }
            try await token.login(pin: "1234")
            guard let keyID = try await token.keyIDs(labelPrefix: "tessera:").first else { throw BenchError("no key") }
            let rawRate = try await token.rawSignLoop(
                keyID: keyID, digest: [UInt8](repeating: 0xA5, count: 32),
                iterations: max(2000, Int(seconds * 4000)), sessions: 1)
            let (rpc, _, _) = try await LoadClient.run(
                socket: socket, credentialId: credentialId, clients: 1, seconds: seconds)
            let ctap = try await DedicatedThread.run(name: "bench.ctap") { () throws -> [Double] in
                try ctapLoop(ctapSocket, credentialId: rawId, seconds: seconds)
            }
            print(
                "tessera-bench --ctap: SoftHSM2, P-256, 1 client, \(seconds)s per path, \(ProcessInfo.processInfo.activeProcessorCount) cores"
            )
            print("path                                   n      median µs   p99 µs")
            print(Bench.pad("raw C_Sign (mean)", 45) + String(printf: "  %10.0f", 1e6 / rawRate))
            for (name, latencies) in [
                ("passkey.authenticate (JSON-RPC)", rpc), ("getAssertion (--ctap-socket, up=false)", ctap),
            ] {
                let s = latencies.sorted()
                print(
                    Bench.pad(name, 38)
                        + String(
                            printf: " %6d  %10.0f  %7.0f", s.count, s[s.count / 2] * 1e6,
                            s[min(s.count - 1, s.count * 99 / 100)] * 1e6))
            }
            let median = { (l: [Double]) in l.sorted()[l.count / 2] }
            print(String(printf: "CTAP − JSON-RPC median: %.0f µs", (median(ctap) - median(rpc)) * 1e6))
            provider.finalize()
        } catch {
            await Subprocess.terminate(daemon)
            throw error
        }
        await Subprocess.terminate(daemon)
    }

    /// A blocking CTAPHID client: INIT, then getAssertion (allowList, up=false) in a loop; every answer's status
    /// must be CTAP2_OK.
    static func ctapLoop(_ path: String, credentialId: [UInt8], seconds: Double) throws -> [Double] {
        let fd = try LoadClient.connect(path, type: Int32(SOCK_SEQPACKET.rawValue))
        defer { close(fd) }
        func send(_ channel: UInt32, _ command: UInt8, _ payload: [UInt8]) throws {
            var offset = min(payload.count, 57), sequence: UInt8 = 0
            var packets = [
                channelBytes(channel) + [command | 0x80, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
                    + payload[0..<offset]
            ]
            while offset < payload.count {
                let end = min(offset + 59, payload.count)
                packets.append(channelBytes(channel) + [sequence] + payload[offset..<end])
                offset = end
                sequence += 1
            }
            for var p in packets {
                p += [UInt8](repeating: 0, count: 64 - p.count)
                guard Glibc.send(fd, p, 64, 0) == 64 else { throw BenchError("send: errno \(errno)") }
            }
        }
        func receive() throws -> (UInt8, [UInt8]) {
            var p = [UInt8](repeating: 0, count: 64)
            while true {
                guard recv(fd, &p, 64, 0) == 64 else { throw BenchError("recv: errno \(errno)") }
                if p[4] != 0xBB { break }  // KEEPALIVE
            }
            let length = Int(p[5]) << 8 | Int(p[6])
            var data = Array(p[7..<min(64, 7 + length)])
            while data.count < length {
                guard recv(fd, &p, 64, 0) == 64 else { throw BenchError("recv: errno \(errno)") }
                data += p[5..<min(64, 5 + length - data.count)]
            }
            return (p[4], data)
        }
        try send(0xFFFF_FFFF, 0x06, [1, 2, 3, 4, 5, 6, 7, 8])
        let (_, initAnswer) = try receive()
        let channel = initAnswer[8..<12].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        // getAssertion {1: "bench.example", 2: clientDataHash, 3: [{"id": id, "type": "public-key"}], 5: {"up": false}}
        let request: [UInt8] =
            [0x02, 0xA4, 0x01, 0x6D] + Array("bench.example".utf8) + [0x02, 0x58, 0x20]
            + [UInt8](repeating: 0x5A, count: 32) + [0x03, 0x81, 0xA2, 0x62] + Array("id".utf8) + [0x58, 0x20]
            + credentialId
            + [0x64] + Array("type".utf8) + [0x6A] + Array("public-key".utf8) + [0x05, 0xA1, 0x62] + Array("up".utf8)
            + [0xF4]
        var latencies: [Double] = []
        let end = LoadClient.monotonicNanos() + UInt64(seconds * 1e9)
        while LoadClient.monotonicNanos() < end {
            let t0 = LoadClient.monotonicNanos()
            try send(channel, 0x10, request)
            let (_, answer) = try receive()
            latencies.append(Double(LoadClient.monotonicNanos() - t0) / 1e9)
            guard answer.first == 0 else { throw BenchError("getAssertion status \(answer.first ?? 0xFF)") }
        }
        return latencies
    }

    static func channelBytes(_ c: UInt32) -> [UInt8] {
        [UInt8(c >> 24), UInt8(c >> 16 & 0xFF), UInt8(c >> 8 & 0xFF), UInt8(c & 0xFF)]
    }
}
