internal import CPCSCLite
import FoundationEssentials
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// Thin synchronous wrappers around SCard* calls. Every function here blocks; call them on a DedicatedThread.
enum SCard {
    static func establish() throws(TesseraError) -> SCARDCONTEXT {
        var ctx: SCARDCONTEXT = 0
        let rv = Int(SCardEstablishContext(SCardConst.scopeSystem, nil, nil, &ctx))
        guard rv == SCardRV.success else { throw pcscError(rv, "SCardEstablishContext", phase: .context) }
        return ctx
    }

    static func release(_ ctx: SCARDCONTEXT) {
        _ = SCardReleaseContext(ctx)
    }

    /// Reader names; an empty list when pcscd has none. Returns the raw code on other failures.
    static func listReaders(_ ctx: SCARDCONTEXT) -> Result<[String], SCardFailure> {
        for _ in 0..<3 {  // the list can grow between the size query and the fetch
            var size: DWORD = 0
            var rv = Int(SCardListReaders(ctx, nil, nil, &size))
            if rv == SCardRV.noReadersAvailable { return .success([]) }
            guard rv == SCardRV.success else { return .failure(SCardFailure(rv, "SCardListReaders")) }
            var buffer = [CChar](repeating: 0, count: Int(size) + 1)
            rv = Int(SCardListReaders(ctx, nil, &buffer, &size))
            if rv == SCardRV.noReadersAvailable { return .success([]) }
            if rv == SCardRV.insufficientBuffer { continue }
            guard rv == SCardRV.success else { return .failure(SCardFailure(rv, "SCardListReaders")) }
            return .success(parseMultiString(buffer, count: Int(size)))
        }
        return .failure(SCardFailure(SCardRV.insufficientBuffer, "SCardListReaders"))
    }

    static func parseMultiString(_ buffer: [CChar], count: Int) -> [String] {
        var names: [String] = []
        var current: [UInt8] = []
        for c in buffer.prefix(count) {
            if c == 0 {
                if current.isEmpty { break }
                names.append(String(decoding: current, as: UTF8.self))
                current = []
            } else {
                current.append(UInt8(bitPattern: c))
            }
        }
        if !current.isEmpty { names.append(String(decoding: current, as: UTF8.self)) }
        return names
    }

    struct WaitEntry {
        var name: String
        var currentState: DWORD
    }

    struct WaitResult {
        var name: String
        var eventState: DWORD
        var atr: [UInt8]
    }

    /// SCardGetStatusChange over the given readers; returns the raw code and every reader's event state.
    static func getStatusChange(_ ctx: SCARDCONTEXT, _ entries: [WaitEntry], timeoutMs: DWORD)
        -> (rv: Int, results: [WaitResult])
    {
        let names = entries.map { strdup($0.name) }
        defer { for name in names { free(name) } }
        var states = entries.enumerated().map { index, entry in
            var s = SCARD_READERSTATE()
            s.szReader = UnsafePointer(names[index])
            s.dwCurrentState = entry.currentState
            return s
        }
        let rv = Int(SCardGetStatusChange(ctx, timeoutMs, &states, DWORD(states.count)))
        let results = states.enumerated().map { index, s in
            let count = min(Int(s.cbAtr), SCardConst.maxATRSize)
            let atr = withUnsafeBytes(of: s.rgbAtr) { Array($0.prefix(count)) }
            return WaitResult(name: entries[index].name, eventState: s.dwEventState, atr: atr)
        }
        return (rv, results)
    }

    static func readerState(_ r: WaitResult) -> PCSCReaderState? {
        let st = r.eventState
        if st & SCardConst.stateUnknown != 0 { return nil }  // the reader is gone
        let present = st & SCardConst.statePresent != 0
        return PCSCReaderState(
            name: r.name, cardPresent: present, atr: present ? r.atr : [],
            exclusive: st & SCardConst.stateExclusive != 0, inUse: st & SCardConst.stateInUse != 0,
            mute: st & SCardConst.stateMute != 0, eventCount: Int((st >> 16) & 0xFFFF))
    }

    /// The dwCurrentState that describes a known reader state to SCardGetStatusChange.
    static func currentState(for state: PCSCReaderState) -> DWORD {
        var st: DWORD = state.cardPresent ? SCardConst.statePresent : SCardConst.stateEmpty
        if state.exclusive { st |= SCardConst.stateExclusive }
        if state.inUse { st |= SCardConst.stateInUse }
        if state.mute { st |= SCardConst.stateMute }
        st |= DWORD(state.eventCount & 0xFFFF) << 16
        return st
    }

    /// Current state of every reader (one SCardListReaders + a zero-timeout SCardGetStatusChange).
    static func snapshot(_ ctx: SCARDCONTEXT) -> Result<[PCSCReaderState], SCardFailure> {
        let names: [String]
        switch listReaders(ctx) {
        case .failure(let f): return .failure(f)
        case .success(let n): names = n
        }
        if names.isEmpty { return .success([]) }
        let (rv, results) = getStatusChange(
            ctx, names.map { WaitEntry(name: $0, currentState: SCardConst.stateUnaware) }, timeoutMs: 0)
        if rv == SCardRV.unknownReader {
            // A reader left between the two calls: report the ones still known.
            return .success(results.compactMap { $0.eventState & SCardConst.stateUnknown != 0 ? nil : readerState($0) })
        }
        guard rv == SCardRV.success || rv == SCardRV.timeout else {
            return .failure(SCardFailure(rv, "SCardGetStatusChange"))
        }
        return .success(results.compactMap(readerState))
    }
}

/// A raw failing pcsc-lite call.
struct SCardFailure: Error {
    var rv: Int
    var operation: String
    init(_ rv: Int, _ operation: String) { self.rv = rv; self.operation = operation }
    func error(_ phase: SCardPhase) -> TesseraError { pcscError(rv, operation, phase: phase) }
}
