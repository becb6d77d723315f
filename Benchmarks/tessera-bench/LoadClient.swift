import Dispatch
import FoundationEssentials
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The load generator: one OS thread per client, each with a blocking Unix socket that sends the next
/// `passkey.authenticate` as soon as the previous answer arrives. Requests are pre-serialised (only the id and
/// the challenge change: every request carries a fresh 24-byte challenge); each answer's envelope is checked by
/// prefix (`{"id":N,"jsonrpc":"2.0","result":{`, the daemon writes
/// keys sorted), and every 64th answer is parsed in full and its fields checked. No Swift concurrency, no event
/// loop: the client costs three syscalls and one wake-up per assertion, so the daemon is what is measured.
enum LoadClient {
    struct Result {
        var latencies: [Double] = []
        var failure: String?
        /// Sizes of the last request and answer, newline included (for `TransportFloor`).
        var requestBytes = 0
        var answerBytes = 0
    }

    /// Runs `clients` connections for `seconds` (off the cooperative pool); returns every latency (seconds), the wall
    /// time and the sizes of the last request and answer.
    /// `pin`: sent with every assertion (the PIN check the daemon does per request is then measured too).
    /// `count`: stop each connection after this many assertions instead (the deadline still applies).
    static func run(
        socket: String, credentialId: String, clients: Int, seconds: Double,
        pin: String? = nil, count: Int? = nil
    ) async throws -> (latencies: [Double], wall: Double, sizes: (request: Int, answer: Int)) {
        try await DedicatedThread.run(name: "bench.load") {
            () throws -> (latencies: [Double], wall: Double, sizes: (request: Int, answer: Int)) in
            try blockingRun(
                socket: socket, credentialId: credentialId, clients: clients, seconds: seconds, pin: pin,
                count: count)
        }
    }

    /// Stands in for the challenge in the pre-serialised request; 32 base64url characters (24 bytes).
    private static let challengePlaceholder = "CHALLENGExPLACEHOLDERx0123456789"

    private static func blockingRun(
        socket: String, credentialId: String, clients: Int, seconds: Double,
        pin: String?, count: Int?
    ) throws -> (latencies: [Double], wall: Double, sizes: (request: Int, answer: Int)) {
        var fields: [String: JSONValue] = [
            "rpId": "bench.example", "challenge": .string(challengePlaceholder),
            "allowCredentials": [.string(credentialId)],
        ]
        if let pin { fields["pin"] = .string(pin) }
        let params = Array(JSONValue.object(fields).serialized())
        let marker = Array(challengePlaceholder.utf8)
        guard
            let at = (0...(params.count - marker.count)).first(where: {
                params[$0..<($0 + marker.count)].elementsEqual(marker)
            })
        else { throw BenchError("challenge placeholder not found in the serialised request") }
        let head = Array(#","jsonrpc":"2.0","method":"passkey.authenticate","params":"#.utf8) + params[..<at]
        let tail = Array(params[(at + marker.count)...]) + Array("}\n".utf8)
        let fds = try (0..<clients).map { _ in try connect(socket) }
        defer { for fd in fds { close(fd) } }
        let results = Locked([Result](repeating: Result(), count: clients))
        let start = monotonicNanos()
        let deadline = start + UInt64(seconds * 1e9)
        let finished = DispatchGroup()
        for (index, fd) in fds.enumerated() {
            finished.enter()
            DedicatedThread.detach(name: "bench.client.\(index)", stackSize: 1 << 20) {
                let r = loop(fd: fd, client: index, head: head, tail: tail, deadline: deadline, count: count ?? Int.max)
                results.withLock { $0[index] = r }
                finished.leave()
            }
        }
        finished.wait()
        let wall = Double(monotonicNanos() - start) / 1e9
        let all = results.withLock { $0 }
        if let failure = all.compactMap(\.failure).first { throw BenchError(failure) }
        return (all.flatMap(\.latencies), wall, (all[0].requestBytes, all[0].answerBytes))
    }

    private static func loop(fd: Int32, client: Int, head: [UInt8], tail: [UInt8], deadline: UInt64, count limit: Int)
        -> Result
    {
        var result = Result()
        result.latencies.reserveCapacity(200_000)
        var request = [UInt8]()
        request.reserveCapacity(head.count + tail.count + 80)
        var expected = [UInt8]()
        var inbox = [UInt8](repeating: 0, count: 1 << 16)
        var id = 0
        while true {
            id += 1
            request.removeAll(keepingCapacity: true)
            request += Array(#"{"id":"#.utf8)
            request += Array(String(id).utf8)
            request += head
            request += freshChallenge(client: client, id: id)
            request += tail
            expected.removeAll(keepingCapacity: true)
            expected += Array(#"{"id":"#.utf8)
            expected += Array(String(id).utf8)
            expected += Array(#","jsonrpc":"2.0","result":{"#.utf8)
            let t0 = monotonicNanos()
            guard writeAll(fd, request) else { result.failure = "write failed: errno \(errno)"; return result }
            let count: Int
            switch readLine(fd, into: &inbox) {
            case .success(let n): count = n
            case .failure(let e): result.failure = e.description; return result
            }
            let t1 = monotonicNanos()
            result.latencies.append(Double(t1 - t0) / 1e9)
            result.requestBytes = request.count
            result.answerBytes = count
            let line = inbox[0..<(count - 1)]
            if !line.starts(with: expected) || id % 64 == 1 {
                if let problem = check(Array(line), id: id) { result.failure = problem; return result }
            }
            if t1 >= deadline || id >= limit { return result }
        }
    }

    /// 32 base64url characters, different for every request of the run: the client and request numbers in hex.
    private static func freshChallenge(client: Int, id: Int) -> [UInt8] {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: UInt8(ascii: "0"), count: 32)
        var a = UInt64(client), b = UInt64(id)
        for i in 0..<16 { out[15 - i] = digits[Int(a & 15)]; a >>= 4 }
        for i in 0..<16 { out[31 - i] = digits[Int(b & 15)]; b >>= 4 }
        return out
    }

    /// Full check of one answer: the id, and the assertion's fields.
    private static func check(_ line: [UInt8], id: Int) -> String? {
        guard let v = try? JSONValue.parse(line) else {
            return "unparsable answer: \(String(decoding: line, as: UTF8.self))"
        }
        guard v["id"]?.intValue == id else {
            return "answer for the wrong id: \(String(decoding: line, as: UTF8.self))"
        }
        guard let r = v["result"] else { return "error answer: \(String(decoding: line, as: UTF8.self))" }
        for key in ["authenticatorData", "clientDataJSON", "signature", "credentialId", "userHandle"] {
            guard let s = r[key]?.stringValue, let b = Base64URL.decode(s), !b.isEmpty else {
                return "answer lacks \(key)"
            }
        }
        guard r["signCount"]?.intValue != nil else { return "answer lacks signCount" }
        return nil
    }

    /// Reads one line (the daemon answers one request with one line; nothing else is in flight) into `inbox`;
    /// its length, newline included. poll() first: a thread blocked in read() on a Unix socket is also woken when
    /// the daemon reads the request (the socket's write-space wake-up is not filtered for readers), and that
    /// wake-up costs the daemon an inter-processor interrupt per request; poll's wait is filtered to POLLIN.
    static func readLine(_ fd: Int32, into inbox: inout [UInt8]) -> Swift.Result<Int, BenchError> {
        var count = 0
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, -1) >= 0 || errno == EINTR else {
                return .failure(BenchError("poll failed: errno \(errno)"))
            }
            let n = inbox.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            guard n > 0 else { return .failure(BenchError("read failed: \(n == 0 ? "EOF" : "errno \(errno)")")) }
            count += n
            if inbox[count - 1] == UInt8(ascii: "\n") { return .success(count) }
            guard count < inbox.count else { return .failure(BenchError("answer too long")) }
        }
    }

    static func connect(_ path: String, type: Int32 = Int32(SOCK_STREAM.rawValue)) throws -> Int32 {
        let fd = socket(AF_UNIX, type, 0)
        guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw BenchError("socket path too long") }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
        }
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard ok == 0 else { close(fd); throw BenchError("connect \(path): errno \(errno)") }
        return fd
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
            guard n > 0 else { return false }
            off += n
        }
        return true
    }

    static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// CPU seconds (user + system) this process used so far.
    static func ownCPUSeconds() -> Double {
        var u = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
    }
}

struct BenchError: Error, CustomStringConvertible, Sendable {
    let description: String
    init(_ d: String) { description = d }
}
