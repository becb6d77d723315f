import APDU
internal import CNFC
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The modulations Tessera selects in initiator mode (106 kbps ISO/IEC 14443).
public enum NFCModulation: String, Sendable, CaseIterable {
    case iso14443A = "ISO14443A"
    case iso14443B = "ISO14443B"

    var libnfc: nfc_modulation {
        switch self {
        case .iso14443A: return nfc_modulation(nmt: NMT_ISO14443A, nbr: NBR_106)
        case .iso14443B: return nfc_modulation(nmt: NMT_ISO14443B, nbr: NBR_106)
        }
    }
}

/// What a selected target told the reader during activation.
public struct NFCTargetInfo: Sendable, Equatable {
    public var modulation: NFCModulation
    /// NFCID1 (type A) or PUPI (type B).
    public var uid: [UInt8]
    /// Type A: ATQA (SENS_RES).
    public var atqa: [UInt8]
    /// Type A: SAK (SEL_RES).
    public var sak: UInt8
    /// Type A: the ATS without its length byte.
    public var ats: [UInt8]
    /// Type B: application data and protocol info from ATQB.
    public var applicationData: [UInt8]
    public var protocolInfo: [UInt8]

    public init(
        modulation: NFCModulation, uid: [UInt8], atqa: [UInt8] = [], sak: UInt8 = 0, ats: [UInt8] = [],
        applicationData: [UInt8] = [], protocolInfo: [UInt8] = []
    ) {
        self.modulation = modulation; self.uid = uid; self.atqa = atqa; self.sak = sak; self.ats = ats
        self.applicationData = applicationData; self.protocolInfo = protocolInfo
    }

    /// Whether the target speaks ISO/IEC 14443-4 (ISO-DEP), i.e. accepts APDUs.
    public var isISODEP: Bool {
        switch modulation {
        case .iso14443A: return sak & 0x20 != 0
        case .iso14443B: return protocolInfo.count >= 2 && protocolInfo[1] & 0x01 != 0
        }
    }

    /// A PC/SC-style ATR for contactless cards (PC/SC part 3): type A from the ATS historical bytes,
    /// type B from application data and protocol info.
    public var atr: [UInt8] {
        var historical: [UInt8]
        switch modulation {
        case .iso14443A:
            historical = []
            if let t0 = ats.first {
                var skip = 1
                if t0 & 0x10 != 0 { skip += 1 }
                if t0 & 0x20 != 0 { skip += 1 }
                if t0 & 0x40 != 0 { skip += 1 }
                if ats.count > skip { historical = Array(ats[skip...].prefix(15)) }
            }
        case .iso14443B:
            historical = applicationData + protocolInfo.prefix(3) + [0x00]
            historical = Array(historical.prefix(15))
        }
        var atr: [UInt8] = [0x3B, 0x80 | UInt8(historical.count), 0x80, 0x01] + historical
        atr.append(atr.dropFirst().reduce(0, ^))
        return atr
    }
}

/// One libnfc device (`nfc_open`), driven from its own thread. Initiator mode selects ISO 14443-A/B targets
/// and exchanges APDUs with them; `NFCCardEmulator` uses target mode.
public final class NFCDevice: @unchecked Sendable {
    /// The connstring it was opened with (e.g. `pn532_uart:/dev/ttyUSB0`, `pn53x_usb:003:005`).
    public let connstring: String
    /// libnfc's device name (driver, port and chip firmware).
    public let name: String
    let thread: DedicatedThread
    // Dereferenced only on `thread`; nil after close.
    private let handle: Locked<OpaquePointer?>
    private let context: NFCContext

    private init(connstring: String, name: String, device: OpaquePointer, context: NFCContext, thread: DedicatedThread)
    {
        self.connstring = connstring; self.name = name; self.context = context; self.thread = thread
        handle = Locked(device)
    }

    deinit {
        if let device = handle.withLock({ $0 }) {
            let pointer = UncheckedPointer(device)
            thread.enqueue { nfc_close(pointer.pointer) }
            context.claimed.withLock { _ = $0.remove(connstring) }
        }
        thread.finish()
    }

    /// Opens `connstring`. NO_READER when the device does not exist; DEVICE_BUSY (with what to do) when the
    /// kernel pn533 driver, pcscd or another program holds it; NO_READER naming the udev rule when permissions
    /// forbid it.
    public static func open(_ connstring: String, context: NFCContext) async throws(TesseraError) -> NFCDevice {
        guard context.claimed.withLock({ $0.insert(connstring).inserted }) else {
            throw TesseraError(.deviceBusy, "libnfc device \(connstring) is already open in this process")
        }
        guard let opened = await context.openDevice(connstring) else {
            context.claimed.withLock { _ = $0.remove(connstring) }
            throw diagnoseOpenFailure(connstring)
        }
        let thread = DedicatedThread(name: "libnfc-" + connstring)
        let name = try await thread.run { () throws(TesseraError) -> String in
            let device = opened.pointer
            let name = nfc_device_get_name(device).map { String(cString: $0) } ?? connstring
            guard nfc_initiator_init(device) >= 0 else {
                let message = Self.lastError(device)
                nfc_close(device)
                context.claimed.withLock { _ = $0.remove(connstring) }
                throw TesseraError(.noReader, "libnfc device \(connstring) failed to start initiator mode: \(message)")
            }
            _ = nfc_device_set_property_bool(device, NP_INFINITE_SELECT, false)
            _ = nfc_device_set_property_bool(device, NP_AUTO_ISO14443_4, true)
            // Field off until a read asks for a card.
            _ = nfc_device_set_property_bool(device, NP_ACTIVATE_FIELD, false)
            return name
        }
        return NFCDevice(connstring: connstring, name: name, device: opened.pointer, context: context, thread: thread)
    }

    /// Selects the first ISO-DEP target in the field, trying `modulations` in order. Returns nil when no card
    /// answers. The RF field is switched on (after having been off, so the card starts from a power-on reset).
    public func selectTarget(
        modulations: [NFCModulation] = [.iso14443A, .iso14443B],
        timeout: Duration = .seconds(5)
    ) async throws(TesseraError) -> NFCTarget? {
        let info = try await onDevice { device throws(TesseraError) -> NFCTargetInfo? in
            guard nfc_initiator_init(device) >= 0 else {
                throw TesseraError(.noReader, "\(self.connstring): initiator init failed: \(Self.lastError(device))")
            }
            _ = nfc_device_set_property_bool(device, NP_INFINITE_SELECT, false)
            _ = nfc_device_set_property_bool(device, NP_AUTO_ISO14443_4, true)
            for modulation in modulations {
                var target = nfc_target()
                let found = nfc_initiator_select_passive_target(device, modulation.libnfc, nil, 0, &target)
                if found < 0 && found != NFC_ETIMEOUT && found != NFC_ERFTRANS && found != NFC_ECHIP {
                    throw TesseraError(.noReader, "\(self.connstring): select failed: \(Self.lastError(device))")
                }
                if found > 0 { return Self.info(target, modulation) }
            }
            return nil
        }
        guard let info else { return nil }
        let ms = Int32(
            clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        return NFCTarget(device: self, info: info, timeoutMilliseconds: ms)
    }

    /// Switches the RF field off (a card in the field loses power). The next `selectTarget` switches it on.
    public func fieldOff() async {
        _ = try? await onDevice { device throws(TesseraError) in
            _ = nfc_initiator_deselect_target(device)
            _ = nfc_device_set_property_bool(device, NP_ACTIVATE_FIELD, false)
        }
    }

    /// Closes the device (idempotent). The device cannot be used afterwards.
    public func close() async {
        guard
            let device = handle.withLock({ h -> OpaquePointer? in
                defer { h = nil }; return h
            })
        else { return }
        let pointer = UncheckedPointer(device)
        _ = try? await thread.run { () throws(TesseraError) in
            _ = nfc_idle(pointer.pointer)
            nfc_close(pointer.pointer)
        }
        context.claimed.withLock { _ = $0.remove(connstring) }
    }

    /// Runs `body` with the device pointer on the device thread; NO_READER once closed.
    func onDevice<T: Sendable>(_ body: @escaping @Sendable (OpaquePointer) throws(TesseraError) -> T)
        async throws(TesseraError) -> T
    {
        let handle = self.handle
        let connstring = self.connstring
        return try await thread.run { () throws(TesseraError) -> T in
            guard let device = handle.withLock({ $0 }) else {
                throw TesseraError(.noReader, "libnfc device \(connstring) is closed")
            }
            return try body(device)
        }
    }

    /// Aborts the libnfc command blocking the device thread (`nfc_abort_command`), from any other thread. Only safe
    /// while that command is `nfc_target_init`: libnfc 1.8 reads an unset status byte after an aborted
    /// TgGetData/TgSetData (see `NFCCardEmulator`).
    func abortBlockingCommand() {
        handle.withLock { device in
            if let device { _ = nfc_abort_command(device) }
        }
    }

    static func lastError(_ device: OpaquePointer) -> String {
        let code = nfc_device_get_last_error(device)
        let text = nfc_strerror(device).map { String(cString: $0) } ?? ""
        return text.isEmpty ? LibNFCError.name(code) : "\(text) [\(LibNFCError.name(code))]"
    }

    private static func info(_ target: nfc_target, _ modulation: NFCModulation) -> NFCTargetInfo {
        var t = target
        switch modulation {
        case .iso14443A:
            let a = t.nti.nai
            let uid = withUnsafeBytes(of: &t.nti.nai.abtUid) { Array($0.prefix(min(a.szUidLen, 10))) }
            let ats = withUnsafeBytes(of: &t.nti.nai.abtAts) { Array($0.prefix(min(a.szAtsLen, 254))) }
            let atqa = withUnsafeBytes(of: &t.nti.nai.abtAtqa) { Array($0) }
            return NFCTargetInfo(modulation: .iso14443A, uid: uid, atqa: atqa, sak: a.btSak, ats: ats)
        case .iso14443B:
            let pupi = withUnsafeBytes(of: &t.nti.nbi.abtPupi) { Array($0) }
            let app = withUnsafeBytes(of: &t.nti.nbi.abtApplicationData) { Array($0) }
            let proto = withUnsafeBytes(of: &t.nti.nbi.abtProtocolInfo) { Array($0) }
            return NFCTargetInfo(modulation: .iso14443B, uid: pupi, applicationData: app, protocolInfo: proto)
        }
    }

    /// Explains why `nfc_open` failed, as far as can be seen from outside libnfc.
    static func diagnoseOpenFailure(_ connstring: String) -> TesseraError {
        let parts = connstring.split(separator: ":", maxSplits: 2).map(String.init)
        let driver = parts.first ?? ""
        let fm = FileManager.default
        let help =
            "install udev/tessera-blacklist-pn533.conf to /etc/modprobe.d/ (then modprobe -r pn533_usb pn533 nfc) "
            + "so the kernel NFC stack releases PN533-family readers, keep pcscd away from the reader (its CCID/ifdnfc "
            + "driver claims ACR122U/PN533 readers), and install udev/70-tessera-nfc.rules so the tessera group may "
            + "open it"
        switch driver {
        case "pn532_uart", "arygon", "pn532_i2c", "pn532_spi":
            guard parts.count >= 2 else {
                return TesseraError(
                    .invalidInput, "connstring \(connstring) names no port (e.g. pn532_uart:/dev/ttyUSB0)")
            }
            let path = parts[1]
            guard fm.fileExists(atPath: path) else {
                return TesseraError(.noReader, "libnfc device \(connstring): \(path) does not exist")
            }
            guard access(path, R_OK | W_OK) == 0 else {
                return TesseraError(
                    .noReader,
                    "libnfc device \(connstring): no permission to open \(path); "
                        + "install udev/70-tessera-nfc.rules and add the daemon user to the tessera group")
            }
            return TesseraError(
                .deviceBusy,
                "libnfc device \(connstring) did not answer as a PN532 or is claimed by "
                    + "another program (libnfc marks serial ports it holds); close other NFC tools or "
                    + "pcscd's ifdnfc driver using \(path)")
        case "pn53x_usb", "acr122_usb", "pn533_usb":
            var holders: [String] = []
            if fm.fileExists(atPath: "/sys/module/pn533_usb") || fm.fileExists(atPath: "/sys/module/pn533") {
                holders.append("the kernel pn533 driver is loaded")
            }
            if fm.fileExists(atPath: "/run/pcscd/pcscd.comm") { holders.append("pcscd is running") }
            let why = holders.isEmpty ? "" : " (" + holders.joined(separator: ", ") + ")"
            return TesseraError(.deviceBusy, "libnfc device \(connstring) cannot be claimed\(why): " + help)
        default:
            return TesseraError(
                .noReader,
                "libnfc cannot open \(connstring): unknown device or driver; "
                    + "list devices with nfc-scan-device -v")
        }
    }
}
