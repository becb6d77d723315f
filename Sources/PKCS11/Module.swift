internal import CPKCS11
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// One initialised PKCS#11 module (a p11-kit function list).
final class Module: @unchecked Sendable {
    /// Immutable copy of the module's function table.
    let f: CK_FUNCTION_LIST
    let pointer: UnsafeMutablePointer<CK_FUNCTION_LIST>
    let path: String
    let name: String
    /// Some slot is a hardware slot or a removable device (a card reader: OpenSC and the like talk to pcscd), so
    /// enumerating the module may connect to the cards in the readers.
    let talksToReaders: Bool

    init(pointer: UnsafeMutablePointer<CK_FUNCTION_LIST>, fallbackPath: String?) {
        self.pointer = pointer
        self.f = pointer.pointee
        let filename = Self.takeString(p11_kit_module_get_filename(pointer)) ?? fallbackPath ?? "unknown"
        self.path = filename
        fileName = FilePaths.name(of: filename)
        self.name =
            Self.takeString(p11_kit_module_get_name(pointer))
            ?? fileName
        let f = pointer.pointee
        var readers = false
        if let getSlotList = f.C_GetSlotList, let getSlotInfo = f.C_GetSlotInfo {
            var count: UInt = 0
            if getSlotList(0, nil, &count) == CKR_OK, count > 0 {
                var slots = [ck_slot_id_t](repeating: 0, count: Int(count))
                if getSlotList(0, &slots, &count) == CKR_OK {
                    let mask = UInt(CKF_HW_SLOT) | UInt(CKF_REMOVABLE_DEVICE)
                    readers = slots.prefix(Int(count)).contains { slot in
                        var info = ck_slot_info()
                        return getSlotInfo(slot, &info) == CKR_OK && info.flags & mask != 0
                    }
                }
            }
        }
        self.talksToReaders = readers
    }

    /// The last component of `path`, kept: every enumeration of the token list names tokens by it.
    let fileName: String

    private static func takeString(_ p: UnsafeMutablePointer<CChar>?) -> String? {
        guard let p else { return nil }
        defer { free(p) }
        return String(cString: p)
    }

    /// The slots with a token present; an empty list when the module errors.
    func slotsWithToken() -> [ck_slot_id_t] {
        guard let getSlotList = f.C_GetSlotList else { return [] }
        for _ in 0..<4 {
            var count: UInt = 0
            guard getSlotList(1, nil, &count) == CKR_OK else { return [] }
            if count == 0 { return [] }
            var slots = [ck_slot_id_t](repeating: 0, count: Int(count))
            let rv = getSlotList(1, &slots, &count)
            if rv == CKR_OK { return Array(slots.prefix(Int(count))) }
            if rv != CKR_BUFFER_TOO_SMALL { return [] }
        }
        return []
    }

    func slotInfo(_ slot: ck_slot_id_t) -> ck_slot_info? {
        var info = ck_slot_info()
        guard let call = f.C_GetSlotInfo, call(slot, &info) == CKR_OK else { return nil }
        return info
    }

    func tokenInfo(_ slot: ck_slot_id_t) -> Result<ck_token_info, CKFailure> {
        var info = ck_token_info()
        guard let call = f.C_GetTokenInfo else {
            return .failure(CKFailure(CKR_FUNCTION_NOT_SUPPORTED, "C_GetTokenInfo"))
        }
        let rv = call(slot, &info)
        return rv == CKR_OK ? .success(info) : .failure(CKFailure(rv, "C_GetTokenInfo"))
    }

    func mechanisms(_ slot: ck_slot_id_t) -> [ck_mechanism_type_t] {
        guard let call = f.C_GetMechanismList else { return [] }
        var count: UInt = 0
        guard call(slot, nil, &count) == CKR_OK, count > 0 else { return [] }
        var list = [ck_mechanism_type_t](repeating: 0, count: Int(count))
        guard call(slot, &list, &count) == CKR_OK else { return [] }
        return Array(list.prefix(Int(count)))
    }

    func tokenPresent(in slot: ck_slot_id_t) -> Bool {
        guard let info = slotInfo(slot) else { return false }
        return info.flags & UInt(CKF_TOKEN_PRESENT) != 0
    }
}

/// Space-padded fixed-size PKCS#11 text (imported as a tuple) as a trimmed String.
func paddedString<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { raw in
        var bytes = Array(raw)
        while let last = bytes.last, last == 0x20 || last == 0 { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}
