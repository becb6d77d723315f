import APDU
import Emulation
import FoundationEssentials
import PCSC
import PIV
import RPC
import TesseraCore
import TesseraRuntime
import TesseraTestSupport
import VPCD

/// `tessera-bench --piv`: assertion latency over the daemon's socket against the raw APDU round trips of the same
/// operation (SELECT + VERIFY + GENERAL AUTHENTICATE in one transaction) on the same emulated PIV card behind a
/// private pcscd + vpcd, and the APDUs the card sees per assertion.
enum PIVBench {
    static func run(seconds: Double, tesserad: String) async throws {
        // Before any PC/SC call; exports PCSCLITE_CSOCK_NAME for the daemon.
        let pcscd = try await PCSCDaemonFixture.start()
        defer { pcscd.stop() }
        // The PIV card is the key store under test.
        let hsm = try await SoftHSMFixture.make(label: "bench-unused", pin: "1234")
        defer { hsm.removeDirectory() }
        let work = hsm.directory
        let card = EmulatedPIVCard(state: .factoryNew(serial: 9001))
        let link = VirtualCardLink(card: card, port: Int(pcscd.port), reconnects: true)
        try await link.insert()
        defer { Task { await link.remove() } }

        let socket = work + "/tesserad.sock"
        let daemon = try ChildProcess.start(
            [
                tesserad, "--socket", socket, "--state-dir", work + "/state", "--pkcs11-module", hsm.modulePath,
                "--no-embedded-softhsm", "--allow-default-piv-management-key", "--log-level", "error",
            ], output: .inherit)
        do {
            var client: RPCClient?
            while client == nil {
                client = try? await RPCClient.connect(path: socket)
                if client == nil { try await Task.sleep(for: .milliseconds(5)) }
            }
            let c = client!
            var tokenId: String?
            for _ in 0..<200 where tokenId == nil {
                let list = try await c.call("tokens.list")
                if case .array(let tokens)? = list["tokens"] {
                    tokenId = tokens.first { $0["backend"]?.stringValue == "piv" }?["id"]?.stringValue
                }
                if tokenId == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            guard let tokenId else { fatalError("the daemon did not find the emulated PIV card") }
            let reg = try await BenchToken.enroll(on: c, ["tokenId": .string(tokenId), "pin": "123456"])
            let credentialId = reg["credentialId"]!.stringValue!
            guard let slot = await card.keySlots.first else { fatalError("no key on the card") }

            print(
                "tessera-bench --piv: emulated PIV card via pcscd + vpcd, P-256 in slot \(String(slot, radix: 16)), \(seconds)s per point"
            )
            print("mode             socket median ms  p99 ms   raw APDU median ms  ratio  APDUs/assertion (card)")
            for uv in [true, false] {
                // Over the socket.
                var fields: [String: JSONValue] = [
                    "rpId": "bench.example", "challenge": "YmVuY2gtY2hhbGxlbmdlLTAxMjM0NTY3",
                    "allowCredentials": [.string(credentialId)],
                ]
                if uv { fields["pin"] = "123456" }
                let params = JSONValue.object(fields)
                _ = try await c.call("passkey.authenticate", params)
                await card.clearCommands()
                var socketLatencies: [Double] = []
                let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
                while ContinuousClock.now < deadline {
                    let t0 = ContinuousClock.now
                    _ = try await c.call("passkey.authenticate", params)
                    socketLatencies.append(Bench.seconds(ContinuousClock.now - t0))
                }
                let commands = await card.commands
                let perAssertion = Double(commands.count) / Double(socketLatencies.count)
                let sequence = commands.prefix(Int(perAssertion.rounded())).map { insName($0[1]) }.joined(
                    separator: "+")

                // The same APDUs from this process, one transaction each, on the same card.
                let raw = try await PCSCContext().connect(reader: pcscd.readerName, shareMode: .shared)
                var rawLatencies: [Double] = []
                let digest = [UInt8](repeating: 0xA5, count: 32)
                let rawDeadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
                while ContinuousClock.now < rawDeadline {
                    let t0 = ContinuousClock.now
                    _ = try await raw.transaction { (t: PCSCCard) async throws(TesseraError) -> [UInt8] in
                        let app = PIVApplication(transport: t)
                        try await app.select()
                        if uv { try await app.verifyPIN("123456") }
                        return try await app.signP256(slot: slot, digest: digest)
                    }
                    rawLatencies.append(Bench.seconds(ContinuousClock.now - t0))
                }
                await raw.disconnect()
                let s = socketLatencies.sorted(), r = rawLatencies.sorted()
                let median = s[s.count / 2], p99 = s[min(s.count - 1, s.count * 99 / 100)], rawMedian = r[r.count / 2]
                let mode = Bench.pad(uv ? "with PIN (UV)" : "without PIN", 16)
                print(
                    mode
                        + String(
                            printf: " %16.3f  %6.3f   %18.3f  %5.2f  %.2f ", median * 1000, p99 * 1000,
                            rawMedian * 1000, median / rawMedian, perAssertion) + "(\(sequence))")
            }
            await c.close()
        } catch {
            await Subprocess.terminate(daemon)
            throw error
        }
        await Subprocess.terminate(daemon)
    }

    static func insName(_ ins: UInt8) -> String {
        switch ins {
        case PIV.INS.select: "SELECT"
        case PIV.INS.verify: "VERIFY"
        case PIV.INS.generalAuthenticate: "GENERAL AUTHENTICATE"
        case PIV.INS.getData: "GET DATA"
        default: String(printf: "INS %02X", ins)
        }
    }
}
