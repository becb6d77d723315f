import APDU
import FoundationEssentials
import PCSC
import TesseraCore
import TesseraTestSupport
import Testing
import VPCD

extension Task where Failure == Never, Success: Sendable {
    /// Whether the task has finished, without waiting for it.
    func isDone() async -> Bool {
        let flag = Locked(false)
        let watcher = Task<Void, Never> {
            _ = await self.value; flag.withLock { $0 = true }
        }
        try? await Task<Never, Never>.sleep(for: .milliseconds(20))
        watcher.cancel()
        return flag.current
    }
}

/// The reader's state once it matches `predicate`.
func readerState(
    _ ctx: PCSCContext, _ name: String, timeout: Duration = .seconds(10),
    where predicate: @escaping (PCSCReaderState) -> Bool
) async -> PCSCReaderState? {
    await eventually(timeout) {
        guard let readers = try? await ctx.listReaders() else { return nil }
        return readers.first { $0.name == name && predicate($0) }
    }
}

/// Records the events of a `PCSCContext.events()` stream.
actor EventRecorder {
    private(set) var events: [PCSCEvent] = []
    private var task: Task<Void, Never>?

    func start(_ ctx: PCSCContext) {
        let stream = ctx.events(retryInterval: .milliseconds(200))
        task = Task { for await e in stream { self.append(e) } }
    }

    private func append(_ e: PCSCEvent) { events.append(e) }

    func stop() { task?.cancel() }

    func waitFor(_ timeout: Duration = .seconds(10), _ predicate: @escaping @Sendable (PCSCEvent) -> Bool) async
        -> PCSCEvent?
    {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while ContinuousClock.now < deadline {
            if let e = events.first(where: predicate) { return e }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return events.first(where: predicate)
    }
}

func expectError(
    _ code: TesseraError.Code, _ body: () async throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    do {
        try await body()
        Issue.record("expected \(code.rawValue), got success", sourceLocation: sourceLocation)
    } catch let error as TesseraError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected TesseraError \(code.rawValue), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Real pcscd + vpcd with in-test virtual cards. Each test starts its own private pcscd (serialised by the fixture).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct PCSCIntegrationTests {
    @Test func readersAppearWithoutCard() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let readers = try await PCSCContext().listReaders()
        #expect(readers.map(\.name) == daemon.readers.map(\.name))
        #expect(readers.allSatisfy { !$0.cardPresent && $0.atr.isEmpty })
    }

    @Test func cardInsertShowsInListAndEvents() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let recorder = EventRecorder()
        await recorder.start(ctx)
        let reader = daemon.readerName
        #expect(
            await recorder.waitFor {
                if case .readerAdded(let s) = $0 { s.name == reader && !s.cardPresent } else { false }
            } != nil)

        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.start()
        let state = await readerState(ctx, reader) { $0.cardPresent }
        #expect(state?.atr == testATR())

        let inserted = await recorder.waitFor { if case .cardInserted(let s) = $0 { s.name == reader } else { false } }
        guard case .cardInserted(let s) = inserted else {
            Issue.record("no cardInserted event: \(await recorder.events)")
            return
        }
        #expect(s.atr == testATR())

        await link.remove()
        #expect(await recorder.waitFor { $0 == .cardRemoved(reader: reader) } != nil)
        #expect(await readerState(ctx, reader) { !$0.cardPresent } != nil)
        await recorder.stop()
    }

    @Test func waitForChangeWakesOnInsertTimesOutAndCancels() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let known = try await ctx.listReaders()

        // Nothing happens: returns the same state after the timeout.
        let start = ContinuousClock.now
        let same = try await ctx.waitForChange(known: known, timeout: .milliseconds(300))
        #expect(same == known)
        #expect(ContinuousClock.now - start >= .milliseconds(250))

        // A card arrives while waiting.
        let waiter = Task { try await ctx.waitForChange(known: known, timeout: .seconds(20)) }
        try await Task.sleep(for: .milliseconds(200))
        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.insert()
        let changed = try await waiter.value
        let reader = changed.first { $0.name == daemon.readerName }
        #expect(reader?.cardPresent == true)
        #expect(reader?.atr == testATR())

        // Cancelling a long wait ends it promptly (SCardCancel), with CANCELLED.
        let current = try await ctx.listReaders()
        let cancelStart = ContinuousClock.now
        let long = Task { () async throws(TesseraError) -> [PCSCReaderState] in
            try await ctx.waitForChange(known: current, timeout: .seconds(60))
        }
        try await Task.sleep(for: .milliseconds(200))
        long.cancel()
        let outcome = await long.result
        #expect(ContinuousClock.now - cancelStart < .seconds(5))
        if case .failure(let error) = outcome {
            #expect((error as? TesseraError)?.code == .cancelled)
        } else {
            Issue.record("cancelled wait returned \(outcome)")
        }
        await link.remove()
    }

    @Test func transmitsAPDUsIncludingChainsAndLongResponses() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let card = EchoCard()
        let log = ExchangeLog()
        let link = VirtualCardLink(card: card, port: Int(daemon.port), onExchange: log.record)
        try await link.start()
        #expect(await readerState(ctx, daemon.readerName) { $0.cardPresent } != nil)

        let pcsc = try await ctx.connect(reader: daemon.readerName, shareMode: .shared, protocols: .any)
        #expect(pcsc.atr == testATR())
        #expect(pcsc.supportsExtendedLength)
        #expect(pcsc.activeProtocol == .t1 || pcsc.activeProtocol == .t0)

        // Raw transmit.
        let echo = try await pcsc.transmit([0x00, 0x01, 0x00, 0x00, 0x03, 0xAA, 0xBB, 0xCC, 0x00])
        #expect(echo == [0xAA, 0xBB, 0xCC, 0x90, 0x00])

        // 61xx chain through APDUTransport.send: 700 bytes arrive in 200-byte chunks.
        let chained = try await pcsc.send(CommandAPDU(ins: 0x03, p1: 0x02, p2: 0xBC, ne: 256))
        #expect(chained.sw == .success)
        #expect(chained.data == EchoCard.pattern(700))
        #expect(await card.commands.filter { $0[1] == 0xC0 }.count == 3)

        // A 300-byte response in one extended-length exchange.
        let big = try await pcsc.send(CommandAPDU(ins: 0x02, p1: 0x01, p2: 0x2C, ne: 65536))
        #expect(big.sw == .success)
        #expect(big.data == EchoCard.pattern(300))

        // An extended command data field (600 bytes) echoed back.
        let payload = EchoCard.pattern(600).reversed().map { $0 }
        let echoed = try await pcsc.send(CommandAPDU(ins: 0x01, p1: 0, p2: 0, data: payload, ne: 65536))
        #expect(echoed.data == payload)

        // The tracing hook saw every APDU.
        let traced = log.all
        #expect(traced.contains { $0.command.count > 600 && $0.response.count == 602 })
        #expect(traced.allSatisfy { $0.response.count >= 2 })
        await pcsc.disconnect()
        await link.remove()
    }

    @Test func transactionBlocksOthersUntilEnded() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.start()
        let ctxA = PCSCContext()
        let ctxB = PCSCContext()
        #expect(await readerState(ctxA, daemon.readerName) { $0.cardPresent } != nil)
        let a = try await ctxA.connect(reader: daemon.readerName)
        let b = try await ctxB.connect(reader: daemon.readerName)
        let select: [UInt8] = [0x00, 0xA4, 0x04, 0x00, 0x00]

        let other = Locked<Task<[UInt8]?, Never>?>(nil)
        let blockedDuring = try await a.transaction { (card: PCSCCard) async throws(TesseraError) -> Bool in
            _ = try await card.transmit(select)
            // B must not get through while A holds the transaction: it waits (or reports CARD_IN_USE).
            let attempt = Task { try? await b.transmit(select) }
            other.withLock { $0 = attempt }
            try? await Task.sleep(for: .milliseconds(700))
            let finished = await attempt.isDone()
            _ = try await card.transmit(select)
            return !finished
        }
        if let attempt = other.current {
            // B's attempt either waited for the transaction to end (then it succeeded) or was refused meanwhile.
            let result = await attempt.value
            #expect(result == nil || result == [0x90, 0x00])
        }
        #expect(blockedDuring)
        #expect(try await b.transmit(select) == [0x90, 0x00])

        // The transaction also ends when the body throws.
        await expectError(.cardError) {
            try await a.transaction { (_: PCSCCard) async throws(TesseraError) -> Void in
                throw TesseraError(.cardError, "boom")
            }
        }
        #expect(try await b.transmit(select) == [0x90, 0x00])
        await a.disconnect()
        await b.disconnect()
        await link.remove()
    }

    @Test func cardRemovedMidSessionThenReinsertAndReconnect() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.start()
        #expect(await readerState(ctx, daemon.readerName) { $0.cardPresent } != nil)
        let card = try await ctx.connect(reader: daemon.readerName)
        let select: [UInt8] = [0x00, 0xA4, 0x04, 0x00, 0x00]
        #expect(try await card.transmit(select) == [0x90, 0x00])

        await link.remove()
        // Immediately (before pcscd noticed) and after: CARD_REMOVED, never an empty success.
        await expectError(.cardRemoved) { _ = try await card.transmit(select) }
        #expect(await readerState(ctx, daemon.readerName) { !$0.cardPresent } != nil)
        await expectError(.cardRemoved) { _ = try await card.transmit(select) }
        await expectError(.noCard) { try await card.reconnect() }
        await expectError(.noCard) { _ = try await ctx.connect(reader: daemon.readerName) }

        try await link.insert()
        #expect(await readerState(ctx, daemon.readerName) { $0.cardPresent } != nil)
        try await card.reconnect()
        #expect(card.atr == testATR())
        #expect(try await card.transmit(select) == [0x90, 0x00])
        await card.disconnect()
        await expectError(.cardRemoved) { _ = try await card.transmit(select) }
        await expectError(.noReader) { _ = try await ctx.connect(reader: "No Such Reader 00 00") }
        await link.remove()
    }

    @Test func cardPulledMidCommandIsCardRemovedNotEmptySuccess() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.start()
        #expect(await readerState(ctx, daemon.readerName) { $0.cardPresent } != nil)
        let card = try await ctx.connect(reader: daemon.readerName)
        let stalled = Task { () async throws -> [UInt8] in try await card.transmit([0x00, 0x0F, 0x00, 0x00]) }
        try await Task.sleep(for: .milliseconds(300))
        await link.remove()
        await expectError(.cardRemoved) { _ = try await stalled.value }
        await card.disconnect()
    }

    @Test func pcscdStopAndRestartRecoversWithoutNewContext() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let ctx = PCSCContext()
        let recorder = EventRecorder()
        await recorder.start(ctx)
        let link = VirtualCardLink(
            card: EchoCard(), port: Int(daemon.port), reconnects: true,
            reconnectInterval: .milliseconds(100))
        try await link.start()
        // A second card in slot 1, without automatic reconnection.
        let plain = VirtualCardLink(card: EchoCard(), port: Int(daemon.readers[1].port))
        try await plain.start()
        #expect(await readerState(ctx, daemon.readerName) { $0.cardPresent } != nil)
        let card = try await ctx.connect(reader: daemon.readerName)
        let select: [UInt8] = [0x00, 0xA4, 0x04, 0x00, 0x00]
        #expect(try await card.transmit(select) == [0x90, 0x00])

        await daemon.stopDaemon()
        #expect(await eventually { await plain.isConnected ? nil : true } == true)
        await expectError(.pcscUnavailable) { _ = try await ctx.listReaders() }
        await expectError(.pcscUnavailable) { _ = try await ctx.listReaders() }
        await expectError(.pcscUnavailable) { _ = try await ctx.connect(reader: daemon.readerName) }
        #expect(await recorder.waitFor { $0 == .serviceUnavailable } != nil)
        do {
            _ = try await card.transmit(select)
            Issue.record("transmit succeeded with pcscd stopped")
        } catch {
            #expect([.pcscUnavailable, .cardRemoved].contains(error.code), "\(error)")
        }

        try await daemon.startDaemon()
        try await plain.insert()
        #expect(await readerState(ctx, daemon.readers[1].name) { $0.cardPresent } != nil)
        // Same PCSCContext, no re-creation; the link reconnected by itself.
        let back = await readerState(ctx, daemon.readerName) { $0.cardPresent }
        #expect(back?.atr == testATR())
        #expect(await link.isConnected)
        #expect(await recorder.waitFor { $0 == .serviceAvailable } != nil)
        #expect(await recorder.waitFor { if case .cardInserted = $0 { true } else { false } } != nil)
        try await card.reconnect()
        #expect(try await card.transmit(select) == [0x90, 0x00])
        await card.disconnect()
        await recorder.stop()
        await link.remove()
        await plain.remove()
    }

    @Test func otherPCSCClientsSeeTheVirtualCard() async throws {
        let daemon = try await PCSCDaemonFixture.acquire()
        defer { daemon.stop() }
        let link = VirtualCardLink(card: EchoCard(), port: Int(daemon.port))
        try await link.start()
        #expect(await readerState(PCSCContext(), daemon.readerName) { $0.cardPresent } != nil)

        let list = try await daemon.runClient("/usr/bin/opensc-tool", ["--list-readers"])
        #expect(list.status == 0, "\(list.output)")
        let line = list.output.split(separator: "\n").first { $0.contains(daemon.readerName) }
        #expect(line?.contains("Yes") == true, "\(list.output)")

        let atr = try await daemon.runClient("/usr/bin/opensc-tool", ["--reader", "0", "--atr"])
        #expect(atr.status == 0, "\(atr.output)")
        let expected = testATR().map { Hex.encode([$0]) }.joined(separator: ":")
        #expect(atr.output.lowercased().contains(expected), "\(atr.output)")

        let apdu = try await daemon.runClient(
            "/usr/bin/opensc-tool", ["--reader", "0", "--send-apdu", "00:01:00:00:02:12:34:00"])
        #expect(apdu.output.contains("12 34"), "\(apdu.output)")
        await link.remove()
    }

    @Test func linkFailsWithNoReaderWhenNothingListens() async throws {
        let link = VirtualCardLink(card: EchoCard(), port: 1)
        await expectError(.noReader) { try await link.insert(timeout: .milliseconds(200)) }
        #expect(await link.isConnected == false)
    }
}

/// Pure logic, no pcscd.
@Suite struct PCSCUnitTests {
    @Test func atrCapabilities() throws {
        let info = try #require(ATRInfo(testATR()))
        #expect(info.protocols == [0, 1])
        #expect(info.historicalBytes == [0x80, 0x73, 0x00, 0x00, 0xC0])
        #expect(info.extendedLength)
        #expect(info.commandChaining)
        #expect(ATRInfo(testATR(extendedLength: false))?.extendedLength == false)
        // ISO 7816-3 example-style ATR without TD bytes: T=0 implied, historical "JCOP"-like bytes, no tag 7.
        let plain = try #require(ATRInfo([0x3B, 0x02, 0x14, 0x50]))
        #expect(plain.protocols == [0])
        #expect(plain.historicalBytes == [0x14, 0x50])
        #expect(!plain.extendedLength)
        #expect(ATRInfo([0x3B, 0x8F, 0x80]) == nil)
    }

    @Test func eventDiff() {
        let r1 = PCSCReaderState(name: "A")
        let r1card = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x00], eventCount: 1)
        let r1again = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x00], eventCount: 3)
        #expect(PCSCEvent.changes(from: [], to: [r1]) == [.readerAdded(r1)])
        #expect(PCSCEvent.changes(from: [r1], to: [r1card]) == [.cardInserted(r1card)])
        #expect(PCSCEvent.changes(from: [r1card], to: [r1card]) == [])
        #expect(
            PCSCEvent.changes(from: [r1card], to: [r1again]) == [.cardRemoved(reader: "A"), .cardInserted(r1again)])
        #expect(PCSCEvent.changes(from: [r1card], to: []) == [.cardRemoved(reader: "A"), .readerRemoved(name: "A")])
        #expect(!PCSCEvent.unsettled(from: [r1card], to: [r1again]))
        #expect(!PCSCEvent.unsettled(from: [r1], to: [r1card]))
        // The counter wraps at 16 bits.
        var wrapped = r1again
        wrapped.eventCount = 1
        var beforeWrap = r1card
        beforeWrap.eventCount = 0xFFFF
        #expect(
            PCSCEvent.changes(from: [beforeWrap], to: [wrapped]) == [.cardRemoved(reader: "A"), .cardInserted(wrapped)])
    }

    /// pcscd writes a card's state before it counts the event: a look can show an inserted card with the old
    /// count. A difference of one between two looks of a present card is not a swap, and asks for another look.
    @Test func tornLooksAreNotSwaps() {
        let earlyLook = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x00], eventCount: 0)
        let settled = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x00], eventCount: 1)
        #expect(PCSCEvent.unsettled(from: [earlyLook], to: [settled]))
        #expect(PCSCEvent.changes(from: [earlyLook], to: [settled]) == [])
        // A swap whose insertion is not counted yet settles at two on the next look.
        let swapped = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x00], eventCount: 2)
        #expect(!PCSCEvent.unsettled(from: [earlyLook], to: [swapped]))
        #expect(
            PCSCEvent.changes(from: [earlyLook], to: [swapped]) == [.cardRemoved(reader: "A"), .cardInserted(swapped)])
        // A new ATR with the same count is the same card (reset, or powered up on demand), not a swap.
        let powered = PCSCReaderState(name: "A", cardPresent: true, atr: [0x3B, 0x02, 0x14, 0x50], eventCount: 1)
        var unpowered = powered
        unpowered.atr = []
        #expect(PCSCEvent.changes(from: [unpowered], to: [powered]) == [])
        #expect(PCSCEvent.changes(from: [settled], to: [powered]) == [])
    }
}
