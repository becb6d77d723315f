import CTAPHID
import RPC
import TesseraCore
import Testing

@testable import CTAPAuthenticator

@Suite("CTAPHID hub")
struct CTAPHIDHubTests {
    /// One client of the hub: what it receives.
    final class Client: Sendable {
        let received = Locked<[[UInt8]]>([])
        let owner: UInt64
        let hub: CTAPHIDHub

        init(hub: CTAPHIDHub, uid: UInt32) async {
            self.hub = hub
            let received = self.received
            owner = await hub.add(
                CTAPHIDHub.Connection(
                    peer: PeerCredentials(pid: 1, uid: uid, gid: uid),
                    send: { reports in received.withLock { $0 += reports } }, shutdown: {}))
        }

        /// Sends one message and returns the reports it was answered with.
        func send(_ channel: UInt32, _ command: CTAPHID.Command, _ payload: [UInt8]) async throws -> [[UInt8]] {
            received.withLock { $0 = [] }
            for report in try CTAPHID.packets(channel: channel, command: command, payload: payload) {
                await hub.receive(report, from: owner)
            }
            return received.current
        }

        /// CTAPHID_INIT on the broadcast channel: the channel allocated.
        func allocate() async throws -> UInt32 {
            let nonce: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
            let answer = try #require(try await send(CTAPHID.broadcastChannel, .initialize, nonce).first)
            #expect(answer[4] == 0x80 | CTAPHID.Command.initialize.rawValue && Array(answer[7..<15]) == nonce)
            return answer[15..<19].reduce(0) { $0 << 8 | UInt32($1) }
        }
    }

    @Test func theChannelQuotaIsPerUidOverAllItsConnections() async throws {
        let h = try await CTAPHarness.make()
        let hub = CTAPHIDHub.passkeyAuthenticator(
            passkeys: h.service, presence: h.presence, access: h.access, tokenId: h.token.id, clientPIN: false,
            logger: quietLogger)
        let first = await Client(hub: hub, uid: 1000)
        let flooding = await Client(hub: hub, uid: 1000)
        let other = await Client(hub: hub, uid: 1001)
        let firstChannel = try await first.allocate()
        let otherChannel = try await other.allocate()
        // uid 1000 allocates its quota's worth again from a second connection.
        for _ in 0..<64 { _ = try await flooding.allocate() }
        let ping: [UInt8] = [0xAB, 0xCD]
        // The other uid's channel is untouched.
        let pong = try #require(try await other.send(otherChannel, .ping, ping).first)
        #expect(pong[4] == 0x80 | CTAPHID.Command.ping.rawValue && Array(pong[7..<9]) == ping)
        // uid 1000's oldest channel, on its first connection, went to its own flood.
        let lost = try #require(try await first.send(firstChannel, .ping, ping).first)
        #expect(lost[4] == 0x80 | CTAPHID.Command.error.rawValue)
        #expect(lost[7] == CTAPHID.ErrorCode.invalidChannel.rawValue)
        await hub.shutdownAll()
    }
}
