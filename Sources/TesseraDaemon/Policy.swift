internal import CSystemShims
import FoundationEssentials
import RPC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// What a method needs from the caller.
public enum Permission: String, Sendable {
    /// Status and listing (anyone who can connect to the socket).
    case read
    /// Passkey assertions.
    case sign
    /// Creating passkeys, reading documents, running enrollments.
    case enroll
    /// Deleting credentials and other destructive operations.
    case admin
    /// Checking badges on a door's readers (`access.check`, `access.watch`): the door controller's.
    case door
}

/// Decides from the peer's credentials (SO_PEERCRED uid and primary gid, SO_PEERGROUPS supplementary gids) whether a caller holds a permission.
/// Root and the daemon's own uid hold every permission. Without a rule, `sign` and `enroll` are open to
/// every client that can reach the socket (its mode and group are the gate); `admin` and `door` are closed.
public struct Policy: Sendable {
    struct Resolved: Sendable { var uids: Set<UInt32>; var gids: Set<UInt32> }
    private let rules: [Permission: Resolved]
    private let daemonUID: UInt32

    public init(_ config: PolicyConfig?) throws(TesseraError) {
        daemonUID = geteuid()
        var rules: [Permission: Resolved] = [:]
        func resolve(_ r: PolicyConfig.Rule?) throws(TesseraError) -> Resolved? {
            guard let r else { return nil }
            var uids = Set<UInt32>(), gids = Set<UInt32>()
            for u in r.users ?? [] { uids.insert(try Self.uid(u)) }
            for g in r.groups ?? [] { gids.insert(try Self.gid(g)) }
            return Resolved(uids: uids, gids: gids)
        }
        rules[.sign] = try resolve(config?.sign)
        rules[.enroll] = try resolve(config?.enroll)
        rules[.admin] = try resolve(config?.admin)
        rules[.door] = try resolve(config?.door)
        self.rules = rules
    }

    public func check(_ permission: Permission, peer: PeerCredentials) throws(TesseraError) {
        if permission == .read || peer.uid == 0 || peer.uid == daemonUID { return }
        guard let rule = rules[permission] else {
            if permission == .admin || permission == .door {
                throw TesseraError(
                    .unauthorized,
                    "uid \(peer.uid) may not \(permission.rawValue): no \(permission.rawValue) rule in the policy")
            }
            return
        }
        if rule.uids.contains(peer.uid) || rule.gids.contains(peer.gid) { return }
        if !rule.gids.isDisjoint(with: peer.groups) { return }
        throw TesseraError(.unauthorized, "uid \(peer.uid) is not allowed to \(permission.rawValue) by the policy")
    }

    static func uid(_ s: String) throws(TesseraError) -> UInt32 {
        if let n = UInt32(s) { return n }
        var uid: UInt32 = 0
        guard tessera_lookup_uid(s, &uid) == 0 else {
            throw TesseraError(.invalidInput, "unknown user '\(s)' in policy")
        }
        return uid
    }

    static func gid(_ s: String) throws(TesseraError) -> UInt32 {
        if let n = UInt32(s) { return n }
        var gid: UInt32 = 0
        guard tessera_lookup_gid(s, &gid) == 0 else {
            throw TesseraError(.invalidInput, "unknown group '\(s)' in policy")
        }
        return gid
    }
}
