#if canImport(Glibc)
    import Glibc
#endif

/// Who asks at a front door (JSON-RPC, SSH agent, CTAP, mdoc, enrollment), as the owner rule sees it: every
/// credential records the uid that created it, and only that uid and administrators can see, use or change it. To
/// anyone else it does not exist: the door answers as for an id that was never made.
public struct Requester: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var pid: Int32
    /// Whether the policy grants the caller `admin`: it sees and may act on every uid's credentials.
    public var isAdmin: Bool

    public init(uid: UInt32, pid: Int32 = 0, isAdmin: Bool) {
        self.uid = uid
        self.pid = pid
        self.isAdmin = isAdmin
    }

    /// Whether this caller may see, use and change what `owner` created (nil: an owner nobody recorded; only an
    /// administrator).
    public func owns(_ owner: UInt32?) -> Bool { isAdmin || owner == uid }

    /// The uid a new credential is recorded for.
    public var ownerUid: UInt32 { uid }

    /// The daemon acting for itself (recovery of its own journal, tests): an administrator with the daemon's uid.
    public static var daemon: Requester { Requester(uid: daemonUID, pid: getpid(), isAdmin: true) }

    /// The daemon's uid: the owner of rows that existed before owners were recorded, and of credentials made on doors
    /// that carry no uid (the kernel's HID device).
    public static var daemonUID: UInt32 { geteuid() }

    public var description: String { "uid \(uid)\(isAdmin ? " (admin)" : "")" }
}
