import CredentialStore
import KeyStores
import MDoc
import MDocHolderDoor
import Presence
import TesseraCore
import Testing

/// The consent desk on a real `PresenceBroker` (no command, no socket answers: only the door's `mdoc.approve`
/// answers) and a real holder service (SoftHSM2 device key, test reader PKI).
@Suite struct MDocConsentDeskTests {
    struct Setup {
        let h: HolderHarness
        let desk: MDocConsentDesk
        let registration: MDocRegistrationRecord
        let sessionTranscript: SessionTranscript
        let deviceRequest: DeviceRequest

        static func make(uid: UInt32) async throws -> Setup {
            let h = try await HolderHarness.make()
            let broker = PresenceBroker(
                PresenceSettings(command: nil, timeout: .seconds(1), confirmOnSocket: false), logger: quietLogger)
            let t = try transcript()
            return Setup(
                h: h, desk: MDocConsentDesk(service: h.service, presence: broker),
                registration: try await h.register(uid: uid), sessionTranscript: t,
                deviceRequest: try request(signer: h.readerSigner, chain: [h.readerSigner.certificate.der], over: t))
        }

        func respond(id: String, uid: UInt32, timeout: Duration, announced: Locked<[JSONValue]>)
            async throws(TesseraError) -> MDocHolderResponse
        {
            try await desk.respond(
                presentationId: id, registration: registration, request: deviceRequest,
                sessionTranscript: sessionTranscript,
                uid: uid, pid: 1, session: "session-\(id)", timeout: timeout
            ) { params in announced.withLock { $0.append(params) } }
        }
    }

    /// Waits (at most 10 s) until the desk announced a question.
    static func waitForAnnouncement(_ announced: Locked<[JSONValue]>) async throws {
        for _ in 0..<200 where announced.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(50)) }
        try #require(announced.withLock { $0.count } == 1)
    }

    /// The question waits on the broker and is announced with its presentationId; another uid's approval is
    /// UNAUTHORIZED and leaves it waiting; the owner's approval with one element releases exactly that element, and
    /// `approve` returns the same released elements as the presentation.
    @Test func theOwnersApprovalReleasesTheChosenElements() async throws {
        let s = try await Setup.make(uid: 1000)
        let announced = Locked<[JSONValue]>([])
        let answering = Task { try await s.respond(id: "p-1", uid: 1000, timeout: .seconds(30), announced: announced) }
        try await Self.waitForAnnouncement(announced)
        #expect(announced.withLock { $0.first?["presentationId"]?.stringValue } == "p-1")

        var consent = MDocConsent(approved: true)
        consent.elements = ["\(MDL.namespace)/given_name"]
        consent.caller = PINCaller(uid: 1000, pid: 1)
        do {
            _ = try await s.desk.approve(presentationId: "p-1", consent: consent, uid: 1001, isAdmin: false)
            Issue.record("uid 1001 approved uid 1000's presentation")
        } catch { #expect(error.code == .unauthorized) }

        let released = try await s.desk.approve(presentationId: "p-1", consent: consent, uid: 1000, isAdmin: false)
        let response = try await answering.value
        #expect(released == ["\(MDL.namespace)/given_name"])
        #expect(response.released == released)
        do {
            _ = try await s.desk.approve(presentationId: "p-1", consent: consent, uid: 1000, isAdmin: false)
            Issue.record("an answered presentation was approved again")
        } catch { #expect(error.code == .mdocPresentationNotPending) }
    }

    /// A question nobody answers within its timeout refuses the presentation (reason `timeout`), and a decline
    /// through `approve` refuses it (reason `declined`) while `approve` returns no elements.
    @Test func unansweredOrDeclinedQuestionsReleaseNothing() async throws {
        let s = try await Setup.make(uid: 1000)
        let silent = Locked<[JSONValue]>([])
        do {
            _ = try await s.respond(id: "p-timeout", uid: 1000, timeout: .milliseconds(300), announced: silent)
            Issue.record("an unanswered question released elements")
        } catch { #expect(error.details["reason"]?.stringValue == "timeout") }

        let announced = Locked<[JSONValue]>([])
        let answering = Task { try await s.respond(id: "p-2", uid: 1000, timeout: .seconds(30), announced: announced) }
        try await Self.waitForAnnouncement(announced)
        let released = try await s.desk.approve(
            presentationId: "p-2", consent: MDocConsent(approved: false), uid: 1000, isAdmin: false)
        #expect(released.isEmpty)
        do {
            _ = try await answering.value
            Issue.record("a declined presentation released elements")
        } catch let error as TesseraError { #expect(error.details["reason"]?.stringValue == "declined") }
    }
}
