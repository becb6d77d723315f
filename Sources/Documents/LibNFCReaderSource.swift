import APDU
import FoundationEssentials
import NFC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// libnfc readers (PN532/PN533/ACR122 and friends), named by their connstrings (`pn532_uart:/dev/ttyUSB0`).
///
/// A device is opened only for the duration of a probe or a read and closed afterwards, so other tools can use
/// it in between. `readers()` probes each idle device (RF field on, select an ISO-DEP target, field off);
/// a read selects the card with a fresh activation and switches the field off when done.
/// The connstring `auto` stands for every device libnfc finds (configuration and autoscan).
///
/// Errors: NO_READER (unknown connstring or device gone), DEVICE_BUSY (held by the kernel pn533 driver,
/// pcscd or another program — the message says what to install), NO_CARD, CARD_REMOVED, CARD_IN_USE (another
/// read is using the reader).
public final class LibNFCReaderSource: ReaderSource {
    public var stack: String { "libnfc" }
    public let connstrings: [String]
    private let context: NFCContext
    private let busy = LockedSet()

    /// `connstrings` as configured (`--nfc-device`); `auto` expands to libnfc's device list.
    public init(connstrings: [String]) throws(TesseraError) {
        self.connstrings = connstrings
        context = try NFCContext.shared()
    }

    private func devices() async -> [String] {
        var out: [String] = []
        for c in connstrings {
            let expanded = c == "auto" ? await context.listDevices() : [c]
            for d in expanded where !out.contains(d) { out.append(d) }
        }
        return out
    }

    public func readers() async throws(TesseraError) -> [ReaderInfo] {
        var list: [ReaderInfo] = []
        for connstring in await devices() {
            guard busy.insert(connstring) else {
                list.append(ReaderInfo(name: connstring, stack: stack, cardPresent: true))
                continue
            }
            var info = ReaderInfo(name: connstring, stack: stack, cardPresent: false)
            if let device = try? await NFCDevice.open(connstring, context: context) {
                if let target = try? await device.selectTarget(), target.info.isISODEP {
                    info.cardPresent = true
                    info.atr = target.info.atr
                }
                await device.fieldOff()
                await device.close()
            }
            busy.remove(connstring)
            list.append(info)
        }
        return list
    }

    public func open(reader: String) async throws(TesseraError) -> any CardSession {
        guard await devices().contains(reader) else {
            throw TesseraError(.noReader, "no libnfc reader '\(reader)'", details: ["reader": .string(reader)])
        }
        guard busy.insert(reader) else {
            throw TesseraError(.cardInUse, "another read is using '\(reader)'", details: ["reader": .string(reader)])
        }
        do throws(TesseraError) {
            let device = try await NFCDevice.open(reader, context: context)
            let target: NFCTarget?
            do throws(TesseraError) {
                target = try await device.selectTarget()
            } catch {
                await device.close()
                throw error
            }
            guard let target, target.info.isISODEP else {
                await device.fieldOff()
                await device.close()
                throw TesseraError(
                    .noCard,
                    target == nil
                        ? "no card in '\(reader)'"
                        : "the card in '\(reader)' does not speak ISO/IEC 14443-4",
                    details: ["reader": .string(reader)])
            }
            return LibNFCCardSession(target: target) { [busy] in busy.remove(reader) }
        } catch {
            busy.remove(reader)
            throw error
        }
    }
}

/// One selected libnfc target used for one document read.
final class LibNFCCardSession: CardSession {
    let target: NFCTarget
    private let onClose: @Sendable () -> Void
    private let closed = LockedSet()

    init(target: NFCTarget, onClose: @escaping @Sendable () -> Void) {
        self.target = target
        self.onClose = onClose
    }

    var supportsExtendedLength: Bool { target.supportsExtendedLength }

    func transmit(_ command: [UInt8]) async throws(TesseraError) -> [UInt8] {
        try await target.transmit(command)
    }

    func exclusively<T: Sendable>(_ body: @Sendable () async throws(TesseraError) -> T) async throws(TesseraError) -> T
    {
        do {
            return try await body()
        } catch {
            // A failure that is really the card leaving (e.g. a torn secure-messaging response) is CARD_REMOVED.
            if error.code != .cardRemoved, !(await target.isPresent()) {
                throw TesseraError(
                    .cardRemoved, "card left \(target.device.connstring) during the read (\(error.message))")
            }
            throw error
        }
    }

    func close() async {
        guard closed.insert("closed") else { return }
        await target.release()
        await target.device.close()
        onClose()
    }
}

/// A set of strings guarded by a lock.
final class LockedSet: Sendable {
    private let items = Locked<Set<String>>([])
    /// Inserts `item`; false when it was already there.
    func insert(_ item: String) -> Bool {
        items.withLock { $0.insert(item).inserted }
    }
    func remove(_ item: String) {
        _ = items.withLock { $0.remove(item) }
    }
}
