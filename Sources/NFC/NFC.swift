internal import CNFC
import FoundationEssentials
import TesseraCore
import TesseraRuntime

/// libnfc devices as APDU transports: ISO 14443-A/B initiator, ISO-DEP exchange, target (card emulation) mode.
///
/// Every libnfc call runs on a dedicated thread per device (`DedicatedThread`), never on Swift's cooperative pool.
/// Raw pointers stay in this module; its public API is plain Swift with `[UInt8]` bytes and `TesseraError`.

/// A libnfc context (`nfc_init`): lists devices from the configuration (libnfc.conf, `LIBNFC_DEFAULT_DEVICE`) and
/// from autoscan, and opens devices by connstring.
public final class NFCContext: @unchecked Sendable {
    // Touched only on `thread`.
    private let context: OpaquePointer
    let thread: DedicatedThread
    /// Connstrings opened through this context and not yet closed (libnfc's own claim mark does not work on
    /// every tty, e.g. pseudo-terminals).
    let claimed = Locked<Set<String>>([])

    /// The process-wide context. libnfc keeps its driver list in process-global state that `nfc_exit` frees, so
    /// Tessera uses one context for the life of the process. Throws NO_READER when libnfc cannot start.
    public static func shared() throws(TesseraError) -> NFCContext {
        if let context = sharedContext { return context }
        throw TesseraError(.noReader, "libnfc could not be initialised")
    }

    private static let sharedContext: NFCContext? = NFCContext()

    private init?() {
        var ctx: OpaquePointer?
        nfc_init(&ctx)
        guard let ctx else { return nil }
        context = ctx
        thread = DedicatedThread(name: "libnfc-context")
    }

    /// Connstrings of the devices libnfc knows: configured ones first, then those found by autoscan.
    public func listDevices() async -> [String] {
        let ctx = UncheckedPointer(context)
        return
            (try? await thread.run { () throws(TesseraError) -> [String] in
                let capacity = 16
                let buffer = UnsafeMutablePointer<nfc_connstring>.allocate(capacity: capacity)
                defer { buffer.deallocate() }
                let found = nfc_list_devices(ctx.pointer, buffer, capacity)
                return (0..<min(found, capacity)).map { i in
                    withUnsafeBytes(of: &buffer[i]) { raw in
                        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                    }
                }
            }) ?? []
    }

    /// Opens a device on this context's thread (used by `NFCDevice.open`).
    func openDevice(_ connstring: String) async -> UncheckedPointer? {
        let ctx = UncheckedPointer(context)
        return try? await thread.run { () throws(TesseraError) -> UncheckedPointer? in
            nfc_open(ctx.pointer, connstring).map(UncheckedPointer.init)
        }
    }
}

/// An opaque libnfc pointer carried between threads; only dereferenced by libnfc on the owning thread.
struct UncheckedPointer: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// libnfc result codes as text.
enum LibNFCError {
    static func name(_ code: Int32) -> String {
        switch code {
        case NFC_EIO: return "NFC_EIO (input/output error)"
        case NFC_EINVARG: return "NFC_EINVARG (invalid argument)"
        case NFC_EDEVNOTSUPP: return "NFC_EDEVNOTSUPP (operation not supported by the device)"
        case NFC_ENOTSUCHDEV: return "NFC_ENOTSUCHDEV (no such device)"
        case NFC_EOVFLOW: return "NFC_EOVFLOW (buffer overflow)"
        case NFC_ETIMEOUT: return "NFC_ETIMEOUT (timeout)"
        case NFC_EOPABORTED: return "NFC_EOPABORTED (operation aborted)"
        case NFC_ENOTIMPL: return "NFC_ENOTIMPL (not implemented)"
        case NFC_ETGRELEASED: return "NFC_ETGRELEASED (target released)"
        case NFC_ERFTRANS: return "NFC_ERFTRANS (RF transmission error)"
        case NFC_EMFCAUTHFAIL: return "NFC_EMFCAUTHFAIL (MIFARE authentication failed)"
        case NFC_ESOFT: return "NFC_ESOFT (software error)"
        case NFC_ECHIP: return "NFC_ECHIP (device's internal chip error)"
        default: return "libnfc error \(code)"
        }
    }
}
