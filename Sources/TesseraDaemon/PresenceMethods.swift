import FoundationEssentials
import Logging
import Pinentry
import Presence
import RPC
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

extension PresenceSettings {
    /// The `presence` section (no command, no pinentry, 30 s, no answers on the socket by default).
    init(_ config: PresenceConfig?, pinentry: PinentryConfig?) {
        self.init(
            command: config?.command, pinentry: config?.pinentry == true ? Pinentry(pinentry) : nil,
            timeout: .seconds(config?.timeoutSeconds ?? 30), confirmOnSocket: config?.confirmOnSocket ?? false)
    }
}

extension Pinentry {
    /// The `pinentry` section ("pinentry" on PATH, 60 s, the daemon's own environment by default).
    init(_ config: PinentryConfig?) {
        self.init(
            program: config?.program ?? "pinentry", timeout: .seconds(config?.timeoutSeconds ?? 60),
            environment: config?.environment ?? [:])
    }
}

/// Connections that receive `presence.request` / `presence.resolved` (`presence.subscribe`): those of the asking uid,
/// and administrators (decided when they subscribe).
final class PresenceSubscribers: Sendable {
    private struct Subscriber {
        var connection: RPCConnection
        var isAdmin: Bool
    }
    private let connections = Locked<[UInt64: Subscriber]>([:])

    func add(_ c: RPCConnection, isAdmin: Bool) {
        connections.withLock { $0[c.id] = Subscriber(connection: c, isAdmin: isAdmin) }
    }

    func remove(_ c: RPCConnection) { _ = connections.withLock { $0.removeValue(forKey: c.id) } }

    func send(_ event: PresenceEvent) async {
        for s in connections.withLock({ Array($0.values) })
        where PresenceBroker.sees(uid: s.connection.peer.uid, isAdmin: s.isAdmin, owner: event.uid) {
            await s.connection.notify(event.method, event.params)
        }
    }
}

extension MethodTable {
    /// `presence.list`, `presence.confirm`, `presence.deny` and `presence.subscribe` (docs/API.md).
    func registerPresence(_ broker: PresenceBroker, subscribers: PresenceSubscribers) {
        onClose { subscribers.remove($0) }
        let policy = self.policy
        @Sendable func answer(_ p: Params, _ connection: RPCConnection, confirm: Bool) async throws -> JSONValue {
            let requestId = try p.optionalInt("requestId").map { UInt64(clamping: $0) }
            let id = try await broker.answer(
                requestId, confirm: confirm, uid: connection.peer.uid,
                isAdmin: policy.grants(.admin, to: connection.peer))
            return ["requestId": .number(Double(id))]
        }
        register("presence.confirm", .sign) { p, connection in
            try await answer(p, connection, confirm: p.optionalBool("approve") ?? true)
        }
        register("presence.deny", .sign) { p, connection in
            try await answer(p, connection, confirm: false)
        }
        register("presence.list", .read) { _, connection in
            let isAdmin = policy.grants(.admin, to: connection.peer)
            return ["requests": .array(await broker.list(uid: connection.peer.uid, isAdmin: isAdmin))]
        }
        register("presence.subscribe", .read) { _, connection in
            subscribers.add(connection, isAdmin: policy.grants(.admin, to: connection.peer))
            return ["subscribed": true]
        }
    }
}
