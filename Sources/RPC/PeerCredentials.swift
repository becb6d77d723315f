import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The identity of the process at the other end of a Unix socket, as the kernel recorded it when it connected
/// (SO_PEERCRED and SO_PEERGROUPS, read once at accept).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    /// Supplementary groups.
    public var groups: Set<UInt32>
    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: Set<UInt32> = []) {
        self.pid = pid; self.uid = uid; self.gid = gid; self.groups = groups
    }
}

/// Mirrors glibc's `struct ucred` { pid_t pid; uid_t uid; gid_t gid; } (which Swift does not import).
private struct UCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// A zero-length option buffer: SO_PEERGROUPS into it succeeds only when the peer has no supplementary group.
private struct NoGroups: Sendable {}

extension PeerCredentials {
    /// Reads SO_PEERCRED and SO_PEERGROUPS from a connected Unix-socket channel.
    static func of(_ channel: Channel) async throws -> PeerCredentials {
        guard let provider = channel as? SocketOptionProvider else {
            throw SocketOptionUnsupported()
        }
        let cred: UCred = try await provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED)
        ).get()
        return PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid, groups: await groups(provider))
    }

    /// SO_PEERGROUPS: the kernel copies the peer's group list, sorted ascending, into a zeroed buffer without
    /// saying how long it was; so an empty list is told apart by a zero-length probe, and a zero entry counts
    /// only in front (gid 0 sorts first). A peer with more than 1024 groups gets none (group rules fail closed).
    private static func groups(_ provider: any SocketOptionProvider) async -> Set<UInt32> {
        let level = SocketOptionLevel(SOL_SOCKET), name = SocketOptionName(SO_PEERGROUPS)
        if (try? await provider.unsafeGetSocketOption(level: level, name: name).get() as NoGroups) != nil { return [] }
        guard
            let list: InlineArray<1024, UInt32> = try? await provider.unsafeGetSocketOption(level: level, name: name)
                .get()
        else {
            return []
        }
        var groups = Set<UInt32>()
        for i in list.indices where list[i] != 0 || i == 0 { groups.insert(list[i]) }
        return groups
    }
}

struct SocketOptionUnsupported: Error {}
