/// CTAPHID framing and channel rules (CTAP 2.1 §11.2): 64-byte reports, init and continuation packets, channel
/// allocation, one transaction at a time, CHANNEL_BUSY, INVALID_SEQ and MSG_TIMEOUT. Pure: the transport feeds
/// reports and clock ticks in and carries the resulting actions out.
public enum CTAPHID {
    /// Size of one HID report (and of one SOCK_SEQPACKET packet on `--ctap-socket`).
    public static let reportSize = 64
    /// Payload bytes in an initialization packet.
    public static let initPayload = reportSize - 7
    /// Payload bytes in a continuation packet.
    public static let continuationPayload = reportSize - 5
    /// Largest message: one initialization packet and 128 continuation packets.
    public static let maxMessageSize = initPayload + 128 * continuationPayload
    /// The broadcast channel, where only INIT is allowed.
    public static let broadcastChannel: UInt32 = 0xFFFF_FFFF
    /// A message whose continuation packets stop for this long is abandoned with MSG_TIMEOUT.
    public static let transactionTimeout: Duration = .milliseconds(500)

    /// CTAPHID commands (without the 0x80 init-packet bit).
    public enum Command: UInt8, Sendable {
        case ping = 0x01, msg = 0x03, lock = 0x04, initialize = 0x06, wink = 0x08, cbor = 0x10, cancel = 0x11
        case keepalive = 0x3B, error = 0x3F
    }

    /// CTAPHID_ERROR codes.
    public enum ErrorCode: UInt8, Sendable {
        case invalidCommand = 0x01, invalidParameter = 0x02, invalidLength = 0x03, invalidSequence = 0x04
        case messageTimeout = 0x05, channelBusy = 0x06, lockRequired = 0x0A, invalidChannel = 0x0B, other = 0x7F
    }

    /// CTAPHID_KEEPALIVE status.
    public enum KeepaliveStatus: UInt8, Sendable {
        case processing = 1, userPresenceNeeded = 2
    }

    /// Capability flags in the INIT response: WINK and CBOR; NMSG (no CTAP1/U2F MSG).
    public static let capabilities: UInt8 = 0x01 | 0x04 | 0x08

    /// A message longer than `maxMessageSize` cannot be framed.
    public struct MessageTooLarge: Error, Sendable, Equatable {
        public let size: Int
    }

    /// Splits one message into 64-byte reports (zero-padded); MessageTooLarge beyond `maxMessageSize` bytes.
    public static func packets(channel: UInt32, command: Command, payload: [UInt8]) throws(MessageTooLarge)
        -> [[UInt8]]
    {
        guard payload.count <= maxMessageSize else { throw MessageTooLarge(size: payload.count) }
        return frames(channel: channel, command: command, payload: payload)
    }

    /// `packets` of a payload known to fit (the device's own short answers and echoes of what it received).
    static func frames(channel: UInt32, command: Command, payload: [UInt8]) -> [[UInt8]] {
        let length = min(payload.count, maxMessageSize)
        var out: [[UInt8]] = []
        var first = channelBytes(channel) + [0x80 | command.rawValue, UInt8(length >> 8), UInt8(length & 0xFF)]
        first += payload.prefix(initPayload)
        out.append(padded(first))
        var offset = min(length, initPayload)
        var sequence: UInt8 = 0
        while offset < length {
            let end = min(offset + continuationPayload, length)
            out.append(padded(channelBytes(channel) + [sequence] + payload[offset..<end]))
            offset = end
            sequence &+= 1
        }
        return out
    }

    static func channelBytes(_ c: UInt32) -> [UInt8] {
        [UInt8(c >> 24), UInt8(c >> 16 & 0xFF), UInt8(c >> 8 & 0xFF), UInt8(c & 0xFF)]
    }

    static func padded(_ bytes: [UInt8]) -> [UInt8] {
        bytes + [UInt8](repeating: 0, count: reportSize - bytes.count)
    }
}

/// What the device wants done after a report or a tick.
public enum CTAPHIDAction: Sendable, Equatable {
    /// Send these reports to the client `owner`.
    case send(owner: UInt64, reports: [[UInt8]])
    /// A complete CBOR request on `channel` for the authenticator; answer it with `CTAPHIDDevice.finish`.
    case dispatch(owner: UInt64, channel: UInt32, payload: [UInt8])
    /// The running request on `channel` was cancelled (CTAPHID_CANCEL or a re-INIT of its channel).
    case cancel(channel: UInt32)
}

/// The CTAPHID state machine of one authenticator shared by every client (owner) of its transport. A channel
/// belongs to the owner that allocated it; one transaction (being received or being processed) at a time. Owners
/// that `join` one quota group (the clients of one uid) share `maxChannelsPerGroup`: a group that allocates past
/// it loses its own oldest channel, and past `maxChannels` in all the group holding the most loses its oldest, so
/// one group's INIT flood never takes another's channels.
public struct CTAPHIDDevice: Sendable {
    struct Assembly: Sendable {
        var channel: UInt32
        var owner: UInt64
        var command: CTAPHID.Command
        var expected: Int
        var data: [UInt8]
        var nextSequence: UInt8
        var deadline: ContinuousClock.Instant
    }

    /// Version numbers reported by INIT (major, minor, build).
    public var version: (UInt8, UInt8, UInt8) = (0, 1, 0)
    private var channels: [UInt32: UInt64] = [:]
    private var assembly: Assembly?
    /// The channel whose CBOR request the authenticator is processing.
    public private(set) var processing: (channel: UInt32, owner: UInt64)?
    private var randomChannel: @Sendable () -> UInt32
    /// Channels allocated at most (the oldest of the group holding the most is dropped beyond it).
    public var maxChannels = 1024
    /// Channels one quota group may hold (its oldest is dropped beyond it).
    public var maxChannelsPerGroup = 64
    private var allocationOrder: [UInt32] = []
    /// The quota group of each owner that joined one; an owner that did not is a group of its own.
    private var groups: [UInt64: UInt64] = [:]
    private var channelsPerGroup: [GroupKey: Int] = [:]

    private enum GroupKey: Hashable {
        case joined(UInt64)
        case alone(UInt64)
    }

    /// `randomChannel` draws new channel ids (never 0 or broadcast; duplicates are retried).
    public init(randomChannel: @escaping @Sendable () -> UInt32) {
        self.randomChannel = randomChannel
    }

    /// Puts `owner` in quota group `group` (e.g. its peer uid), before its first report.
    public mutating func join(owner: UInt64, group: UInt64) { groups[owner] = group }

    private func group(of owner: UInt64) -> GroupKey { groups[owner].map(GroupKey.joined) ?? .alone(owner) }

    /// Handles one report from `owner` received at `now`.
    public mutating func receive(_ report: [UInt8], from owner: UInt64, now: ContinuousClock.Instant) -> [CTAPHIDAction]
    {
        var actions = expire(now: now)
        guard report.count == CTAPHID.reportSize else { return actions }
        let channel = UInt32(report[0]) << 24 | UInt32(report[1]) << 16 | UInt32(report[2]) << 8 | UInt32(report[3])
        let kind = report[4]
        func error(_ code: CTAPHID.ErrorCode) -> CTAPHIDAction {
            .send(owner: owner, reports: CTAPHID.frames(channel: channel, command: .error, payload: [code.rawValue]))
        }
        if kind & 0x80 == 0 {
            // Continuation packet: only for the message being assembled on this channel; stray ones are ignored.
            guard var a = assembly, a.channel == channel, a.owner == owner else { return actions }
            guard kind == a.nextSequence else {
                assembly = nil
                return actions + [error(.invalidSequence)]
            }
            let take = min(CTAPHID.continuationPayload, a.expected - a.data.count)
            a.data += report[5..<5 + take]
            a.nextSequence += 1
            a.deadline = now + CTAPHID.transactionTimeout
            if a.data.count == a.expected {
                assembly = nil
                return actions + complete(a)
            }
            assembly = a
            return actions
        }
        guard let command = CTAPHID.Command(rawValue: kind & 0x7F) else {
            return actions + [channelValid(channel, owner) ? error(.invalidCommand) : error(.invalidChannel)]
        }
        let length = Int(report[5]) << 8 | Int(report[6])
        if channel == 0 || (channel == CTAPHID.broadcastChannel && command != .initialize)
            || (channel != CTAPHID.broadcastChannel && !channelValid(channel, owner))
        {
            return actions + [error(.invalidChannel)]
        }
        if command == .initialize {
            // INIT is always served; on an existing channel it abandons that channel's transaction (resync).
            guard length == 8 else { return actions + [error(.invalidLength)] }
            if let a = assembly, a.channel == channel { assembly = nil }
            if let p = processing, p.channel == channel {
                processing = nil
                actions.append(.cancel(channel: channel))
            }
            let nonce = Array(report[7..<15])
            let assigned = channel == CTAPHID.broadcastChannel ? allocate(owner) : channel
            let reply =
                nonce + CTAPHID.channelBytes(assigned)
                + [2, version.0, version.1, version.2, CTAPHID.capabilities]
            return actions + [
                .send(owner: owner, reports: CTAPHID.frames(channel: channel, command: .initialize, payload: reply))
            ]
        }
        if command == .cancel {
            // CANCEL needs no answer; it ends the processing request of its own channel only.
            if let p = processing, p.channel == channel {
                actions.append(.cancel(channel: channel))
            }
            return actions
        }
        if let a = assembly {
            return actions + [a.channel == channel ? abandon(a) : error(.channelBusy)]
        }
        if let p = processing {
            return actions + [error(p.channel == channel ? .invalidSequence : .channelBusy)]
        }
        guard length <= CTAPHID.maxMessageSize else { return actions + [error(.invalidLength)] }
        let take = min(length, CTAPHID.initPayload)
        let a = Assembly(
            channel: channel, owner: owner, command: command, expected: length, data: Array(report[7..<7 + take]),
            nextSequence: 0, deadline: now + CTAPHID.transactionTimeout)
        if take == length { return actions + complete(a) }
        assembly = a
        return actions
    }

    /// Ends a message whose continuation packets stopped coming (MSG_TIMEOUT to its channel).
    public mutating func expire(now: ContinuousClock.Instant) -> [CTAPHIDAction] {
        guard let a = assembly, now >= a.deadline else { return [] }
        assembly = nil
        return [
            .send(
                owner: a.owner,
                reports: CTAPHID.frames(
                    channel: a.channel, command: .error,
                    payload: [CTAPHID.ErrorCode.messageTimeout.rawValue]))
        ]
    }

    /// When `expire` has something to do next (nil: no message is being received).
    public var nextDeadline: ContinuousClock.Instant? { assembly?.deadline }

    /// The authenticator's answer to the request dispatched on `channel`: the reports for its owner, or nothing
    /// when the request was cancelled or its channel re-initialized meanwhile.
    public mutating func finish(channel: UInt32, response: [UInt8]) -> [CTAPHIDAction] {
        guard let p = processing, p.channel == channel else { return [] }
        processing = nil
        do {
            return [
                .send(owner: p.owner, reports: try CTAPHID.packets(channel: channel, command: .cbor, payload: response))
            ]
        } catch {
            // An answer CTAPHID cannot carry: CTAP1_ERR_OTHER instead.
            return [.send(owner: p.owner, reports: CTAPHID.frames(channel: channel, command: .cbor, payload: [0x7F]))]
        }
    }

    /// A KEEPALIVE report for the request in processing, if any.
    public func keepalive(_ status: CTAPHID.KeepaliveStatus) -> CTAPHIDAction? {
        guard let p = processing else { return nil }
        return .send(
            owner: p.owner,
            reports: CTAPHID.frames(channel: p.channel, command: .keepalive, payload: [status.rawValue]))
    }

    /// Forgets the channels of a client that went away (its running request is cancelled).
    public mutating func disconnected(_ owner: UInt64) -> [CTAPHIDAction] {
        var actions: [CTAPHIDAction] = []
        if let a = assembly, a.owner == owner { assembly = nil }
        if let p = processing, p.owner == owner {
            processing = nil
            actions.append(.cancel(channel: p.channel))
        }
        channels = channels.filter { $0.value != owner }
        allocationOrder.removeAll { channels[$0] == nil }
        groups[owner] = nil
        channelsPerGroup = [:]
        for owner in channels.values { channelsPerGroup[group(of: owner), default: 0] += 1 }
        return actions
    }

    private func channelValid(_ channel: UInt32, _ owner: UInt64) -> Bool { channels[channel] == owner }

    private mutating func abandon(_ a: Assembly) -> CTAPHIDAction {
        assembly = nil
        return .send(
            owner: a.owner,
            reports: CTAPHID.frames(
                channel: a.channel, command: .error,
                payload: [CTAPHID.ErrorCode.invalidSequence.rawValue]))
    }

    private mutating func allocate(_ owner: UInt64) -> UInt32 {
        let mine = group(of: owner)
        if channelsPerGroup[mine, default: 0] >= maxChannelsPerGroup {
            dropOldestChannel(of: mine)
        } else if allocationOrder.count >= maxChannels,
            let largest = channelsPerGroup.max(by: { $0.value < $1.value })?.key
        {
            dropOldestChannel(of: largest)
        }
        var c: UInt32
        repeat { c = randomChannel() } while c == 0 || c == CTAPHID.broadcastChannel || channels[c] != nil
        channels[c] = owner
        allocationOrder.append(c)
        channelsPerGroup[mine, default: 0] += 1
        return c
    }

    private mutating func dropOldestChannel(of group: GroupKey) {
        guard
            let index = allocationOrder.firstIndex(where: { channels[$0].map(self.group(of:)) == group })
        else { return }
        channels[allocationOrder.remove(at: index)] = nil
        let left = channelsPerGroup[group, default: 1] - 1
        channelsPerGroup[group] = left > 0 ? left : nil
    }

    private mutating func complete(_ a: Assembly) -> [CTAPHIDAction] {
        func reply(_ command: CTAPHID.Command, _ payload: [UInt8]) -> [CTAPHIDAction] {
            [.send(owner: a.owner, reports: CTAPHID.frames(channel: a.channel, command: command, payload: payload))]
        }
        switch a.command {
        case .ping: return reply(.ping, a.data)
        case .wink: return a.data.isEmpty ? reply(.wink, []) : reply(.error, [CTAPHID.ErrorCode.invalidLength.rawValue])
        case .cbor:
            guard !a.data.isEmpty else { return reply(.error, [CTAPHID.ErrorCode.invalidLength.rawValue]) }
            processing = (a.channel, a.owner)
            return [.dispatch(owner: a.owner, channel: a.channel, payload: a.data)]
        case .msg, .lock, .keepalive, .error, .initialize, .cancel:
            return reply(.error, [CTAPHID.ErrorCode.invalidCommand.rawValue])
        }
    }
}
