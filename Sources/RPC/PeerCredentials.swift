import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// The identity of the process at the other end of a Unix socket (SO_PEERCRED).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public init(pid: Int32, uid: UInt32, gid: UInt32) { self.pid = pid; self.uid = uid; self.gid = gid }
}

/// Mirrors glibc's `struct ucred` { pid_t pid; uid_t uid; gid_t gid; } (which Swift does not import).
private struct UCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

extension PeerCredentials {
    /// Reads SO_PEERCRED from a connected Unix-socket channel.
    static func of(_ channel: Channel) async throws -> PeerCredentials {
        guard let provider = channel as? SocketOptionProvider else {
            throw SocketOptionUnsupported()
        }
        let cred: UCred = try await provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED)
        ).get()
        return PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid)
    }
}

struct SocketOptionUnsupported: Error {}
