import CBOR
import CTAP2
import CTAPHID
import Logging
import RPC

/// The CTAPHID device shared by every connection of the CTAP socket: channels, one transaction at a time,
/// KEEPALIVE every 100 ms while a request runs, MSG_TIMEOUT for stalled messages.
public actor CTAPHIDHub {
    /// One client of the device: a socket connection, or the uhid device (no peer credentials: its hidraw
    /// node's permissions are the gate).
    public struct Connection: Sendable {
        let peer: PeerCredentials?
        let send: @Sendable ([[UInt8]]) -> Void
        let shutdown: @Sendable () -> Void

        public init(
            peer: PeerCredentials?, send: @escaping @Sendable ([[UInt8]]) -> Void,
            shutdown: @escaping @Sendable () -> Void
        ) {
            self.peer = peer
            self.send = send
            self.shutdown = shutdown
        }
    }

    private var device = CTAPHIDDevice { UInt32.random(in: 1..<UInt32.max) }
    private var connections: [UInt64: Connection] = [:]
    private var running: (channel: UInt32, task: Task<Void, Never>)?
    private var status: CTAPHID.KeepaliveStatus = .processing
    private var nextOwner: UInt64 = 1
    private var ticker: Task<Void, Never>?
    private let authenticator: CTAP2Authenticator
    private let logger: Logger

    public init(authenticator: CTAP2Authenticator, logger: Logger) {
        self.authenticator = authenticator
        self.logger = logger
    }

    public func add(_ connection: Connection) -> UInt64 {
        let owner = nextOwner
        nextOwner += 1
        connections[owner] = connection
        // The channel quota is per uid: one uid's INIT flood never takes another uid's channels.
        if let uid = connection.peer?.uid { device.join(owner: owner, group: UInt64(uid)) }
        if ticker == nil {
            ticker = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(100))
                    await self?.tick()
                }
            }
        }
        return owner
    }

    public func receive(_ report: [UInt8], from owner: UInt64) {
        perform(device.receive(report, from: owner, now: .now))
    }

    public func disconnected(_ owner: UInt64) {
        perform(device.disconnected(owner))
        connections[owner] = nil
    }

    /// Every 100 ms: stalled messages time out, the running request's client gets a KEEPALIVE.
    public func tick() {
        perform(device.expire(now: .now))
        if let keepalive = device.keepalive(status) { perform([keepalive]) }
    }

    /// Wakes every connection's reader (graceful stop).
    public func shutdownAll() {
        for c in connections.values { c.shutdown() }
        ticker?.cancel()
        ticker = nil
    }

    private func setStatus(_ progress: CTAP2Progress) {
        status = progress == .waitingForUserPresence ? .userPresenceNeeded : .processing
    }

    private func finished(_ channel: UInt32, _ response: [UInt8]) {
        if running?.channel == channel { running = nil }
        perform(device.finish(channel: channel, response: response))
    }

    private func perform(_ actions: [CTAPHIDAction]) {
        for action in actions {
            switch action {
            case .send(let owner, let reports):
                connections[owner]?.send(reports)
            case .dispatch(let owner, let channel, let payload):
                status = .processing
                let peer = connections[owner]?.peer
                let previous = running?.task
                let authenticator = self.authenticator
                let logger = self.logger
                running = (
                    channel,
                    Task {
                        // A request cancelled by a re-INIT may still be finishing: requests never overlap.
                        await previous?.value
                        let response: [UInt8] = await CTAPCaller.$current.withValue(peer) {
                            do throws(CTAP2Error) {
                                let session = CTAP2Session(connection: owner, channel: channel, uid: peer?.uid)
                                let body = try await authenticator.run(payload, from: session) { progress in
                                    Task { await self.setStatus(progress) }
                                }
                                return [CTAP2Status.ok.rawValue] + (body.map { $0.encodedWithDistinctKeys() } ?? [])
                            } catch {
                                logger.debug(
                                    "ctap: command 0x\(String(payload[0], radix: 16)) → 0x\(String(error.status.rawValue, radix: 16)) \(error.message)"
                                )
                                return [error.status.rawValue]
                            }
                        }
                        self.finished(channel, response)
                    }
                )
            case .cancel(let channel):
                if let r = running, r.channel == channel { r.task.cancel() }
            }
        }
    }
}
