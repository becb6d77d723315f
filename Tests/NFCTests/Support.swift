import APDU
import FoundationEssentials
import PN532Emulator
import TesseraCore
import TesseraTestSupport

/// A small ISO 7816-4 card for link tests: SELECT answers 9000, `00 B0 00 00 Le` returns Le bytes 00 01 02…,
/// `80 CA 00 00 Le` echoes the command data; everything is counted.
actor EchoCard: VirtualCard {
    private(set) var commands: [[UInt8]] = []
    private(set) var powerOns = 0
    nonisolated var atr: [UInt8] { get async { [0x3B, 0x80, 0x80, 0x01, 0x01] } }
    func powerOn() async { powerOns += 1 }
    func powerOff() async {}
    func reset() async {}
    func process(_ command: [UInt8]) async -> [UInt8] {
        commands.append(command)
        guard command.count >= 4 else { return [0x67, 0x00] }
        switch (command[0], command[1]) {
        case (0x00, 0xA4): return [0x90, 0x00]
        case (0x00, 0xB0):
            let le = command.count == 5 ? (command[4] == 0 ? 256 : Int(command[4])) : 0
            return (0..<le).map { UInt8($0 & 0xFF) } + [0x90, 0x00]
        case (0x80, 0xCA):
            let lc = command.count > 5 ? Int(command[4]) : 0
            return Array(command[5..<(5 + lc)]) + [0x90, 0x00]
        default: return [0x6D, 0x00]
        }
    }
}

/// Runs a program to completion (waiting off the cooperative pool, so the in-process PN532 keeps answering within
/// libnfc's timeouts) and returns its exit status and combined output.
func run(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:],
    timeout: TimeInterval = 30
) async throws -> (status: Int32, output: String) {
    let result = try await Subprocess.run(executable, arguments, environment: environment, timeout: timeout)
    return (result.status, result.output)
}

/// A fresh directory under `Scratch.root` (removed when the test process exits).
func temporaryDirectory() -> String {
    Scratch.directory("nfc")
}
