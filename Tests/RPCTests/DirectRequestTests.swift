import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import TesseraCore
import Testing

@testable import RPC

/// Answers `greet` both ways: directly from the frame (`answerDirectly`, inline in the connection's task) and through
/// `handle`, counting the direct answers; `greet` with `fail: true` fails with PIN_INVALID either way.
struct DirectGreeter: RPCDispatcher {
    let direct = Locked(0)

    func answersInline(_ request: DirectRequest) -> Bool { request.isMethod("greet") }

    func handle(_ request: RPCRequest, from connection: RPCConnection) async throws(TesseraError) -> JSONValue {
        guard request.method == "greet" else { throw TesseraError(.methodNotFound, "unknown method") }
        if request.params?["fail"]?.boolValue == true { throw TesseraError(.pinInvalid, "wrong PIN") }
        let name = request.params?["name"]?.stringValue ?? ""
        return ["hello": .string(Base64URL.encode(Array(name.utf8))), "count": 7, "ok": true]
    }

    nonisolated(nonsending) func answerDirectly(_ request: DirectRequest, from connection: RPCConnection) async
        -> DirectAnswer?
    {
        guard request.isMethod("greet") else { return nil }
        direct.withLock { $0 += 1 }
        if case .bool(true)? = request["fail"] {
            return DirectAnswer(to: request, error: TesseraError(.pinInvalid, "wrong PIN"))
        }
        guard case .string(let name)? = request["name"] else { return nil }
        var answer = DirectAnswer(to: request, capacity: 64)
        answer.integer("count", 7)
        answer.base64URL("hello", Array(name.utf8))
        answer.bool("ok", true)
        return answer
    }
}

@Suite struct DirectRequestTests {
    static func scan(_ text: String) -> DirectRequest? { DirectRequest(scanning: Array(text.utf8)) }

    @Test func aPlainRequestIsReadWithoutAJSONTree() throws {
        let r = try #require(
            Self.scan(
                #"{"id":12,"jsonrpc":"2.0","method":"passkey.authenticate","params":{"allowCredentials":["QUJD","REVG"],"challenge":"Y2g","pin":"1234","origin":null,"allowFinalPinTry":false}}"#
            ))
        #expect(r.isMethod("passkey.authenticate"))
        #expect(!r.isMethod("passkey.enroll"))
        #expect(r.idValue == 12)
        guard case .strings(let ids)? = r["allowCredentials"] else { Issue.record("no allowCredentials"); return }
        #expect(ids == ["QUJD", "REVG"])
        guard case .string("1234")? = r["pin"], case .null? = r["origin"], case .bool(false)? = r["allowFinalPinTry"]
        else { Issue.record("members misread"); return }
        #expect(r["rpId"] == nil)
        let spaced = try #require(Self.scan(#" { "method" : "m" , "params" : { } , "jsonrpc":"2.0", "id" : "a-1" } "#))
        #expect(spaced.idValue == "a-1")
        #expect(spaced.isMethod("m"))
    }

    @Test(arguments: [
        #"[{"id":1,"jsonrpc":"2.0","method":"m","params":{}}]"#,  // a batch
        #"{"jsonrpc":"2.0","method":"m","params":{}}"#,  // a notification
        #"{"id":1,"jsonrpc":"2.0","method":"m"}"#,  // no params
        #"{"id":1,"jsonrpc":"1.0","method":"m","params":{}}"#,
        #"{"id":1,"method":"m","params":{}}"#,
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{},"extra":1}"#,
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":"\u0041"}}"#,  // an escape
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":"é"}}"#,  // non-ASCII
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":{"b":"c"}}}"#,  // nested object
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":[{"id":"QUJD"}]}}"#,
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":1}}"#,  // a number
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":"x","a":"y"}}"#,  // a repeated key
        #"{"id":1,"id":2,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":1.5,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":01,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":-1,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":1e3,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":1234567890123456,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":null,"jsonrpc":"2.0","method":"m","params":{}}"#,
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{}} x"#,  // trailing bytes
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":["x",]}}"#,
        #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":"x}}"#,  // unterminated
    ])
    func anythingButThePlainestFrameTakesTheGeneralPath(frame: String) {
        #expect(Self.scan(frame) == nil)
    }

    @Test func aLongFrameIsNotScanned() {
        let long =
            #"{"id":1,"jsonrpc":"2.0","method":"m","params":{"a":""# + String(repeating: "x", count: 5000) + "\"}}"
        #expect(Self.scan(long) == nil)
    }

    /// The direct answer is byte for byte the general path's, for a result and for an error, with either kind of id.
    @Test func theDirectAnswerIsTheGeneralPathsAnswer() async throws {
        let dispatcher = DirectGreeter()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.sock").path
        let server = RPCServer(dispatcher: dispatcher, logger: Logger(label: "test"))
        let (ready, readyCont) = AsyncStream.makeStream(of: Void.self)
        let task = Task { try await server.run(on: .path(path)) { readyCont.yield() } }
        for await _ in ready { break }
        defer { server.shutdown(); task.cancel() }

        // Each pair: the plain frame (direct) and the same request with an escape (general path).
        let pairs = [
            (
                #"{"id":7,"jsonrpc":"2.0","method":"greet","params":{"name":"ann"}}"#,
                #"{"id":7,"jsonrpc":"2.0","method":"greet","params":{"name":"\u0061nn"}}"#
            ),
            (
                #"{"id":"r-1","jsonrpc":"2.0","method":"greet","params":{"name":"bob"}}"#,
                #"{"id":"r-1","jsonrpc":"2.0","method":"greet","params":{"name":"b\u006fb"}}"#
            ),
            (
                #"{"id":8,"jsonrpc":"2.0","method":"greet","params":{"fail":true}}"#,
                #"{"id":8,"jsonrpc":"2.0","method":"greet","params":{"fail":true,"x":"\u0061"}}"#
            ),
        ]
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(unixDomainSocketPath: path) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        try await channel.executeThenClose { inbound, outbound in
            var it = inbound.makeAsyncIterator()
            var pending = ""
            func line() async throws -> String {
                while !pending.contains("\n") {
                    guard let chunk = try await it.next() else { return "" }
                    pending += String(buffer: chunk)
                }
                let end = pending.firstIndex(of: "\n")!
                defer { pending = String(pending[pending.index(after: end)...]) }
                return String(pending[..<end])
            }
            for (plain, escaped) in pairs {
                try await outbound.write(ByteBuffer(string: plain + "\n"))
                let direct = try await line()
                try await outbound.write(ByteBuffer(string: escaped + "\n"))
                let general = try await line()
                #expect(direct == general)
                #expect(!direct.isEmpty)
            }
        }
        #expect(dispatcher.direct.withLock { $0 } == 3)
        server.shutdown()
        _ = await task.result
    }
}
