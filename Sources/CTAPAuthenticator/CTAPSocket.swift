internal import CSystemShims
import CTAPHID
import Logging
import RPC
import ServiceLifecycle
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The CTAP socket (`--ctap-socket`, SOCK_SEQPACKET, one 64-byte report per packet) as a lifecycle service.
/// Connecting needs the policy's `sign` permission; making credentials needs `enroll`. One thread accepts; each
/// connection is then served on the NIO event loops (`PacketConnection`), not on a thread of its own, within the
/// daemon's connection bounds (`gate`).
public struct CTAPSocketService: Service {
    let path: String
    let mode: UInt32
    let group: UInt32?
    let hub: CTAPHIDHub
    let access: CTAPAccess
    /// The connection bounds shared with the daemon's other sockets; a refused connection is closed.
    let gate: ConnectionGate
    let logger: Logger

    public init(
        path: String, mode: UInt32, group: UInt32?, hub: CTAPHIDHub, access: CTAPAccess, gate: ConnectionGate,
        logger: Logger
    ) {
        self.path = path
        self.mode = mode
        self.group = group
        self.hub = hub
        self.access = access
        self.gate = gate
        self.logger = logger
    }

    public func run() async throws {
        let listener = tessera_seqpacket_listen(path, mode, group.map { Int($0) } ?? -1)
        guard listener >= 0 else {
            throw TesseraError(
                .internalError, "cannot listen on the CTAP socket \(path): \(String(cString: strerror(-listener)))")
        }
        defer {
            close(listener)
            unlink(path)
        }
        let accepted = AsyncStream<(Int32, PeerCredentials)> { continuation in
            DedicatedThread.detach(name: "tessera.ctap.accept") {
                while true {
                    var pid: Int32 = 0, uid: UInt32 = 0, gid: UInt32 = 0
                    let fd = tessera_seqpacket_accept(listener, &pid, &uid, &gid)
                    if fd == -EINTR || fd == -ECONNABORTED { continue }
                    guard fd >= 0 else { break }
                    var groups = [UInt32](repeating: 0, count: 256)
                    let n = groups.withUnsafeMutableBufferPointer {
                        tessera_peer_groups(fd, $0.baseAddress, Int32($0.count))
                    }
                    let peer = PeerCredentials(pid: pid, uid: uid, gid: gid, groups: Set(groups.prefix(max(Int(n), 0))))
                    continuation.yield((fd, peer))
                }
                continuation.finish()
            }
        }
        logger.info("ctap ready", metadata: ["socket": "\(path)"])
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await (fd, peer) in accepted {
                    do throws(TesseraError) { try access.connect(peer) } catch {
                        logger.notice("ctap: connection refused: \(error.message)")
                        close(fd)
                        continue
                    }
                    let ticket: ConnectionGate.Ticket
                    do throws(TesseraError) { ticket = try gate.admit(uid: peer.uid) } catch {
                        logger.notice("ctap: connection refused: \(error.message)")
                        close(fd)
                        continue
                    }
                    group.addTask {
                        await serve(fd: fd, peer: peer)
                        ticket.release()
                    }
                }
                await hub.shutdownAll()
            }
        } onGracefulShutdown: {
            tessera_socket_shutdown(listener)
        }
    }

    /// Hands the reports of one connection to the hub, in order, until it closes.
    private func serve(fd: Int32, peer: PeerCredentials) async {
        let connection: PacketConnection
        do { connection = try await PacketConnection.adopt(fd, maxPacketBytes: CTAPHID.reportSize) } catch {
            logger.warning("ctap: \(error.message)")
            return
        }
        let owner = await hub.add(
            CTAPHIDHub.Connection(peer: peer, send: connection.send, shutdown: connection.close))
        while let report = await connection.next() {
            guard report.count == CTAPHID.reportSize else { continue }  // not one report: dropped
            await hub.receive(report, from: owner)
        }
        await hub.disconnected(owner)
    }
}
