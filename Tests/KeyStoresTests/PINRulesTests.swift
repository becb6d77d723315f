import Logging
import TesseraCore
import Testing

@testable import KeyStores

@Suite("PIN back-off policy")
struct PINBackoffPolicyTests {
    @Test func doublesFromTheInitialWaitUpToTheMaximum() {
        let p = PINBackoffPolicy(initial: .seconds(2), maximum: .seconds(60))
        #expect(p.delay(afterFailures: 1) == .seconds(2))
        #expect(p.delay(afterFailures: 2) == .seconds(4))
        #expect(p.delay(afterFailures: 3) == .seconds(8))
        #expect(p.delay(afterFailures: 5) == .seconds(32))
        #expect(p.delay(afterFailures: 6) == .seconds(60))
        #expect(p.delay(afterFailures: 1000) == .seconds(60))
    }

    @Test func zeroInitialTurnsItOff() {
        let p = PINBackoffPolicy(initial: .zero, maximum: .seconds(60))
        #expect(p.delay(afterFailures: 3) == .zero)
        var t = PINBackoffTable(policy: p)
        let now = ContinuousClock.now
        t.recordFailure(uid: 7, now: now)
        #expect(throws: Never.self) { try t.check(uid: 7, now: now) }
    }

    @Test func aWrongPINHoldsBackOnlyThatUidUntilItsWaitIsOver() throws {
        var t = PINBackoffTable(policy: .standard)
        let t0 = ContinuousClock.now
        #expect(throws: Never.self) { try t.check(uid: 1000, now: t0) }
        #expect(t.recordFailure(uid: 1000, now: t0) == .seconds(2))
        let e = try #require(throws: TesseraError.self) { try t.check(uid: 1000, now: t0 + .milliseconds(500)) }
        #expect(e.code == .pinBackoff && e.retryable)
        #expect(e.details["retryAfterSeconds"] == 2)
        // Another uid is not held back.
        #expect(throws: Never.self) { try t.check(uid: 1001, now: t0 + .milliseconds(500)) }
        #expect(throws: Never.self) { try t.check(uid: 1000, now: t0 + .seconds(2)) }
        // A second wrong PIN in a row doubles the wait; a correct one clears it.
        #expect(t.recordFailure(uid: 1000, now: t0 + .seconds(3)) == .seconds(4))
        #expect(throws: TesseraError.self) { try t.check(uid: 1000, now: t0 + .seconds(6)) }
        t.recordSuccess(uid: 1000)
        #expect(throws: Never.self) { try t.check(uid: 1000, now: t0 + .seconds(6)) }
        #expect(t.recordFailure(uid: 1000, now: t0 + .seconds(7)) == .seconds(2))
    }

    @Test func anOldFailureStartsOver() {
        var t = PINBackoffTable(policy: PINBackoffPolicy(initial: .seconds(2), maximum: .seconds(10)))
        let t0 = ContinuousClock.now
        t.recordFailure(uid: 5, now: t0)
        t.recordFailure(uid: 5, now: t0 + .seconds(3))
        // Last wait ended at t0+7 s; more than the maximum (10 s) later the count starts from one again.
        #expect(t.recordFailure(uid: 5, now: t0 + .seconds(30)) == .seconds(2))
    }
}

@Suite("PIN rules")
struct PINRulesTests {
    let rules = PINRules(logger: Logger(label: "test"))
    let caller = PINCaller(uid: 4242, pid: 99)

    @Test func finalTryIsRefusedUnlessAllowed() async throws {
        var tried = false
        let e = await #expect(throws: TesseraError.self) {
            try await rules.withCallerPIN("123456", caller: caller, allowFinalTry: false, tokenId: "t") {
                (a: PINAttempt) async throws(TesseraError) in
                try a.willSpendTry(retriesLeft: 1)
                tried = true
            }
        }
        #expect(e?.code == .pinFinalTryProtected && e?.details["retriesLeft"] == 1)
        #expect(!tried)
        // Not a wrong PIN: no back-off.
        try await rules.withCallerPIN("123456", caller: caller, allowFinalTry: true, tokenId: "t") {
            (a: PINAttempt) async throws(TesseraError) in try a.willSpendTry(retriesLeft: 1)
        }
    }

    @Test func aWrongPINBacksOffTheNextAttemptBeforeTheOperationRuns() async throws {
        await #expect(throws: TesseraError.self) {
            try await rules.withCallerPIN("000000", caller: caller, allowFinalTry: false, tokenId: "t") {
                (a: PINAttempt) async throws(TesseraError) in
                try a.willSpendTry(retriesLeft: 3)
                let wrong = TesseraError(.pinInvalid, "wrong PIN", details: ["retriesLeft": 2])
                a.didSpendTry(wrong)
                throw wrong
            }
        }
        var ran = false
        let e = await #expect(throws: TesseraError.self) {
            try await rules.withCallerPIN("123456", caller: caller, allowFinalTry: false, tokenId: "t") {
                (_: PINAttempt) async throws(TesseraError) in ran = true
            }
        }
        #expect(e?.code == .pinBackoff)
        #expect(!ran)
        // Another uid goes through.
        try await rules.withCallerPIN(
            "123456", caller: PINCaller(uid: 4243, pid: 100), allowFinalTry: false, tokenId: "t"
        ) {
            (_: PINAttempt) async throws(TesseraError) in
        }
    }

    /// An empty PIN is PIN_EMPTY (a given PIN is never taken as none), one over 64 bytes INVALID_INPUT; neither reaches
    /// the operation.
    @Test func pinLengthIsCheckedFirst() async {
        for (pin, code) in [("", TesseraError.Code.pinEmpty), (String(repeating: "1", count: 65), .invalidInput)] {
            let e = await #expect(throws: TesseraError.self) {
                try await rules.withCallerPIN(pin, caller: caller, allowFinalTry: false, tokenId: "t") {
                    (_: PINAttempt) async throws(TesseraError) in
                    Issue.record("the operation ran with a refused PIN")
                }
            }
            #expect(e?.code == code)
        }
    }
}
