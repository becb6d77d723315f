import APDU
internal import CNFC
import FoundationEssentials
import TesseraCore

/// A selected ISO-DEP target on an `NFCDevice`: APDUs go through `nfc_initiator_transceive_bytes`.
/// When an exchange fails, the target is pinged (`nfc_initiator_target_is_present`): gone → CARD_REMOVED,
/// still there → CARD_ERROR. After a loss every call throws CARD_REMOVED until a new `selectTarget`.
public final class NFCTarget: APDUTransport, @unchecked Sendable {
    public let device: NFCDevice
    public let info: NFCTargetInfo
    /// Per-exchange timeout handed to libnfc.
    public let timeoutMilliseconds: Int32
    /// Called after every exchange (command, response, time the command was sent); for traces.
    public typealias ExchangeHook = @Sendable (_ command: [UInt8], _ response: [UInt8], _ timestamp: Date) -> Void
    private let hook: Locked<ExchangeHook?> = Locked(nil)
    private let lost = Locked(false)

    init(device: NFCDevice, info: NFCTargetInfo, timeoutMilliseconds: Int32) {
        self.device = device; self.info = info; self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// Installs (or clears) the exchange hook.
    public func onExchange(_ body: ExchangeHook?) { hook.withLock { $0 = body } }

    /// Short APDUs only: responses travel in one reader frame (a PN532 carries at most 262 bytes).
    public var supportsExtendedLength: Bool { false }

    /// The longest short APDU (4 + 1 + 255 + 1 bytes); libnfc's PN53x driver copies commands into a frame buffer
    /// of 264 bytes and aborts the process on anything longer.
    public static let maximumCommandLength = 261

    public func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        if lost.withLock({ $0 }) { throw TesseraError(.cardRemoved, "the card left the field of \(device.connstring)") }
        guard command.count <= Self.maximumCommandLength else {
            throw TesseraError(
                .unsupportedProtocol,
                "a \(command.count)-byte APDU does not fit in one frame of \(device.connstring) (short APDUs only)")
        }
        let timeout = timeoutMilliseconds
        let connstring = device.connstring
        let sent = Date()
        let outcome = try await device.onDevice { pointer throws(TesseraError) -> Result<[UInt8], TesseraError> in
            var rx = [UInt8](repeating: 0, count: 4096)
            let n = nfc_initiator_transceive_bytes(pointer, command, command.count, &rx, rx.count, Int32(timeout))
            if n >= 0 { return .success(Array(rx.prefix(Int(n)))) }
            let reason = NFCDevice.lastError(pointer)
            if nfc_initiator_target_is_present(pointer, nil) < 0 {
                return .failure(TesseraError(.cardRemoved, "the card left the field of \(connstring) (\(reason))"))
            }
            return .failure(TesseraError(.cardError, "APDU exchange on \(connstring) failed: \(reason)"))
        }
        switch outcome {
        case .success(let response):
            hook.withLock { $0 }?(command, response, sent)
            guard response.count >= 2 else {
                throw TesseraError(.malformedData, "the card answered \(response.count) bytes (no status word)")
            }
            return response
        case .failure(let error):
            hook.withLock { $0 }?(command, [], sent)
            if error.code == .cardRemoved { lost.withLock { $0 = true } }
            throw error
        }
    }

    /// Whether the target still answers (ISO-DEP presence check). Marks the target lost when it does not.
    public func isPresent() async -> Bool {
        if lost.withLock({ $0 }) { return false }
        let present =
            (try? await device.onDevice { pointer throws(TesseraError) -> Bool in
                nfc_initiator_target_is_present(pointer, nil) >= 0
            }) ?? false
        if !present { lost.withLock { $0 = true } }
        return present
    }

    /// Deselects the target and switches the RF field off, so the next read starts from a fresh activation.
    public func release() async {
        await device.fieldOff()
    }
}
