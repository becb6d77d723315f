import FoundationEssentials
import TesseraCore
import TesseraRuntime
import TesseraTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The transport's share of a request's latency, measured in the same run: closed-loop round trips over a Unix
/// socket to a second process that does nothing but answer, with the request and answer sizes of
/// `passkey.authenticate`. What a daemon adds beyond this floor is its own work; the floor itself is two
/// wake-ups of a sleeping thread, and on this kind of VM it depends mostly on whether the scheduler runs the two
/// processes on one core or on two.
enum TransportFloor {
    /// Runs the answering peer (`tessera-bench --echo-peer PATH ANSWER_BYTES`): accepts one connection on PATH and
    /// answers every line with `answerBytes` bytes (newline included) until the client hangs up.
    static func serve(path: String, answerBytes: Int) -> Never {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        precondition(bytes.count < MemoryLayout.size(ofValue: addr.sun_path), "socket path too long")
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
        }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard listener >= 0, bound == 0, listen(listener, 1) == 0 else { exit(2) }
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { exit(2) }
        let answer = [UInt8](repeating: UInt8(ascii: "x"), count: max(1, answerBytes) - 1) + [UInt8(ascii: "\n")]
        var inbox = [UInt8](repeating: 0, count: 1 << 16)
        while case .success = LoadClient.readLine(fd, into: &inbox) {
            guard LoadClient.writeAll(fd, answer) else { break }
        }
        exit(0)
    }

    /// Round-trip latencies (seconds) for `seconds`, through a peer started from this executable
    /// (under `taskset -c cpus` when given, like the daemon).
    static func measure(
        requestBytes: Int, answerBytes: Int, seconds: Double, directory: String, cpus: String?
    ) async throws -> [Double] {
        let path = directory + "/floor.sock"
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let peer = try ChildProcess.start(
            (cpus.map { ["/usr/bin/taskset", "-c", $0] } ?? []) + [me, "--echo-peer", path, String(answerBytes)],
            output: .inherit)
        do {
            let latencies = try await roundTrips(
                path, requestBytes: requestBytes, answerBytes: answerBytes, seconds: seconds)
            await Subprocess.terminate(peer, grace: 1)
            return latencies
        } catch {
            await Subprocess.terminate(peer, grace: 1)
            throw error
        }
    }

    /// Connects to the peer at `path` and runs the closed loop for `seconds`.
    private static func roundTrips(_ path: String, requestBytes: Int, answerBytes: Int, seconds: Double)
        async throws -> [Double]
    {
        var fd: Int32 = -1
        for _ in 0..<2000 where fd < 0 {
            fd = (try? LoadClient.connect(path)) ?? -1
            if fd < 0 { try await Task.sleep(for: .milliseconds(1)) }
        }
        guard fd >= 0 else { throw BenchError("the transport floor's peer did not listen on \(path)") }
        let socket = fd
        defer { close(socket) }
        return try await DedicatedThread.run(name: "bench.floor") { () throws -> [Double] in
            let request =
                [UInt8](repeating: UInt8(ascii: "x"), count: max(1, requestBytes) - 1) + [UInt8(ascii: "\n")]
            var inbox = [UInt8](repeating: 0, count: 1 << 16)
            var latencies: [Double] = []
            let deadline = LoadClient.monotonicNanos() + UInt64(seconds * 1e9)
            while true {
                let t0 = LoadClient.monotonicNanos()
                guard LoadClient.writeAll(socket, request),
                    case .success(answerBytes) = LoadClient.readLine(socket, into: &inbox)
                else { throw BenchError("the transport floor's peer stopped answering") }
                let t1 = LoadClient.monotonicNanos()
                latencies.append(Double(t1 - t0) / 1e9)
                if t1 >= deadline { return latencies }
            }
        }
    }
}
