internal import CPKCS11
internal import CSystemShims
import FoundationEssentials
import TesseraCore
import TesseraRuntime

/// Loads PKCS#11 modules through p11-kit and hands out their tokens.
///
/// Each token keeps its own bounded session pool whose blocking C_* calls run on dedicated threads,
/// never on Swift's cooperative pool. Call `finalize()` before the process exits.
public final class PKCS11Provider: Sendable {
    /// Session pool sizing.
    public struct Configuration: Sendable {
        /// Sessions per token for every token; nil picks by slot kind (below). Always capped by `ulMaxSessionCount`.
        public var sessionsPerToken: Int?
        /// Default for `CKF_HW_SLOT` / `CKF_REMOVABLE_DEVICE` slots (smart cards serialise anyway).
        public var hardwareSessions: Int
        /// Default for other slots (e.g. SoftHSM2).
        public var softwareSessions: Int

        public init(sessionsPerToken: Int? = nil, hardwareSessions: Int = 1, softwareSessions: Int = 8) {
            self.sessionsPerToken = sessionsPerToken
            self.hardwareSessions = hardwareSessions
            self.softwareSessions = softwareSessions
        }
    }

    private final class LoadedList: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?
        init(_ pointer: UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?) { self.pointer = pointer }
    }

    private struct State {
        var tokens: [String: PKCS11Token] = [:]
        /// The token ids each module (by index) had at its last enumeration.
        var seenByModule: [Int: [String]] = [:]
        var finalized = false
    }

    public let configuration: Configuration
    private let modules: [Module]
    private let registryList: LoadedList
    private let state = Locked(State())

    /// `modulePaths == nil`: every module p11-kit is configured with (`p11_kit_modules_load_and_initialize`);
    /// otherwise exactly those modules (`p11_kit_module_load` + `p11_kit_module_initialize`).
    /// Throws `TOKEN_ERROR` when a listed module cannot be loaded or initialised.
    public init(modulePaths: [String]?, configuration: Configuration = Configuration()) throws(TesseraError) {
        self.configuration = configuration
        guard let paths = modulePaths else {
            guard let list = p11_kit_modules_load_and_initialize(0) else {
                throw TesseraError(
                    .tokenError, "p11-kit could not load its configured modules: \(Self.p11KitMessage())")
            }
            var loaded: [Module] = []
            var i = 0
            while let m = list[i] {
                loaded.append(Module(pointer: m, fallbackPath: nil))
                i += 1
            }
            modules = loaded
            registryList = LoadedList(list)
            return
        }
        var loaded: [Module] = []
        for path in paths {
            guard let m = p11_kit_module_load(path, 0) else {
                Self.release(loaded)
                throw TesseraError(
                    .tokenError, "cannot load PKCS#11 module \(path): \(Self.p11KitMessage())",
                    details: ["modulePath": .string(path)])
            }
            let rv = p11_kit_module_initialize(m)
            guard rv == CKR_OK else {
                p11_kit_module_release(m)
                Self.release(loaded)
                throw TesseraError(
                    .tokenError, "cannot initialise PKCS#11 module \(path): \(ReturnValue.name(rv))",
                    details: ["modulePath": .string(path), "ckr": .string(ReturnValue.name(rv))])
            }
            loaded.append(Module(pointer: m, fallbackPath: path))
        }
        modules = loaded
        registryList = LoadedList(nil)
    }

    deinit { finalize() }

    /// p11-kit names (or file names) of the loaded modules.
    public var moduleNames: [String] { modules.map(\.name) }

    /// Whether some loaded module talks to card readers (its slots are hardware slots or removable devices).
    public var hasReaderModules: Bool { modules.contains(where: \.talksToReaders) }

    /// Re-enumerates the slots that hold a token, skipping modules and slots that error.
    /// A token seen before is returned as the same instance (its slot number updated). With
    /// `skippingReaderModules`, a module that talks to card readers is not asked (enumerating it may connect to every
    /// card in every reader): its tokens are those its last enumeration found.
    public func tokens(skippingReaderModules: Bool = false) -> [PKCS11Token] {
        if state.withLock({ $0.finalized }) { return [] }
        var result: [PKCS11Token] = []
        var seen = Set<String>()
        for (index, module) in modules.enumerated() {
            if skippingReaderModules, module.talksToReaders {
                let kept = state.withLock { s in (s.seenByModule[index] ?? []).compactMap { s.tokens[$0] } }
                result += kept
                seen.formUnion(kept.map(\.id))
                continue
            }
            var found: [String] = []
            defer { state.withLock { $0.seenByModule[index] = found } }
            for slot in module.slotsWithToken() {
                guard let slotInfo = module.slotInfo(slot), case .success(let tokenInfo) = module.tokenInfo(slot) else {
                    continue
                }
                let info = TokenInfo(token: tokenInfo, slot: slotInfo, module: module)
                var id = TokenInfo.stableID(
                    moduleFileName: module.fileName, manufacturer: info.manufacturer,
                    model: info.model, serial: info.serial, label: info.label)
                if seen.contains(id) {
                    id = TokenInfo.stableID(
                        moduleFileName: module.fileName, manufacturer: info.manufacturer,
                        model: info.model, serial: info.serial, label: info.label,
                        disambiguator: "slot \(slot)")
                }
                seen.insert(id)
                let sessions = sessionCount(for: info)
                let token = state.withLock { s -> PKCS11Token? in
                    if s.finalized { return nil }
                    if let existing = s.tokens[id] {
                        existing.update(slot: slot, info: info)
                        return existing
                    }
                    let created = PKCS11Token(id: id, module: module, slot: slot, info: info, sessions: sessions)
                    s.tokens[id] = created
                    return created
                }
                if let token {
                    result.append(token)
                    found.append(id)
                }
            }
        }
        return result
    }

    /// `tokens(skippingReaderModules:)` run on a separate thread, for callers on the cooperative pool.
    public func tokensAsync(skippingReaderModules: Bool = false) async -> [PKCS11Token] {
        await DedicatedThread.run(name: "tessera.p11.enumerate") { [self] in
            self.tokens(skippingReaderModules: skippingReaderModules)
        }
    }

    /// Stops every session thread (closing sessions) and finalises the modules. Idempotent; later calls fail with
    /// `SHUTTING_DOWN`.
    public func finalize() {
        let tokens = state.withLock { s -> [PKCS11Token]? in
            if s.finalized { return nil }
            s.finalized = true
            return Array(s.tokens.values)
        }
        guard let tokens else { return }
        for token in tokens { token.shutdown() }
        if let list = registryList.pointer {
            p11_kit_modules_finalize_and_release(list)
        } else {
            Self.release(modules)
        }
    }

    /// Initialises the first present but uninitialised token of the module whose file name contains
    /// `moduleFileNameContaining` (e.g. SoftHSM2's free slot) through PKCS#11 itself: `C_InitToken` with `soPIN` and
    /// `label`, then a security-officer session that sets the user PIN (`C_InitPIN`). No PIN leaves the process.
    /// `TOKEN_NOT_PRESENT` when there is no such module or free token; `TOKEN_ERROR` with the `CKR_*` name otherwise.
    /// Blocking: call it off the cooperative pool or at start-up only. Re-create the provider afterwards to see the token.
    public func initializeFreeToken(
        moduleFileNameContaining fragment: String, label: String,
        soPIN: String, userPIN: String
    ) throws(TesseraError) {
        guard let module = modules.first(where: { $0.fileName.contains(fragment) }) else {
            throw TesseraError(.tokenNotPresent, "no PKCS#11 module named like \(fragment) is loaded")
        }
        guard
            let slot = module.slotsWithToken().first(where: { slot in
                guard case .success(let info) = module.tokenInfo(slot) else { return false }
                return info.flags & ck_flags_t(CKF_TOKEN_INITIALIZED) == 0
            })
        else {
            throw TesseraError(.tokenNotPresent, "module \(module.name) has no uninitialised token")
        }
        try TokenInitialization.run(
            module: module, slot: slot, label: label, soPIN: Array(soPIN.utf8),
            userPIN: Array(userPIN.utf8)
        ).get()
    }

    private func sessionCount(for info: TokenInfo) -> Int {
        let hardware = info.flags.isHardwareSlot || info.flags.isRemovableDevice
        var n =
            configuration.sessionsPerToken
            ?? (hardware ? configuration.hardwareSessions : configuration.softwareSessions)
        if let limit = info.maxSessionCount { n = min(n, limit) }
        return max(1, n)
    }

    private static func release(_ modules: [Module]) {
        for m in modules {
            _ = p11_kit_module_finalize(m.pointer)
            p11_kit_module_release(m.pointer)
        }
    }

    private static func p11KitMessage() -> String {
        guard let m = p11_kit_message() else { return "no details" }
        return String(cString: m)
    }
}

/// `C_InitToken` + `C_InitPIN` on one slot.
enum TokenInitialization {
    static func run(module: Module, slot: ck_slot_id_t, label: String, soPIN: [UInt8], userPIN: [UInt8]) -> Result<
        Void, TesseraError
    > {
        func fail(_ rv: ck_rv_t, _ call: String) -> Result<Void, TesseraError> {
            .failure(
                TesseraError(
                    .tokenError, "\(call) failed: \(ReturnValue.name(rv))",
                    details: ["ckr": .string(ReturnValue.name(rv))]))
        }
        guard let initToken = module.f.C_InitToken, let openSession = module.f.C_OpenSession,
            let login = module.f.C_Login,
            let initPIN = module.f.C_InitPIN, let closeSession = module.f.C_CloseSession
        else {
            return fail(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_InitToken")
        }
        // The label is 32 bytes, blank-padded, not NUL-terminated.
        var paddedLabel = Array(label.utf8.prefix(32))
        paddedLabel += [UInt8](repeating: 0x20, count: 32 - paddedLabel.count)
        var so = soPIN
        var user = userPIN
        defer {
            so.withUnsafeMutableBytes { tessera_secure_zero($0.baseAddress, $0.count) }
            user.withUnsafeMutableBytes { tessera_secure_zero($0.baseAddress, $0.count) }
        }
        var rv = so.withUnsafeMutableBufferPointer { soBuf in
            paddedLabel.withUnsafeMutableBufferPointer { labelBuf in
                initToken(slot, soBuf.baseAddress, UInt(soBuf.count), labelBuf.baseAddress)
            }
        }
        guard rv == CKR_OK else { return fail(rv, "C_InitToken") }
        var session: ck_session_handle_t = 0
        rv = openSession(slot, ck_flags_t(CKF_SERIAL_SESSION | CKF_RW_SESSION), nil, nil, &session)
        guard rv == CKR_OK else { return fail(rv, "C_OpenSession") }
        defer { _ = closeSession(session) }
        rv = so.withUnsafeMutableBufferPointer {
            login(session, ck_user_type_t(CKU_SO), $0.baseAddress, UInt($0.count))
        }
        guard rv == CKR_OK else { return fail(rv, "C_Login(SO)") }
        rv = user.withUnsafeMutableBufferPointer { initPIN(session, $0.baseAddress, UInt($0.count)) }
        _ = module.f.C_Logout?(session)
        guard rv == CKR_OK else { return fail(rv, "C_InitPIN") }
        return .success(())
    }
}
