import Testing

@testable import CTAPHID

/// CTAPHID framing and channel rules, CTAP 2.1 §11.2.
struct CTAPHIDTests {
    let t0 = ContinuousClock.now

    func device(_ ids: [UInt32] = [0x1122_3344, 0x5566_7788]) -> CTAPHIDDevice {
        let counter = Counter(ids)
        return CTAPHIDDevice { counter.next() }
    }

    final class Counter: @unchecked Sendable {
        var ids: [UInt32]
        init(_ ids: [UInt32]) { self.ids = ids }
        func next() -> UInt32 { ids.removeFirst() }
    }

    func initPacket(_ channel: UInt32, _ command: UInt8, length: Int, _ data: [UInt8]) -> [UInt8] {
        CTAPHID.padded(
            CTAPHID.channelBytes(channel) + [0x80 | command, UInt8(length >> 8), UInt8(length & 0xFF)] + data)
    }

    func open(_ d: inout CTAPHIDDevice, owner: UInt64 = 1) -> UInt32 {
        let nonce: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let actions = d.receive(initPacket(CTAPHID.broadcastChannel, 0x06, length: 8, nonce), from: owner, now: t0)
        guard case .send(let o, let reports) = actions.first, o == owner, reports.count == 1 else {
            Issue.record("no INIT answer: \(actions)")
            return 0
        }
        let r = reports[0]
        #expect(Array(r[0..<4]) == [0xFF, 0xFF, 0xFF, 0xFF])
        #expect(r[4] == 0x86)
        #expect(Int(r[5]) << 8 | Int(r[6]) == 17)
        #expect(Array(r[7..<15]) == nonce)
        #expect(r[19] == 2)
        #expect(r[23] & 0x04 != 0, "CBOR capability")
        #expect(r[23] & 0x08 != 0, "NMSG: no CTAP1 MSG")
        return UInt32(r[15]) << 24 | UInt32(r[16]) << 16 | UInt32(r[17]) << 8 | UInt32(r[18])
    }

    func errorCode(_ actions: [CTAPHIDAction]) -> UInt8? {
        for case .send(_, let reports) in actions where reports.first?[4] == 0xBF { return reports[0][7] }
        return nil
    }

    @Test func packetsSplitAndPad() throws {
        let payload = (0..<200).map { UInt8($0 & 0xFF) }
        let reports = try CTAPHID.packets(channel: 0xAABB_CCDD, command: .cbor, payload: payload)
        // 57 + 59 + 59 + 25
        #expect(reports.count == 4)
        #expect(reports.allSatisfy { $0.count == 64 })
        #expect(reports[0][4] == 0x90 && reports[0][5] == 0 && reports[0][6] == 200)
        #expect(reports[1][4] == 0 && reports[2][4] == 1 && reports[3][4] == 2)
        let joined = Array(reports[0][7...]) + reports[1...].flatMap { $0[5...] }
        #expect(Array(joined.prefix(200)) == payload)
        #expect(CTAPHID.maxMessageSize == 7609)
    }

    @Test func initAllocatesChannelAndPingEchoes() throws {
        var d = device()
        let cid = open(&d)
        #expect(cid == 0x1122_3344)
        let payload = (0..<100).map { UInt8($0) }
        let reports = try CTAPHID.packets(channel: cid, command: .ping, payload: payload)
        #expect(d.receive(reports[0], from: 1, now: t0).isEmpty)
        let actions = d.receive(reports[1], from: 1, now: t0)
        #expect(actions == [.send(owner: 1, reports: reports)])
    }

    @Test func cborIsDispatchedAndFinishedOnce() throws {
        var d = device()
        let cid = open(&d)
        let actions = d.receive(initPacket(cid, 0x10, length: 1, [0x04]), from: 1, now: t0)
        #expect(actions == [.dispatch(owner: 1, channel: cid, payload: [0x04])])
        #expect(d.processing?.channel == cid)
        #expect(
            d.keepalive(.userPresenceNeeded)
                == .send(owner: 1, reports: try CTAPHID.packets(channel: cid, command: .keepalive, payload: [2])))
        #expect(
            d.finish(channel: cid, response: [0]) == [
                .send(owner: 1, reports: try CTAPHID.packets(channel: cid, command: .cbor, payload: [0]))
            ])
        #expect(d.finish(channel: cid, response: [0]).isEmpty)
        #expect(d.keepalive(.processing) == nil)
    }

    @Test func otherChannelIsBusyWhileProcessingAndCancelEndsIt() {
        var d = device()
        let a = open(&d, owner: 1)
        let b = open(&d, owner: 2)
        _ = d.receive(initPacket(a, 0x10, length: 1, [0x0B]), from: 1, now: t0)
        #expect(errorCode(d.receive(initPacket(b, 0x10, length: 1, [0x04]), from: 2, now: t0)) == 0x06)
        // CANCEL from another channel does nothing; from the owner's channel it cancels.
        #expect(d.receive(initPacket(b, 0x11, length: 0, []), from: 2, now: t0).isEmpty)
        #expect(d.receive(initPacket(a, 0x11, length: 0, []), from: 1, now: t0) == [.cancel(channel: a)])
    }

    @Test func otherChannelIsBusyWhileAssembling() {
        var d = device()
        let a = open(&d, owner: 1)
        let b = open(&d, owner: 2)
        _ = d.receive(initPacket(a, 0x10, length: 100, [0x04]), from: 1, now: t0)
        #expect(errorCode(d.receive(initPacket(b, 0x01, length: 1, [9]), from: 2, now: t0)) == 0x06)
        // A stray continuation packet of the other channel is ignored.
        #expect(d.receive(CTAPHID.padded(CTAPHID.channelBytes(b) + [0]), from: 2, now: t0).isEmpty)
    }

    @Test func wrongSequenceAborts() {
        var d = device()
        let a = open(&d)
        _ = d.receive(initPacket(a, 0x01, length: 100, []), from: 1, now: t0)
        #expect(errorCode(d.receive(CTAPHID.padded(CTAPHID.channelBytes(a) + [1]), from: 1, now: t0)) == 0x04)
        // The transaction is gone: the channel accepts a new message.
        #expect(d.receive(initPacket(a, 0x01, length: 1, [7]), from: 1, now: t0).count == 1)
    }

    @Test func timeoutOfContinuation() {
        var d = device()
        let a = open(&d)
        _ = d.receive(initPacket(a, 0x01, length: 100, []), from: 1, now: t0)
        #expect(d.expire(now: t0 + .milliseconds(499)).isEmpty)
        #expect(errorCode(d.expire(now: t0 + .milliseconds(500))) == 0x05)
        #expect(d.nextDeadline == nil)
    }

    @Test func badLengthsAndChannels() {
        var d = device()
        // INIT must carry an 8-byte nonce.
        #expect(
            errorCode(d.receive(initPacket(CTAPHID.broadcastChannel, 0x06, length: 7, [1]), from: 1, now: t0)) == 0x03)
        // Only INIT on the broadcast channel; channel 0 and unallocated channels are invalid.
        #expect(
            errorCode(d.receive(initPacket(CTAPHID.broadcastChannel, 0x01, length: 0, []), from: 1, now: t0)) == 0x0B)
        #expect(errorCode(d.receive(initPacket(0, 0x01, length: 0, []), from: 1, now: t0)) == 0x0B)
        #expect(errorCode(d.receive(initPacket(0x0102_0304, 0x01, length: 0, []), from: 1, now: t0)) == 0x0B)
        let a = open(&d, owner: 1)
        // Another client may not use this client's channel.
        #expect(errorCode(d.receive(initPacket(a, 0x01, length: 0, []), from: 2, now: t0)) == 0x0B)
        #expect(
            errorCode(d.receive(initPacket(a, 0x01, length: CTAPHID.maxMessageSize + 1, []), from: 1, now: t0)) == 0x03)
        #expect(errorCode(d.receive(initPacket(a, 0x10, length: 0, []), from: 1, now: t0)) == 0x03)
        #expect(errorCode(d.receive(initPacket(a, 0x03, length: 1, [0]), from: 1, now: t0)) == 0x01)
        #expect(errorCode(d.receive(initPacket(a, 0x55, length: 0, []), from: 1, now: t0)) == 0x01)
        // Reports that are not 64 bytes are dropped.
        #expect(d.receive([0xFF, 0xFF], from: 1, now: t0).isEmpty)
    }

    @Test func reinitOfBusyChannelCancels() {
        var d = device()
        let a = open(&d)
        _ = d.receive(initPacket(a, 0x10, length: 1, [0x0B]), from: 1, now: t0)
        let actions = d.receive(initPacket(a, 0x06, length: 8, [9, 9, 9, 9, 9, 9, 9, 9]), from: 1, now: t0)
        #expect(actions.first == .cancel(channel: a))
        guard case .send(_, let reports) = actions.last else { Issue.record("no INIT answer"); return }
        #expect(Array(reports[0][15..<19]) == CTAPHID.channelBytes(a))
        #expect(d.processing == nil)
    }

    @Test func disconnectForgetsChannelsAndCancels() {
        var d = device()
        let a = open(&d)
        _ = d.receive(initPacket(a, 0x10, length: 1, [0x0B]), from: 1, now: t0)
        #expect(d.disconnected(1) == [.cancel(channel: a)])
        #expect(errorCode(d.receive(initPacket(a, 0x01, length: 0, []), from: 1, now: t0)) == 0x0B)
    }

    /// A message over the maximum size is an error, not a trap (it trapped in a precondition before).
    @Test func oversizedMessageIsAnError() throws {
        let fits = try CTAPHID.packets(
            channel: 1, command: .cbor, payload: [UInt8](repeating: 7, count: CTAPHID.maxMessageSize))
        #expect(fits.count == 129)
        for size in [CTAPHID.maxMessageSize + 1, 65_536, 70_000] {
            #expect(throws: CTAPHID.MessageTooLarge(size: size)) {
                try CTAPHID.packets(channel: 1, command: .cbor, payload: [UInt8](repeating: 0, count: size))
            }
        }
    }

    /// An authenticator answer CTAPHID cannot carry reaches its client as CTAP1_ERR_OTHER.
    @Test func oversizedAnswerBecomesErrOther() throws {
        var d = device()
        let cid = open(&d)
        _ = d.receive(initPacket(cid, 0x10, length: 1, [0x04]), from: 1, now: t0)
        let actions = d.finish(channel: cid, response: [0] + [UInt8](repeating: 1, count: CTAPHID.maxMessageSize))
        #expect(
            actions == [.send(owner: 1, reports: try CTAPHID.packets(channel: cid, command: .cbor, payload: [0x7F]))])
        #expect(d.processing == nil)
    }

    func pings(_ d: inout CTAPHIDDevice, _ channel: UInt32, owner: UInt64) -> Bool {
        let ping = initPacket(channel, 0x01, length: 1, [0x2A])
        return d.receive(ping, from: owner, now: t0) == [
            .send(
                owner: owner, reports: (try? CTAPHID.packets(channel: channel, command: .ping, payload: [0x2A])) ?? [])
        ]
    }

    @Test func anINITFloodOfOneUidNeverEvictsAnotherUidsChannels() {
        var d = device((1...5000).map { UInt32($0) })
        d.join(owner: 1, group: 1000)
        d.join(owner: 2, group: 1000)
        d.join(owner: 3, group: 2000)
        let theirs = (0..<3).map { _ in open(&d, owner: 3) }
        let earlier = open(&d, owner: 2)
        // Owners 1 and 2 are one uid: the flood costs that uid its own oldest channels only.
        var flood: [UInt32] = []
        for _ in 0..<4000 { flood.append(open(&d, owner: 1)) }
        for channel in theirs { #expect(pings(&d, channel, owner: 3)) }
        #expect(!pings(&d, earlier, owner: 2))
        #expect(!pings(&d, flood[0], owner: 1))
        #expect(flood.suffix(d.maxChannelsPerGroup).allSatisfy { pings(&d, $0, owner: 1) })
        #expect(!pings(&d, flood[flood.count - d.maxChannelsPerGroup - 1], owner: 1))
    }

    @Test func pastTheTotalTheGroupHoldingTheMostLosesItsOldest() {
        var d = device((1...100).map { UInt32($0) })
        d.maxChannels = 6
        d.maxChannelsPerGroup = 4
        for owner: UInt64 in 1...3 { d.join(owner: owner, group: owner * 10) }
        let a = (0..<4).map { _ in open(&d, owner: 1) }
        let b = (0..<2).map { _ in open(&d, owner: 2) }
        let c = open(&d, owner: 3)
        #expect(!pings(&d, a[0], owner: 1))
        for channel in a.dropFirst() { #expect(pings(&d, channel, owner: 1)) }
        for channel in b { #expect(pings(&d, channel, owner: 2)) }
        #expect(pings(&d, c, owner: 3))
        // A client that went away gives its channels back to the count.
        _ = d.disconnected(1)
        let more = (0..<2).map { _ in open(&d, owner: 2) }
        for channel in b + more { #expect(pings(&d, channel, owner: 2)) }
    }
}
