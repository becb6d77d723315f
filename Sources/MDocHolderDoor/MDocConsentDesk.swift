import CredentialStore
import MDoc
import Presence
import TesseraCore
import TesseraRuntime

/// How both front doors answer one DeviceRequest: `MDocHolderService.respond`, with the user asked through the
/// presence broker (door `mdoc`, keyed by presentationId, grouped by the front door's session): once the question
/// waits, `announce` gets the `mdoc.request` notification's params (the daemon sends them to the calling connection
/// and to the same uid's station UI clients; with `origin` for an Annex C request); `mdoc.approve` (with the
/// elements and PIN it carries), the presence command or `presence.confirm`/`presence.deny` answer within
/// `timeout`. The outcome (released elements or the error) is also what the answering `mdoc.approve` returns; with
/// `finishesOutcome` false a response's outcome is the caller's to report (`MDocOutcomes.finish`) once the reader
/// took it.
public struct MDocConsentDesk: Sendable {
    public let service: MDocHolderService
    public let presence: PresenceBroker

    public init(service: MDocHolderService, presence: PresenceBroker) {
        self.service = service; self.presence = presence
    }

    /// Asks `uid` (process `pid`) about `request` and answers it with what they consented to.
    public func respond(
        presentationId: String, registration: MDocRegistrationRecord, request: DeviceRequest,
        sessionTranscript: SessionTranscript, origin: String? = nil, uid: UInt32, pid: Int32, session: String,
        timeout: Duration, finishesOutcome: Bool = true, announce: @escaping @Sendable (JSONValue) async -> Void
    ) async throws(TesseraError) -> MDocHolderResponse {
        let outcomes = service.outcomes
        let presence = self.presence
        do throws(TesseraError) {
            let response = try await service.respond(
                registration: registration, request: request, sessionTranscript: sessionTranscript, uid: uid
            ) { ask in
                let params = ask.json(presentationId: presentationId, origin: origin)
                let question = PresenceQuestion(
                    door: .mdoc, uid: uid, pid: pid, details: params.objectValue ?? [:],
                    timeout: timeout, key: presentationId, group: session, answeredByDoor: true
                ) { _ in
                    await announce(params)
                }
                let reply: PresenceReply
                do throws(TesseraError) { reply = try await presence.reply(question) } catch {
                    return .refused("busy")
                }
                switch reply.answer {
                case .confirmed: return reply.payload as? MDocConsent ?? MDocConsent(approved: true)
                case .denied: return reply.payload as? MDocConsent ?? .refused("declined")
                case .timedOut: return .refused("timeout")
                case .cancelled: return .refused("ended")
                }
            }
            await Failpoint.reach("mdoc.responseMade")
            if finishesOutcome { await outcomes.finish(presentationId, .success(response.released)) }
            return response
        } catch {
            await outcomes.finish(presentationId, .failure(error))
            throw error
        }
    }

    /// `mdoc.approve`: answers the question waiting for `presentationId` with `consent` (from `uid`, an admin
    /// answers any) and returns the presentation's outcome: the released elements, or none when `consent` refuses.
    /// MDOC_PRESENTATION_NOT_PENDING when nothing waits; UNAUTHORIZED when it is another uid's.
    public func approve(
        presentationId id: String, consent: MDocConsent, uid: UInt32, isAdmin: Bool
    ) async throws(TesseraError) -> [String] {
        let outcomes = service.outcomes
        let slot = await outcomes.expect(id)
        let answered = await presence.answer(
            key: id, confirm: consent.approved, payload: consent, uid: uid, isAdmin: isAdmin)
        switch answered {
        case .answered: break
        case .notPending:
            await outcomes.drop(id, slot)
            throw TesseraError(
                .mdocPresentationNotPending, "presentation \(id) is not waiting for approval",
                details: ["presentationId": .string(id)])
        case .notYours:
            await outcomes.drop(id, slot)
            throw TesseraError(.unauthorized, "presentation \(id) belongs to another uid")
        }
        let outcome = await outcomes.wait(id, slot)
        guard consent.approved else { return [] }
        return try outcome.get()
    }
}
