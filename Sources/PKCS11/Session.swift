internal import CPKCS11
import FoundationEssentials
import TesseraCore
import TesseraRuntime

/// A failed C_* call.
struct CKFailure: Error {
    let rv: ck_rv_t
    let function: String
    init(_ rv: ck_rv_t, _ function: String) { self.rv = rv; self.function = function }
}

/// What a session operation can fail with before it is mapped to a `TesseraError` on the worker thread.
enum OperationError: Error {
    case ck(CKFailure)
    case failure(TesseraError)

    static func call(_ rv: ck_rv_t, _ function: String) -> OperationError { .ck(CKFailure(rv, function)) }
}

/// One attribute value for a template.
enum AttributeValue {
    case bool(Bool)
    case ulong(UInt)
    case bytes([UInt8])
}

/// Builds a C attribute template whose memory lives for the duration of `body`.
func withTemplate<R>(
    _ attributes: [(ck_attribute_type_t, AttributeValue)],
    _ body: (UnsafeMutablePointer<ck_attribute>, UInt) throws(OperationError) -> R
) throws(OperationError) -> R {
    var buffers: [UnsafeMutableRawPointer] = []
    defer { for b in buffers { b.deallocate() } }
    let template = UnsafeMutablePointer<ck_attribute>.allocate(capacity: max(attributes.count, 1))
    defer { template.deallocate() }
    for (i, (type, value)) in attributes.enumerated() {
        let bytes: [UInt8]
        switch value {
        case .bool(let b): bytes = [b ? 1 : 0]
        case .ulong(let v): bytes = withUnsafeBytes(of: v) { Array($0) }
        case .bytes(let v): bytes = v
        }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 8)
        buffers.append(buffer)
        bytes.withUnsafeBytes { src in
            if let base = src.baseAddress { buffer.copyMemory(from: base, byteCount: bytes.count) }
        }
        (template + i).initialize(to: ck_attribute(type: type, value: buffer, value_len: UInt(bytes.count)))
    }
    return try body(template, UInt(attributes.count))
}

/// An open session, used only on its worker's thread.
struct SessionContext {
    let module: Module
    let slot: ck_slot_id_t
    let session: ck_session_handle_t

    private var f: CK_FUNCTION_LIST { module.f }

    func state() throws(OperationError) -> ck_state_t {
        var info = ck_session_info()
        let rv = f.C_GetSessionInfo?(session, &info) ?? ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED)
        guard rv == CKR_OK else { throw .call(rv, "C_GetSessionInfo") }
        return info.state
    }

    func isLoggedIn() throws(OperationError) -> Bool {
        let s = try state()
        return s == CKS_RO_USER_FUNCTIONS || s == CKS_RW_USER_FUNCTIONS
    }

    func login(pin: [UInt8]) -> ck_rv_t {
        guard let call = f.C_Login else { return ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED) }
        var pin = pin
        return pin.withUnsafeMutableBufferPointer {
            call(session, ck_user_type_t(CKU_USER), $0.baseAddress, UInt($0.count))
        }
    }

    func logout() -> ck_rv_t { f.C_Logout?(session) ?? ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED) }

    /// `C_SetPIN`: the user PIN (the session is public or logged in as user).
    func setPIN(old: [UInt8], new: [UInt8]) -> ck_rv_t {
        guard let call = f.C_SetPIN else { return ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED) }
        var old = old
        var new = new
        return old.withUnsafeMutableBufferPointer { o in
            new.withUnsafeMutableBufferPointer { n in
                call(session, o.baseAddress, UInt(o.count), n.baseAddress, UInt(n.count))
            }
        }
    }

    func tokenInfo() -> ck_token_info? { try? module.tokenInfo(slot).get() }

    func findObjects(
        _ attributes: [(ck_attribute_type_t, AttributeValue)], limit: Int = 64
    ) throws(OperationError) -> [ck_object_handle_t] {
        guard let initCall = f.C_FindObjectsInit, let findCall = f.C_FindObjects, let finalCall = f.C_FindObjectsFinal
        else {
            throw .call(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_FindObjectsInit")
        }
        let session = self.session
        return try withTemplate(attributes) { (template, count) throws(OperationError) -> [ck_object_handle_t] in
            let rv = initCall(session, template, count)
            guard rv == CKR_OK else { throw .call(rv, "C_FindObjectsInit") }
            var found: [ck_object_handle_t] = []
            var batch = [ck_object_handle_t](repeating: 0, count: 16)
            var failure: ck_rv_t = ck_rv_t(CKR_OK)
            while found.count < limit {
                var n: UInt = 0
                let rv = findCall(session, &batch, UInt(batch.count), &n)
                if rv != CKR_OK { failure = rv; break }
                if n == 0 { break }
                found += batch.prefix(Int(n))
            }
            _ = finalCall(session)
            guard failure == CKR_OK else { throw .call(failure, "C_FindObjects") }
            return Array(found.prefix(limit))
        }
    }

    /// One attribute's value, or the CKR the token answered (e.g. `CKR_ATTRIBUTE_SENSITIVE`).
    func attribute(_ object: ck_object_handle_t, _ type: ck_attribute_type_t) -> Result<[UInt8], CKFailure> {
        guard let call = f.C_GetAttributeValue else {
            return .failure(CKFailure(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_GetAttributeValue"))
        }
        var probe = ck_attribute(type: type, value: nil, value_len: 0)
        var rv = call(session, object, &probe, 1)
        guard rv == CKR_OK else { return .failure(CKFailure(rv, "C_GetAttributeValue")) }
        if probe.value_len == UInt.max {
            return .failure(CKFailure(ck_rv_t(CKR_ATTRIBUTE_SENSITIVE), "C_GetAttributeValue"))
        }
        if probe.value_len == 0 { return .success([]) }
        var value = [UInt8](repeating: 0, count: Int(probe.value_len))
        rv = value.withUnsafeMutableBytes { buf -> ck_rv_t in
            var attr = ck_attribute(type: type, value: buf.baseAddress, value_len: UInt(buf.count))
            let rv = call(session, object, &attr, 1)
            if rv == CKR_OK { probe.value_len = attr.value_len }
            return rv
        }
        guard rv == CKR_OK else { return .failure(CKFailure(rv, "C_GetAttributeValue")) }
        return .success(Array(value.prefix(Int(probe.value_len))))
    }

    func boolAttribute(_ object: ck_object_handle_t, _ type: ck_attribute_type_t) -> Bool? {
        guard case .success(let v) = attribute(object, type), v.count == 1 else { return nil }
        return v[0] != 0
    }

    func destroy(_ object: ck_object_handle_t) throws(OperationError) {
        let rv = f.C_DestroyObject?(session, object) ?? ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED)
        guard rv == CKR_OK else { throw .call(rv, "C_DestroyObject") }
    }

    /// C_SignInit + C_Sign; returns the CKR rather than throwing so callers can react to stale handles.
    func sign(mechanism: ck_mechanism_type_t, key: ck_object_handle_t, data: [UInt8]) -> Result<[UInt8], CKFailure> {
        guard let initCall = f.C_SignInit, let signCall = f.C_Sign else {
            return .failure(CKFailure(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_SignInit"))
        }
        var mech = ck_mechanism(mechanism: mechanism, parameter: nil, parameter_len: 0)
        let rv = initCall(session, &mech, key)
        guard rv == CKR_OK else { return .failure(CKFailure(rv, "C_SignInit")) }
        var signRV = ck_rv_t(CKR_OK)
        // C_Sign does not write pData (CK_BYTE_PTR for historical reasons): no mutable copy of `data`.
        let signature = data.withUnsafeBufferPointer { d in
            [UInt8](unsafeUninitializedCapacity: 512) { s, count in
                var length = UInt(s.count)
                signRV = signCall(
                    session, UnsafeMutablePointer(mutating: d.baseAddress), UInt(d.count), s.baseAddress, &length)
                count = signRV == CKR_OK ? min(Int(length), s.count) : 0
            }
        }
        guard signRV == CKR_OK else { return .failure(CKFailure(signRV, "C_Sign")) }
        return .success(signature)
    }

    /// C_GenerateKey (a secret key made on the token) with a mechanism without parameters.
    func generateKey(mechanism: ck_mechanism_type_t, template: [(ck_attribute_type_t, AttributeValue)])
        throws(OperationError) -> ck_object_handle_t
    {
        guard let call = f.C_GenerateKey else { throw .call(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_GenerateKey") }
        let session = self.session
        return try withTemplate(template) { (t, count) throws(OperationError) in
            var mech = ck_mechanism(mechanism: mechanism, parameter: nil, parameter_len: 0)
            var key: ck_object_handle_t = 0
            let rv = call(session, &mech, t, count, &key)
            guard rv == CKR_OK else { throw .call(rv, "C_GenerateKey") }
            return key
        }
    }

    /// Runs `make` (a call that makes objects with the `CKA_ID` `keyID`) up to three times while it fails with
    /// `CKR_GENERAL_ERROR`, destroying after each failure whatever it left with that id (objects that were not there
    /// before the first attempt; the ones that were are never touched). SoftHSM2 2.6.1, Debian 12's, answers
    /// `CKR_GENERAL_ERROR` now and then to object creation while other threads of the process use the library (its
    /// object store re-reads files mid-write; SoftHSMv2 issues #573/#576), and the same call then succeeds.
    func retryingTransientFailure<T>(
        keyID: [UInt8], _ make: () throws(OperationError) -> T
    ) throws(OperationError) -> T {
        let byID: [(ck_attribute_type_t, AttributeValue)] = [(ck_attribute_type_t(CKA_ID), .bytes(keyID))]
        let before = Set((try? findObjects(byID)) ?? [])
        var attempt = 1
        while true {
            do {
                return try make()
            } catch {
                guard case .ck(let failure) = error, failure.rv == ck_rv_t(CKR_GENERAL_ERROR) else { throw error }
                for leftover in (try? findObjects(byID)) ?? [] where !before.contains(leftover) {
                    try? destroy(leftover)
                }
                guard attempt < 3 else { throw error }
                attempt += 1
            }
        }
    }

    func generateKeyPair(
        mechanism: ck_mechanism_type_t,
        publicTemplate: [(ck_attribute_type_t, AttributeValue)],
        privateTemplate: [(ck_attribute_type_t, AttributeValue)]
    ) throws(OperationError) -> (publicKey: ck_object_handle_t, privateKey: ck_object_handle_t) {
        guard let call = f.C_GenerateKeyPair else {
            throw .call(ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED), "C_GenerateKeyPair")
        }
        let session = self.session
        return try withTemplate(publicTemplate) { (pub, pubCount) throws(OperationError) in
            try withTemplate(privateTemplate) { (priv, privCount) throws(OperationError) in
                var mech = ck_mechanism(mechanism: mechanism, parameter: nil, parameter_len: 0)
                var publicKey: ck_object_handle_t = 0
                var privateKey: ck_object_handle_t = 0
                let rv = call(session, &mech, pub, pubCount, priv, privCount, &publicKey, &privateKey)
                guard rv == CKR_OK else { throw .call(rv, "C_GenerateKeyPair") }
                return (publicKey, privateKey)
            }
        }
    }
}

/// Return values after which the session handle is gone.
private let sessionEndingReturnValues: Set<ck_rv_t> = [
    ck_rv_t(CKR_SESSION_HANDLE_INVALID), ck_rv_t(CKR_SESSION_CLOSED), ck_rv_t(CKR_DEVICE_REMOVED),
    ck_rv_t(CKR_TOKEN_NOT_PRESENT), ck_rv_t(CKR_TOKEN_NOT_RECOGNIZED), ck_rv_t(CKR_SLOT_ID_INVALID),
    ck_rv_t(CKR_CRYPTOKI_NOT_INITIALIZED),
]

/// Maps a C_* failure to the stable error codes (called on a worker thread; may ask the slot whether the token is there).
func mapFailure(_ failure: CKFailure, module: Module, slot: ck_slot_id_t) -> TesseraError {
    let name = ReturnValue.name(failure.rv)
    let details: [String: JSONValue] = ["ckr": .string(name), "function": .string(failure.function)]
    switch failure.rv {
    case ck_rv_t(CKR_TOKEN_NOT_PRESENT), ck_rv_t(CKR_DEVICE_REMOVED), ck_rv_t(CKR_TOKEN_NOT_RECOGNIZED),
        ck_rv_t(CKR_SLOT_ID_INVALID):
        return TesseraError(
            .tokenNotPresent, "the token is not present (\(failure.function): \(name))", details: details)
    case ck_rv_t(CKR_SESSION_HANDLE_INVALID), ck_rv_t(CKR_SESSION_CLOSED):
        if !module.tokenPresent(in: slot) {
            return TesseraError(
                .tokenNotPresent, "the token was removed (\(failure.function): \(name))", details: details)
        }
        return TesseraError(
            .tokenError, "\(failure.function) failed: \(name); the session was reopened",
            retryable: true, details: details)
    case ck_rv_t(CKR_USER_NOT_LOGGED_IN):
        return TesseraError(.pinRequired, "the token needs a PIN login first", details: details)
    case ck_rv_t(CKR_PIN_INCORRECT):
        return TesseraError(.pinInvalid, "the PIN is incorrect", details: details)
    case ck_rv_t(CKR_PIN_LOCKED):
        return TesseraError(.pinLocked, "the user PIN is locked", details: details)
    case ck_rv_t(CKR_PIN_LEN_RANGE), ck_rv_t(CKR_PIN_INVALID):
        return TesseraError(.pinInvalid, "the PIN has an invalid length or characters (\(name))", details: details)
    default:
        return TesseraError(.tokenError, "\(failure.function) failed: \(name)", details: details)
    }
}

/// A dedicated OS thread (`DedicatedThread`) that owns one PKCS#11 session and runs blocking C_* calls for async
/// callers.
final class SessionWorker: @unchecked Sendable {
    private let module: Module
    private let slotRef: Locked<ck_slot_id_t>
    /// Software tokens answer in microseconds: their calls run on the caller's thread (the pool still grants
    /// each worker to one caller at a time), saving two thread hand-offs per operation. nil then.
    private let thread: DedicatedThread?
    private let stopRequested = Locked(false)
    // Touched only by the thread running the current job (the worker thread, or the caller when inline):
    private var session: ck_session_handle_t?
    private var sessionSlot: ck_slot_id_t = 0

    init(module: Module, slot: Locked<ck_slot_id_t>, name: String, inline: Bool = false) {
        self.module = module
        self.slotRef = slot
        thread = inline ? nil : DedicatedThread(name: name)
    }

    /// Runs `body` on the worker thread with an open session; maps failures there.
    nonisolated(nonsending) func run<T: Sendable>(
        _ body: @escaping @Sendable (SessionContext) throws(OperationError) -> T
    ) async -> Result<T, TesseraError> {
        guard let thread else {
            if stopRequested.withLock({ $0 }) { return Self.finalized() }
            return execute(body)
        }
        do {
            return try await thread.run { [self] () -> Result<T, TesseraError> in
                // A job queued just before `stop()` must not reopen the session closed by then.
                stopRequested.withLock { $0 } ? Self.finalized() : execute(body)
            }
        } catch {
            return Self.finalized()
        }
    }

    private static func finalized<T>() -> Result<T, TesseraError> {
        .failure(TesseraError(.shuttingDown, "the PKCS#11 provider was finalized"))
    }

    /// Asks the thread to close its session and exit once its current job is done.
    func stop() {
        stopRequested.withLock { $0 = true }
        guard let thread else { return closeSession() }
        thread.enqueue { [self] in closeSession() }
        thread.finish()
    }

    /// Waits until the thread has exited (after `stop()`).
    func join() { thread?.join() }

    private func execute<T>(_ body: (SessionContext) throws(OperationError) -> T) -> Result<T, TesseraError> {
        let slot = slotRef.withLock { $0 }
        if session != nil, sessionSlot != slot { closeSession() }
        if session == nil {
            var handle: ck_session_handle_t = 0
            let flags = ck_flags_t(CKF_SERIAL_SESSION) | ck_flags_t(CKF_RW_SESSION)
            let rv = module.f.C_OpenSession?(slot, flags, nil, nil, &handle) ?? ck_rv_t(CKR_FUNCTION_NOT_SUPPORTED)
            guard rv == CKR_OK else {
                return .failure(mapFailure(CKFailure(rv, "C_OpenSession"), module: module, slot: slot))
            }
            session = handle
            sessionSlot = slot
        }
        do {
            return .success(try body(SessionContext(module: module, slot: slot, session: session!)))
        } catch {
            switch error {
            case .failure(let e):
                return .failure(e)
            case .ck(let failure):
                if sessionEndingReturnValues.contains(failure.rv) { session = nil }
                return .failure(mapFailure(failure, module: module, slot: slot))
            }
        }
    }

    private func closeSession() {
        if let s = session { _ = module.f.C_CloseSession?(s) }
        session = nil
    }
}
