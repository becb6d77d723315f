import APDU
import TesseraCore

@testable import ICAO

/// Hex literal → bytes for Access tests (white space ignored; a bad literal yields a value no test expects).
func ax(_ s: String) -> [UInt8] { Hex.decode(s) ?? [0xDE, 0xAD] }

/// A transport that checks each command against a script of (expected command, response) pairs.
actor AccessScriptedTransport: APDUTransport {
    private var script: [(command: [UInt8], response: [UInt8])]
    private(set) var sent: [[UInt8]] = []

    init(_ script: [(String, String)]) { self.script = script.map { (ax($0.0), ax($0.1)) } }

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        sent.append(command)
        guard !script.isEmpty else { throw TesseraError(.cardError, "script exhausted at \(Hex.encode(command))") }
        let step = script.removeFirst()
        guard step.command == command else {
            throw TesseraError(
                .cardError, "unexpected command \(Hex.encode(command)), expected \(Hex.encode(step.command))")
        }
        return step.response
    }

    var remaining: Int { script.count }
}
