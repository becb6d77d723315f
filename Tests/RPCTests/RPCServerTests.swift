import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import Synchronization
import TesseraCore
import TesseraTestSupport
import Testing

@_spi(Testing) @testable import RPC

#if canImport(Glibc)
    import Glibc
#endif

/// Holds `gate` requests until `n` of them are in flight at once (or gives up after 30 s, which fails the test).
actor Gate {
    private var arrived = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func pass(expecting n: Int) async -> Bool {
        arrived += 1
        if arrived == 1 {
            Task {
                try? await Task.sleep(for: .seconds(30))
                self.giveUp()
            }
        }
        if arrived >= n {
            giveUp()
            return true
        }
        await withCheckedContinuation { waiting.append($0) }
        return arrived >= n
    }

    private func giveUp() {
        for continuation in waiting { continuation.resume() }
        waiting.removeAll()
    }
}

/// The connections the server said were closed, how many `untilClosed` requests learnt so while running, and how
/// many `hold` requests were cancelled.
final class Closings: Sendable {
    private let state = Locked<(closed: Set<UInt64>, running: Int, learnt: Int, cancelled: Int, releases: Int)>(
        ([], 0, 0, 0, 0))

    func closed(_ id: UInt64) { _ = state.withLock { $0.closed.insert(id) } }
    var running: Int { state.withLock { $0.running } }
    var learnt: Int { state.withLock { $0.learnt } }
    var cancelled: Int { state.withLock { $0.cancelled } }

    /// Waits (counted as running) until `ms` pass, `release()` is called or the request's task is cancelled;
    /// whether it was cancelled.
    func hold(ms: Int) async -> Bool {
        let releases = state.withLock { s in
            s.running += 1
            return s.releases
        }
        defer { state.withLock { $0.running -= 1 } }
        let end = ContinuousClock.now.advanced(by: .milliseconds(ms))
        while ContinuousClock.now < end, !Task.isCancelled, state.withLock({ $0.releases }) == releases {
            try? await Task.sleep(for: .milliseconds(10))
        }
        guard Task.isCancelled else { return false }
        state.withLock { $0.cancelled += 1 }
        return true
    }

    /// Ends the `hold` requests running now.
    func release() { state.withLock { $0.releases += 1 } }

    /// Waits (up to 30 s) for `id`'s close while counted as running.
    func wait(for id: UInt64) async -> Bool {
        state.withLock { $0.running += 1 }
        defer { state.withLock { $0.running -= 1 } }
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while ContinuousClock.now < deadline {
            if state.withLock({ $0.closed.contains(id) }) {
                state.withLock { $0.learnt += 1 }
                return true
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}

/// A dispatcher that echoes params, sleeps on request, notifies, fails on demand, holds `gate` requests until
/// enough are in flight, and holds `untilClosed` requests until their connection closes and `hold` requests for
/// `ms`, until `release` or until cancelled.
struct EchoDispatcher: RPCDispatcher {
    let gate = Gate()
    let closings = Closings()

    func connectionClosed(_ connection: RPCConnection) async { closings.closed(connection.id) }

    func handle(_ request: RPCRequest, from connection: RPCConnection) async throws(TesseraError) -> JSONValue {
        switch request.method {
        case "echo":
            return request.params ?? .null
        case "sleep":
            let ms = request.params?["ms"]?.intValue ?? 0
            try? await Task.sleep(for: .milliseconds(ms))
            return ["slept": .number(Double(ms))]
        case "gate":
            let n = request.params?["n"]?.intValue ?? 1
            return ["together": .bool(await gate.pass(expecting: n))]
        case "notify":
            await connection.notify("test.event", ["n": 1])
            return ["uid": .number(Double(connection.peer.uid))]
        case "notifyFromElsewhere":
            // Queued from another thread, and answered without a suspension in between (so without a chance for the
            // event loop to run anything queued meanwhile): the answer must still go out after the notification.
            let queued = Locked(false)
            Task.detached {
                await connection.notify("test.elsewhere", [:])
                queued.withLock { $0 = true }
            }
            while !queued.withLock({ $0 }) { sched_yield() }
            return ["after": true]
        case "fail":
            throw TesseraError(.pinInvalid, "wrong PIN", details: ["retriesLeft": 2])
        case "untilClosed":
            return ["closed": .bool(await closings.wait(for: connection.id))]
        case "hold":
            return ["cancelled": .bool(await closings.hold(ms: request.params?["ms"]?.intValue ?? 0))]
        case "release":
            closings.release()
            return [:]
        case "closings":
            return [
                "running": .number(Double(closings.running)), "learnt": .number(Double(closings.learnt)),
                "cancelled": .number(Double(closings.cancelled)),
            ]
        default:
            throw TesseraError(.methodNotFound, "unknown method '\(request.method)'")
        }
    }
}

func withServer(
    maxFrame: Int = 1 << 20, gate: ConnectionGate = ConnectionGate(), _ body: (String, RPCServer) async throws -> Void
) async throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let path = dir.appendingPathComponent("s.sock").path
    let server = RPCServer(
        dispatcher: EchoDispatcher(), logger: Logger(label: "test"), maxFrameBytes: maxFrame, gate: gate)
    let (ready, readyCont) = AsyncStream.makeStream(of: Void.self)
    let task = Task { try await server.run(on: .path(path)) { readyCont.yield() } }
    for await _ in ready { break }
    defer { server.shutdown(); task.cancel() }
    try await body(path, server)
    server.shutdown()
    _ = await task.result
}

@Suite struct RPCServerTests {
    /// A user reads why the daemon cannot be reached and what to do, not the socket call that failed.
    @Test func anUnreachableDaemonIsExplainedInWords() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let missing = dir.appendingPathComponent("none.sock").path
        let error = await #expect(throws: TesseraError.self) { _ = try await RPCClient.connect(path: missing) }
        #expect(error?.code == .daemonUnavailable)
        #expect(
            error?.message.hasPrefix("cannot reach tesserad at \(missing): no such socket — is tesserad running?")
                == true)
        #expect(error?.message.contains("descriptor") == false)
    }

    @Test func echoRoundTripAndPeerCredentials() async throws {
        try await withServer { path, _ in
            let c = try await RPCClient.connect(path: path)
            let r = try await c.call("echo", ["a": [1, "x", true, nil]])
            #expect(r == ["a": [1, "x", true, nil]])
            let n = try await c.call("notify")
            #expect(n["uid"]?.intValue == Int(getuid()))
            var it = c.notifications.makeAsyncIterator()
            let event = await it.next()
            #expect(event == RPCNotification(method: "test.event", params: ["n": 1]))
        }
    }

    @Test func aNotificationQueuedBeforeTheAnswerIsWrittenBeforeIt() async throws {
        try await withServer { path, _ in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            try await channel.executeThenClose { inbound, outbound in
                let request = #"{"jsonrpc": "2.0", "id": 1, "method": "notifyFromElsewhere"}"#
                try await outbound.write(ByteBuffer(string: request + "\n"))
                var text = ""
                for try await chunk in inbound {
                    text += String(buffer: chunk)
                    if text.filter({ $0 == "\n" }).count >= 2 { break }
                }
                let lines = text.split(separator: "\n")
                #expect(lines.count == 2)
                #expect(lines.first?.contains("test.elsewhere") == true)
                #expect(lines.last?.contains(#""after":true"#) == true)
            }
        }
    }

    @Test func errorsCarryStableCodeRetryableAndDetails() async throws {
        try await withServer { path, _ in
            let c = try await RPCClient.connect(path: path)
            await #expect(throws: TesseraError(.pinInvalid, "wrong PIN", retryable: false, details: ["retriesLeft": 2]))
            {
                _ = try await c.call("fail")
            }
            do { _ = try await c.call("nope"); Issue.record("expected an error") } catch let error as TesseraError {
                #expect(error.code == .methodNotFound)
            }
        }
    }

    @Test func concurrentRequestsOnOneConnectionAreAnsweredById() async throws {
        try await withServer { path, _ in
            let c = try await RPCClient.connect(path: path)
            // Each `gate` request is held until all eight are in the dispatcher at once: a server that handled one
            // connection's requests one after another would answer `together: false` (after the gate gives up).
            try await withThrowingTaskGroup(of: Void.self) { g in
                for _ in 0..<8 {
                    g.addTask {
                        let r = try await c.call("gate", ["n": 8])
                        #expect(r["together"]?.boolValue == true)
                    }
                }
                for i in 0..<8 {
                    g.addTask {
                        let r = try await c.call("sleep", ["ms": .number(Double(i))])
                        #expect(r["slept"]?.intValue == i)
                    }
                }
                try await g.waitForAll()
            }
        }
    }

    @Test func aRequestInFlightLearnsThatItsPeerClosedTheConnection() async throws {
        try await withServer { path, _ in
            let other = try await RPCClient.connect(path: path)
            let deadline = ContinuousClock.now.advanced(by: .seconds(25))  // below the request's own 30 s
            func closings() async throws -> (running: Int, learnt: Int) {
                let r = try await other.call("closings")
                return (r["running"]?.intValue ?? -1, r["learnt"]?.intValue ?? -1)
            }
            let c = try await RPCClient.connect(path: path)
            try await c.sendRaw(Array(#"{"jsonrpc": "2.0", "id": 1, "method": "untilClosed"}"#.utf8) + [0x0A])
            while try await closings().running == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await closings().running == 1)
            // A clean close (nothing left unread, so no reset): the request is told while it still runs, not after
            // it ends by itself (30 s later).
            await c.close()
            while try await closings() != (0, 1), ContinuousClock.now < deadline {  // learnt, then ended
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await closings() == (0, 1))
        }
    }

    @Test func aRequestInFlightIsCancelledWhenItsPeerClosesAndAnsweredAfterAHalfClose() async throws {
        try await withServer { path, _ in
            let other = try await RPCClient.connect(path: path)
            // Only a failing wait runs to this deadline (CI machines can stall a test for seconds).
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            func closings(_ key: String) async throws -> Int { try await other.call("closings")[key]?.intValue ?? -1 }
            func waitRunning(_ n: Int) async throws {
                while try await closings("running") != n, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(10))
                }
                #expect(try await closings("running") == n)
            }
            // End of file with the peer still reading (a half-close): the request runs to its end and is answered.
            let h = try await RPCClient.connect(path: path)
            async let answer = h.call("hold", ["ms": 60000])
            try await waitRunning(1)
            await h.closeOutput()
            try await Task.sleep(for: .milliseconds(200))  // time for a wrong cancellation to arrive
            _ = try await other.call("release")
            #expect(try await answer["cancelled"] == false)
            // The caller went away (a clean close, not a reset): what it asked for is cancelled, not left to run.
            let c = try await RPCClient.connect(path: path)
            try await c.sendRaw(Array(#"{"jsonrpc": "2.0", "id": 1, "method": "hold", "params": {"ms": 30000}}"#.utf8))
            try await c.sendRaw([0x0A])
            try await waitRunning(1)
            await c.close()
            while try await closings("cancelled") == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await closings("cancelled") == 1)
        }
    }

    @Test func malformedJSONGetsParseErrorAndConnectionSurvives() async throws {
        try await withServer { path, _ in
            let c = try await RPCClient.connect(path: path)
            var it = c.notifications.makeAsyncIterator()
            try await c.sendRaw(Array("{not json}\n".utf8))
            let err = await it.next()
            #expect(err?.method == "rpc.error")
            #expect(err?.params["data"]?["code"]?.stringValue == "PARSE_ERROR")
            #expect(try await c.call("echo", [1]) == [1])
        }
    }

    @Test func oversizedFrameIsRejectedAndClosed() async throws {
        try await withServer(maxFrame: 1024) { path, _ in
            let c = try await RPCClient.connect(path: path)
            var it = c.notifications.makeAsyncIterator()
            try await c.sendRaw([UInt8](repeating: UInt8(ascii: "x"), count: 4096))
            let err = await it.next()
            #expect(err?.params["data"]?["code"]?.stringValue == "FRAME_TOO_LARGE")
            await c.waitClosed()
            // Other clients are unaffected.
            let d = try await RPCClient.connect(path: path)
            #expect(try await d.call("echo", ["ok": true]) == ["ok": true])
        }
    }

    /// A client floods requests without reading a single answer, then closes: the answers the server still holds
    /// (written, pending and BUSY) are dropped without one completion starting the next (a chain as deep as the
    /// flood overflowed the event loop's stack), and the server keeps serving.
    @Test(arguments: [1_000, 10_000, 50_000])
    func aFloodOfUnreadRequestsThenACloseLeavesTheServerServing(requests: Int) async throws {
        try await withServer { path, server in
            for _ in 0..<2 {
                try await floodAndClose(path: path, requests: requests)
                let other = try await RPCClient.connect(path: path)
                #expect(try await other.call("echo", ["alive": true]) == ["alive": true])
                // The flooding connection (and the previous round's) go away; only this one stays.
                let deadline = ContinuousClock.now.advanced(by: .seconds(30))
                while server.statistics().open != 1, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(server.statistics().open == 1)
                #expect(try await other.call("echo", ["alive": true]) == ["alive": true])
                await other.close()
            }
        }
    }

    @Test func aConnectionBeyondItsUidsBoundIsAnsweredBusyAndClosed() async throws {
        try await withServer(gate: ConnectionGate(maxConnections: 8, maxConnectionsPerUid: 2)) { path, server in
            let first = try await RPCClient.connect(path: path)
            let second = try await RPCClient.connect(path: path)
            #expect(try await first.call("echo", [1]) == [1])
            #expect(try await second.call("echo", [2]) == [2])
            let third = try await RPCClient.connect(path: path)
            var it = third.notifications.makeAsyncIterator()
            let refusal = await it.next()
            #expect(refusal?.params["data"]?["code"]?.stringValue == "BUSY")
            #expect(refusal?.params["data"]?["retryable"]?.boolValue == true)
            await third.waitClosed()
            #expect(server.statistics().refused == 1)
            // A place freed by a close is taken again.
            await first.close()
            let deadline = ContinuousClock.now.advanced(by: .seconds(30))
            while server.gate.statistics().open > 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            let fourth = try await RPCClient.connect(path: path)
            #expect(try await fourth.call("echo", [4]) == [4])
            #expect(try await second.call("echo", [2]) == [2])
        }
    }

    /// A shutdown that finds connections still being set up (accepted, not yet registered with their event loop)
    /// stops their reading once they are active: NIO may not close the input of a channel before that.
    @Test func aShutdownWhileConnectionsAreAcceptedStopsThemCleanly() async throws {
        for _ in 0..<5 {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let path = dir.appendingPathComponent("s.sock").path
            let server = RPCServer(dispatcher: EchoDispatcher(), logger: Logger(label: "test"))
            let (ready, readyCont) = AsyncStream.makeStream(of: Void.self)
            let task = Task { try await server.run(on: .path(path)) { readyCont.yield() } }
            for await _ in ready { break }
            let connecting = Task {
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<64 {
                        group.addTask {
                            let channel = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                                .connect(unixDomainSocketPath: path).get()
                            try? await channel?.close()
                        }
                    }
                }
            }
            try await Task.sleep(for: .milliseconds(2))
            server.shutdown()
            await connecting.value
            _ = await task.result
        }
    }

    @Test func batchAndInvalidEnvelope() async throws {
        try await withServer { path, _ in
            let c = try await RPCClient.connect(path: path)
            var it = c.notifications.makeAsyncIterator()
            try await c.sendRaw(Array(#"{"id": 9, "method": "echo"}"#.utf8) + [0x0A])
            let err = await it.next()
            #expect(err?.params["data"]?["code"]?.stringValue == "INVALID_REQUEST")
        }
    }

    @Test func secondServerOnALiveSocketIsRefused() async throws {
        try await withServer { path, _ in
            let other = RPCServer(dispatcher: EchoDispatcher(), logger: Logger(label: "test2"))
            await #expect(throws: TesseraError.self) { try await other.run(on: .path(path)) }
            let c = try await RPCClient.connect(path: path)
            #expect(try await c.call("echo", [2]) == [2])
        }
    }
}

/// Connects without ever reading, writes `requests` echo requests as fast as the server takes them (it stops reading
/// once their answers pile up), then closes with the answers unread.
func floodAndClose(path: String, requests: Int) async throws {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .channelOption(.autoRead, value: false)
        .connect(unixDomainSocketPath: path).get()
    final class Counter: Sendable { let n = Atomic<Int>(0) }
    let written = Counter()
    var chunk = ByteBuffer()
    for i in 0..<requests {
        chunk.writeString(#"{"jsonrpc":"2.0","id":\#(i),"method":"echo"}"# + "\n")
        if chunk.readableBytes >= 1 << 16 || i == requests - 1 {
            channel.writeAndFlush(chunk).whenSuccess { written.n.wrappingAdd(1, ordering: .relaxed) }
            chunk = ByteBuffer()
        }
    }
    // Until the server stops taking bytes (or takes them all).
    var last = -1
    while written.n.load(ordering: .relaxed) != last {
        last = written.n.load(ordering: .relaxed)
        try await Task.sleep(for: .milliseconds(500))
    }
    try await channel.close()
}

@Suite struct ConnectionGateTests {
    @Test func oneUidAtItsBoundLeavesTheOthersTheirPlaces() throws {
        let gate = ConnectionGate(maxConnections: 5, maxConnectionsPerUid: 2)
        let a = try (0..<2).map { _ in try gate.admit(uid: 1000) }
        #expect(throws: TesseraError.self) { try gate.admit(uid: 1000) }
        let b = try gate.admit(uid: 1001)
        _ = try gate.admit(uid: 1002)
        _ = try gate.admit(uid: 1002)
        // Five open: the total refuses even a uid with none.
        do {
            _ = try gate.admit(uid: 1003)
            Issue.record("admitted past maxConnections")
        } catch {
            #expect(error.code == .busy && error.retryable)
        }
        b.release()
        b.release()  // once only
        #expect(gate.statistics().open == 4)
        _ = try gate.admit(uid: 1003)
        #expect(throws: TesseraError.self) { try gate.admit(uid: 1001) }
        a[0].release()
        _ = try gate.admit(uid: 1000)
        #expect(gate.statistics().refused == 3)
    }

    /// Over its bound a connection waits in turn and takes the place the next close frees (its uid's first), up to
    /// `maxWaitingPerUid`; a wait ends BUSY when its listener ends, and so does a later one.
    @Test func overTheBoundAConnectionWaitsForAPlace() async throws {
        let gate = ConnectionGate(maxConnections: 8, maxConnectionsPerUid: 1, maxWaitingPerUid: 2)
        final class Listener: Sendable {}
        let tag = Listener()
        let listener = ObjectIdentifier(tag)
        defer { withExtendedLifetime(tag) {} }
        let first = try gate.admit(uid: 1000)
        let second = Task { try await gate.admitInTurn(uid: 1000, listener: listener) }
        let third = Task { try await gate.admitInTurn(uid: 1000, listener: listener) }
        try await Task.sleep(for: .milliseconds(100))
        // Two wait: a third waiter of the uid is refused, another uid is not held up.
        await #expect(throws: TesseraError.self) { try await gate.admitInTurn(uid: 1000, listener: listener) }
        let other = try await gate.admitInTurn(uid: 1001, listener: listener)
        #expect(gate.statistics().open == 2)
        first.release()
        let admitted = try await second.value
        #expect(gate.statistics().open == 2)
        gate.endWaits(listener: listener)
        await #expect(throws: TesseraError.self) { try await third.value }
        admitted.release()
        await #expect(throws: TesseraError.self) { try await gate.admitInTurn(uid: 1000, listener: listener) }
        other.release()
        #expect(gate.statistics() == (open: 0, refused: 3))
    }
}

@Suite struct PacketConnectionTests {
    /// Packets queued faster than the peer reads stay one packet each, in order (NIO would join writes queued
    /// together into one packet), and packets read arrive one by one.
    @Test func queuedPacketsAreWrittenOneEachAndReadOneEach() async throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        let peer = fds[1]
        let connection = try await PacketConnection.adopt(fds[0], maxPacketBytes: 64)
        let count = 2000
        connection.send((0..<count).map { i in [UInt8](repeating: UInt8(i & 0xFF), count: 63) + [UInt8(i >> 8)] })
        var buffer = [UInt8](repeating: 0, count: 256)
        for i in 0..<count {
            let n = buffer.withUnsafeMutableBytes { recv(peer, $0.baseAddress, $0.count, 0) }
            #expect(n == 64)
            #expect(buffer[0] == UInt8(i & 0xFF) && buffer[63] == UInt8(i >> 8))
            if n != 64 { break }
        }
        for i in 0..<3 {
            let packet = [UInt8](repeating: UInt8(i), count: 10 + i)
            _ = packet.withUnsafeBytes { send(peer, $0.baseAddress, $0.count, 0) }
        }
        for i in 0..<3 { #expect(await connection.next() == [UInt8](repeating: UInt8(i), count: 10 + i)) }
        close(peer)
        #expect(await connection.next() == nil)
    }
}

/// The line splitter fed a stream in pieces of any size, as reads hand it over: every frame comes out whole, once, in
/// order, LF or CRLF ended, whatever the piece boundaries and however far the buffer's reader index has moved.
@Suite struct LineFrameDecoderTests {
    @Test func framesComeOutWholeWhateverThePieces() throws {
        var random = SeededRandom(stream: "LineFrameDecoderTests.pieces")
        for _ in 0..<50 {
            let frames = (0..<Int.random(in: 1...12, using: &random)).map { _ in
                String(
                    (0..<Int.random(in: 0...300, using: &random)).map { _ in
                        "abcxyz{}\":,".randomElement(using: &random)!
                    })
            }
            let stream = Array(frames.map { $0 + (Bool.random(using: &random) ? "\r\n" : "\n") }.joined().utf8)
            var decoder = LineFrameDecoder(maxFrameBytes: 1024)
            var buffer = ByteBuffer()
            var out: [String] = []
            var at = 0
            while at < stream.count {
                let piece = min(stream.count - at, Int.random(in: 1...400, using: &random))
                buffer.writeBytes(stream[at..<(at + piece)])
                at += piece
                while let frame = try decoder.nextFrame(&buffer) { out.append(String(buffer: frame)) }
            }
            #expect(out == frames, "\(SeededRandom.reproduce)")
            #expect(buffer.readableBytes == 0)
        }
    }
}

/// Requests of the methods that carry images may be longer than the connection's frame limit (issue #36).
@Suite struct LargeFramesTests {
    let large = LargeFrames(methods: ["face.compare", "enrollment.submit"], maxBytes: 16384)

    func decode(_ text: String, limit: Int = 64) throws -> Int? {
        var decoder = LineFrameDecoder(maxFrameBytes: limit, large: large)
        var buffer = ByteBuffer(string: text)
        return try decoder.nextFrame(&buffer)?.readableBytes
    }

    @Test func aLargeMethodsFrameMayGrowToItsLimitAndNoFurther() throws {
        let params = String(repeating: "a", count: 1000)
        let face = #"{"id":1,"jsonrpc":"2.0","method" : "face.compare","params":{"x":""# + params + "\"}}\n"
        #expect(try decode(face) == face.utf8.count - 1)
        let other = #"{"id":1,"jsonrpc":"2.0","method":"daemon.status","params":{"x":""# + params + "\"}}\n"
        #expect(throws: FrameTooLargeError.self) { try decode(other) }
        do {
            _ = try decode(other)
        } catch let error as FrameTooLargeError {
            #expect(error.limit == 64 && error.message.contains("face.compare"))
        }
        let huge = #"{"method":"enrollment.submit","params":""# + String(repeating: "b", count: 20000)
        do {
            _ = try decode(huge)
            Issue.record("a frame past the large limit was accepted")
        } catch let error as FrameTooLargeError {
            #expect(error.limit == 16384 && error.method == "enrollment.submit")
        }
        // The method named only past the first 4096 bytes: the connection's limit holds.
        let late = #"{"params":{"x":""# + String(repeating: "c", count: 5000) + #""},"method":"face.compare"}"# + "\n"
        #expect(throws: FrameTooLargeError.self) { try decode(late) }
    }
}
