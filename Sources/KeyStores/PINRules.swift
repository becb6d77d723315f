import FoundationEssentials
import Logging
import Ownership
import Synchronization
import TesseraCore

/// The process that sent a PIN: the peer of the socket connection (SO_PEERCRED).
public struct PINCaller: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var pid: Int32
    public init(uid: UInt32, pid: Int32) { self.uid = uid; self.pid = pid }
    public var description: String { "uid \(uid) pid \(pid)" }
}

extension Requester {
    /// The caller as the PIN rules know it (back-off per uid, wrong-PIN log with uid and pid).
    public var pinCaller: PINCaller { PINCaller(uid: uid, pid: pid) }
}

/// How long a uid waits after wrong PINs: `initial` after the first, doubling with each further wrong PIN in a row,
/// at most `maximum`. A correct PIN clears the uid's count. `initial` zero turns the back-off off.
public struct PINBackoffPolicy: Sendable, Equatable {
    public var initial: Duration
    public var maximum: Duration

    /// 2 s after a wrong PIN, then 4, 8, … up to 60 s.
    public static let standard = PINBackoffPolicy(initial: .seconds(2), maximum: .seconds(60))

    public init(initial: Duration, maximum: Duration) {
        self.initial = max(initial, .zero)
        self.maximum = max(maximum, self.initial)
    }

    /// The wait after `failures` (≥ 1) wrong PINs in a row.
    public func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0, initial > .zero else { return .zero }
        var d = initial
        for _ in 1..<min(failures, 64) {
            d = d * 2
            if d >= maximum { return maximum }
        }
        return min(d, maximum)
    }
}

/// Per-uid back-off state (pure; the caller supplies the clock).
struct PINBackoffTable: Sendable {
    struct Entry: Sendable { var failures: Int; var until: ContinuousClock.Instant }
    let policy: PINBackoffPolicy
    private(set) var entries: [UInt32: Entry] = [:]

    init(policy: PINBackoffPolicy) { self.policy = policy }

    /// PIN_BACKOFF when `uid` must still wait at `now`.
    func check(uid: UInt32, now: ContinuousClock.Instant) throws(TesseraError) {
        guard let e = entries[uid], now < e.until else { return }
        let wait = e.until - now
        let seconds = Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up))
        throw TesseraError(
            .pinBackoff, "a wrong PIN came from uid \(uid) a moment ago: no PIN is tried for it for \(seconds) s",
            details: ["retryAfterSeconds": .number(Double(max(seconds, 1)))])
    }

    /// Records a wrong PIN from `uid` at `now`; returns the wait it now has.
    @discardableResult
    mutating func recordFailure(uid: UInt32, now: ContinuousClock.Instant) -> Duration {
        if entries.count >= 4096 {
            entries = entries.filter { now < $0.value.until + policy.maximum }
        }
        // A uid whose last wrong PIN is older than the longest wait starts over.
        var failures = 1
        if let e = entries[uid], now < e.until + policy.maximum { failures = e.failures + 1 }
        let wait = policy.delay(afterFailures: failures)
        entries[uid] = Entry(failures: failures, until: now + wait)
        return wait
    }

    mutating func recordSuccess(uid: UInt32) { entries[uid] = nil }
}

/// One use of a caller's PIN, as a `KeyStoreToken` receives it. The token calls `willSpendTry` right before the
/// PIN reaches the card or token in a way that can cost a try, and `didSpendTry` with the outcome, both while it
/// holds its own lock, so concurrent requests see each other's outcome.
public final class PINAttempt: Sendable {
    public let pin: String
    /// Whether the token's last PIN try may be spent (a wrong PIN then locks the token).
    public let allowFinalTry: Bool
    let caller: PINCaller?
    let tokenId: String
    private let rules: PINRules?
    /// Whether `didSpendTry` recorded an outcome (an atomic, not a lock: there is one attempt per request).
    private let recorded = Atomic<Bool>(false)

    init(pin: String, allowFinalTry: Bool, caller: PINCaller?, tokenId: String, rules: PINRules?) {
        self.pin = pin; self.allowFinalTry = allowFinalTry; self.caller = caller; self.tokenId = tokenId;
        self.rules = rules
    }

    /// A PIN attempt under no rules but the final-try guard (tests, the benchmark, unattended PIN files).
    public static func unattended(_ pin: String, allowFinalTry: Bool = false) -> PINAttempt {
        PINAttempt(pin: pin, allowFinalTry: allowFinalTry, caller: nil, tokenId: "", rules: nil)
    }

    /// Throws PIN_FINAL_TRY_PROTECTED when `retriesLeft` is 1 and the final try is not allowed, and PIN_BACKOFF
    /// when the caller's uid must wait (another request from it failed meanwhile).
    /// `retriesLeft`: what the token reports now; nil when it does not tell.
    public func willSpendTry(retriesLeft: Int?) throws(TesseraError) {
        if retriesLeft == 1 && !allowFinalTry {
            throw TesseraError(
                .pinFinalTryProtected,
                "token \(tokenId) has one PIN try left: the PIN is not tried unless the request says allowFinalPinTry: true",
                details: ["retriesLeft": 1])
        }
        try rules?.checkBackoff(caller)
    }

    /// Records the outcome of the try: nil = the PIN was correct, else the token's error (PIN_INVALID, PIN_LOCKED, ...).
    public func didSpendTry(_ error: TesseraError?) {
        guard error == nil || error?.code == .pinInvalid || error?.code == .pinLocked else { return }
        guard !recorded.exchange(true, ordering: .acquiringAndReleasing) else { return }
        rules?.record(caller, tokenId: tokenId, error: error)
    }

    /// Whether `didSpendTry` already recorded an outcome.
    var recordedOutcome: Bool { recorded.load(ordering: .acquiring) }
}

/// The PIN rules every key-store path applies to a caller's PIN: per-uid back-off after a wrong PIN, the token's
/// final try kept unless the request allows it, and every wrong PIN logged with the caller's uid and pid.
/// Front doors (socket methods, SSH agent, CTAP) call `withCallerPIN` and pass the `PINAttempt` to the token.
public final class PINRules: Sendable {
    private let table: Locked<PINBackoffTable>
    private let logger: Logger

    public init(backoff: PINBackoffPolicy = .standard, logger: Logger) {
        self.table = Locked(PINBackoffTable(policy: backoff))
        self.logger = logger
    }

    public var backoff: PINBackoffPolicy { table.withLock { $0.policy } }

    /// Runs `operation` with `pin` from `caller` under the PIN rules: PIN_BACKOFF before anything reaches the token
    /// when the caller's uid must wait; the token refuses to spend its final try with PIN_FINAL_TRY_PROTECTED unless
    /// `allowFinalTry`; a wrong PIN (PIN_INVALID, PIN_LOCKED) is logged and starts or extends the uid's back-off;
    /// a success clears it. PIN_EMPTY for an empty PIN, INVALID_INPUT for one over 64 bytes.
    nonisolated(nonsending) public func withCallerPIN<T>(
        _ pin: String, caller: PINCaller?, allowFinalTry: Bool, tokenId: String,
        _ operation: nonisolated(nonsending) (PINAttempt) async throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        try Self.validate(pin)
        try checkBackoff(caller)
        let attempt = PINAttempt(pin: pin, allowFinalTry: allowFinalTry, caller: caller, tokenId: tokenId, rules: self)
        do throws(TesseraError) {
            let result = try await operation(attempt)
            if !attempt.recordedOutcome { attempt.didSpendTry(nil) }
            return result
        } catch {
            if !attempt.recordedOutcome, error.code == .pinInvalid || error.code == .pinLocked {
                attempt.didSpendTry(error)
            }
            throw error
        }
    }

    /// PIN_EMPTY for an empty PIN (a PIN that was given is never taken as none), INVALID_INPUT over 64 bytes.
    public static func validate(_ pin: String) throws(TesseraError) {
        if pin.isEmpty {
            throw TesseraError(.pinEmpty, "the PIN is empty: give the token's PIN, or leave the PIN out altogether")
        }
        guard pin.utf8.count <= 64 else { throw .invalidInput("pin must be 1 to 64 bytes") }
    }

    /// PIN_BACKOFF (retryable, `retryAfterSeconds`) when `caller`'s uid must still wait after a wrong PIN.
    public func checkBackoff(_ caller: PINCaller?) throws(TesseraError) {
        let uid = caller?.uid ?? Self.unattributed
        let now = ContinuousClock.now
        try table.withLock { t throws(TesseraError) in try t.check(uid: uid, now: now) }
    }

    func record(_ caller: PINCaller?, tokenId: String, error: TesseraError?) {
        let uid = caller?.uid ?? Self.unattributed
        guard let error else {
            table.withLock { $0.recordSuccess(uid: uid) }
            return
        }
        let now = ContinuousClock.now
        let wait = table.withLock { $0.recordFailure(uid: uid, now: now) }
        var metadata: Logger.Metadata = [
            "token": "\(tokenId)", "result": "\(error.code.rawValue)",
            "backoff": "\(wait)",
        ]
        if let caller {
            metadata["uid"] = "\(caller.uid)"
            metadata["pid"] = "\(caller.pid)"
        } else {
            metadata["uid"] = "unknown"
        }
        if let n = error.details["retriesLeft"]?.intValue { metadata["retriesLeft"] = "\(n)" }
        logger.warning("wrong PIN", metadata: metadata)
    }

    /// The back-off bucket of PINs that come with no caller identity.
    static let unattributed = UInt32.max
}
