import CredentialStore
import FoundationEssentials
import KeyStores
import MDoc
import MDocHolderDoor
import Presence
import RPC
import TesseraCore

extension MethodTable {
    /// Registers the holder's methods (docs/API.md, "Mobile documents: holder"): `mdoc.createDeviceKey`,
    /// `mdoc.register`, `mdoc.registrations`, `mdoc.removeRegistration`, `mdoc.present`, `mdoc.respond`,
    /// `mdoc.approve` and `mdoc.stop`. `mdoc.request` goes to the presenting connection and to the station UI
    /// clients (`enrollment.subscribe`) of the same uid.
    func registerMDocHolder(
        _ service: MDocHolderService, subscribers: EnrollmentSubscribers, presence: PresenceBroker,
        devices: MDocPresentDevices = MDocPresentDevices(configured: [], nfcDevices: [])
    ) {
        let policy = self.policy
        let running = MDocPresentations()
        let desk = MDocConsentDesk(service: service, presence: presence)
        onClose { _ = running.stop(connection: $0.id) }
        register("mdoc.stop", .enroll) { p, connection in
            let stopped = running.stop(
                uid: connection.peer.uid, documentIdentifier: try p.optionalString("documentIdentifier"))
            for session in stopped { await presence.end(group: session) }
            return ["stopped": .number(Double(stopped.count))]
        }
        register("mdoc.createDeviceKey", .enroll) { p, connection in
            let made = try await service.createDeviceKey(
                tokenId: p.optionalString("tokenId"), uid: connection.peer.uid, pin: p.optionalString("pin"),
                caller: connection.pinCaller, allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false)
            return [
                "tokenId": .string(made.tokenId), "keyId": .string(Base64URL.encode(made.keyId)),
                "deviceKey": .string(Base64URL.encode(made.deviceKey.encoded)),
            ]
        }
        register("mdoc.register", .enroll) { p, connection in
            let documentIdentifier = try p.optionalString("documentIdentifier") ?? UUID().uuidString.lowercased()
            guard !documentIdentifier.isEmpty, documentIdentifier.utf8.count <= 256 else {
                throw TesseraError(
                    .invalidInput, "documentIdentifier must be 1 to 256 bytes", details: ["field": "documentIdentifier"]
                )
            }
            var identifiers: [[UInt8]] = []
            for item in try p.optionalArray("supportedAuthorityKeyIdentifiers") ?? [] {
                guard let text = item.stringValue, let bytes = Hex.decode(text), !bytes.isEmpty else {
                    throw TesseraError(
                        .invalidInput, "supportedAuthorityKeyIdentifiers must be hex strings",
                        details: ["field": "supportedAuthorityKeyIdentifiers"])
                }
                identifiers.append(bytes)
            }
            var invalidation: Date?
            if let text = try p.optionalString("invalidationDate") {
                guard let date = MDocDate.parse(text) else {
                    throw TesseraError(
                        .invalidInput, "invalidationDate must be RFC 3339", details: ["field": "invalidationDate"])
                }
                invalidation = date
            }
            let keyId = try p.bytes("keyId")
            let tokenId = try await service.passkeys.chooseToken(p.optionalString("tokenId")).id
            let record = try await service.register(
                documentIdentifier: documentIdentifier, docType: p.string("docType"),
                issuerSigned: p.bytes("issuerSigned"),
                tokenId: tokenId, keyId: keyId, supportedAuthorityKeyIdentifiers: identifiers,
                invalidationDate: invalidation, uid: connection.peer.uid,
                isAdmin: policy.grants(.admin, to: connection.peer))
            return MDocHolderViews.registration(record)
        }
        register("mdoc.registrations", .enroll) { _, connection in
            let all = policy.grants(.admin, to: connection.peer)
            let records = try await service.store.registrations(ownerUid: all ? nil : connection.peer.uid)
            return ["registrations": .array(records.map { MDocHolderViews.registration($0) })]
        }
        register("mdoc.removeRegistration", .enroll) { p, connection in
            let id = try p.string("documentIdentifier")
            _ = try await service.registration(
                id, uid: connection.peer.uid, isAdmin: policy.grants(.admin, to: connection.peer))
            return ["documentIdentifier": .string(id), "removed": .bool(try await service.store.delete(id))]
        }
        register("mdoc.approve", .enroll) { p, connection in
            let id = try p.string("presentationId")
            guard !id.isEmpty else {
                throw TesseraError(
                    .invalidInput, "presentationId must not be empty (the mdoc.request line names it)",
                    details: ["field": "presentationId"])
            }
            guard let approve = try p.optionalBool("approve") else {
                throw TesseraError(.invalidInput, "approve (true or false) is required", details: ["field": "approve"])
            }
            var consent = MDocConsent(approved: approve)
            if let items = try p.optionalArray("elements") {
                consent.elements = try items.map { item throws(TesseraError) -> String in
                    guard let text = item.stringValue, text.contains("/") else {
                        throw TesseraError(
                            .invalidInput, "elements items are \"namespace/identifier\" strings",
                            details: ["field": "elements"])
                    }
                    return text
                }
            }
            consent.pin = try p.optionalString("pin")
            consent.allowFinalPinTry = try p.optionalBool("allowFinalPinTry") ?? false
            consent.caller = connection.pinCaller
            let released = try await desk.approve(
                presentationId: id, consent: consent, uid: connection.peer.uid,
                isAdmin: policy.grants(.admin, to: connection.peer))
            return [
                "presentationId": .string(id), "approved": .bool(approve),
                "released": .array(released.map { .string($0) }),
            ]
        }
        register("mdoc.respond", .enroll) { p, connection in
            let uid = connection.peer.uid
            guard let data = p.value["request"], !data.isNull else {
                throw TesseraError(.invalidInput, "missing parameter 'request'", details: ["field": "request"])
            }
            let origin = try p.string("origin")
            let timeout = try MDocPresentRequest.approvalTimeoutSeconds(p)
            let request = try AnnexCRequest(json: data)
            let transcript = try request.sessionTranscript(origin: origin)
            let registration: MDocRegistrationRecord
            if let id = try p.optionalString("documentIdentifier") {
                registration = try await service.registration(id, uid: uid, isAdmin: false)
            } else {
                registration = try await service.registration(
                    for: request.deviceRequest, sessionTranscript: transcript, uid: uid)
            }
            let session = UUID().uuidString
            try running.add(
                session: session, uid: uid, connection: connection.id,
                documentIdentifier: registration.documentIdentifier)
            let outcome: Result<MDocHolderResponse, TesseraError>
            do throws(TesseraError) {
                outcome = .success(
                    try await desk.respond(
                        presentationId: UUID().uuidString.lowercased(), registration: registration,
                        request: request.deviceRequest, sessionTranscript: transcript, origin: origin,
                        uid: uid, pid: connection.peer.pid, session: session, timeout: .seconds(timeout),
                        announce: Self.announceRequest(to: connection, subscribers: subscribers)))
            } catch {
                outcome = .failure(error)
            }
            running.remove(session: session)
            await presence.forget(group: session)
            let response = try outcome.get()
            let sealed = try AnnexC.seal(
                deviceResponse: response.deviceResponse, encryptionInfo: request.encryptionInfo,
                sessionTranscript: transcript)
            return [
                "response": .string(Base64URL.encode(sealed.encoded)),
                "documentIdentifier": .string(registration.documentIdentifier),
                "released": .array(response.released.map { .string($0) }),
            ]
        }
        register("mdoc.present", .enroll) { p, connection in
            let request = try MDocPresentRequest(p)
            let uid = connection.peer.uid
            if !policy.grants(.admin, to: connection.peer) { try await devices.check(request.device) }
            let registration = try await service.registration(request.documentIdentifier, uid: uid, isAdmin: false)
            guard registration.offered(at: Date()) else {
                throw TesseraError(
                    .mdocNotOffered, "registration \(registration.documentIdentifier) has expired",
                    details: ["reason": "expired"])
            }
            let session = UUID().uuidString
            try running.add(
                session: session, uid: uid, connection: connection.id,
                documentIdentifier: registration.documentIdentifier)
            defer { running.remove(session: session) }
            let log = Locked<[JSONValue]>([])
            let delivery = MDocDelivery(
                outcomes: service.outcomes, documentIdentifier: registration.documentIdentifier,
                log: { entry in log.withLock { $0.append(entry) } },
                notify: { method, params in await connection.notify(method, params) })
            let holder = try MDocNFCHolder(
                responder: { deviceRequest, transcript in
                    let presentationId = UUID().uuidString.lowercased()
                    do throws(TesseraError) {
                        let response = try await desk.respond(
                            presentationId: presentationId, registration: registration, request: deviceRequest,
                            sessionTranscript: transcript, uid: uid, pid: connection.peer.pid, session: session,
                            timeout: .seconds(request.approvalTimeoutSeconds), finishesOutcome: false,
                            announce: Self.announceRequest(to: connection, subscribers: subscribers))
                        await delivery.made(presentationId, released: response.released)
                        return response.deviceResponse
                    } catch {
                        var entry: [String: JSONValue] = [
                            "presentationId": .string(presentationId), "outcome": "refused",
                            "code": .string(error.code.rawValue), "message": .string(error.message),
                        ]
                        if let reason = error.details["reason"] { entry["reason"] = reason }
                        log.withLock { $0.append(.object(entry)) }
                        entry["documentIdentifier"] = .string(registration.documentIdentifier)
                        await connection.notify("mdoc.refused", .object(entry))
                        return nil
                    }
                },
                delivered: { await delivery.delivered() })
            let started: JSONValue = [
                "documentIdentifier": .string(registration.documentIdentifier), "device": .string(request.device),
            ]
            let present = { () async throws(TesseraError) -> String in
                try await MDocPresentLoop.run(
                    holder: holder, on: request.target, for: .seconds(request.durationSeconds), presence: presence,
                    session: session, stopped: { running.stopped(session: session) },
                    started: { await connection.notify("mdoc.presenting", started) })
            }
            let reason: String
            do throws(TesseraError) {
                // A card in a pcscd reader: no key store may open that reader meanwhile (OpenSC would connect to it).
                if case .vpcd = request.target {
                    reason = try await service.passkeys.whilePresentingCard(present)
                } else {
                    reason = try await present()
                }
            } catch {
                await delivery.end(reason: "reader-gone")
                throw error
            }
            await delivery.end(reason: reason)
            await presence.forget(group: session)
            let presentations = log.withLock { $0 }
            return [
                "documentIdentifier": .string(registration.documentIdentifier), "device": .string(request.device),
                "reason": .string(reason), "requests": .number(Double(await holder.requests.count)),
                "presentations": .array(presentations),
            ]
        }
    }

    /// Sends a waiting question's `mdoc.request` notification to the calling connection and to the same uid's
    /// station UI clients.
    static func announceRequest(
        to connection: RPCConnection, subscribers: EnrollmentSubscribers
    ) -> @Sendable (JSONValue) async -> Void {
        { params in
            await connection.notify("mdoc.request", params)
            await subscribers.send("mdoc.request", params, toUid: connection.peer.uid, skipping: connection)
        }
    }
}

/// `mdoc.present` params: documentIdentifier, device (vpcd HOST:PORT or a libnfc connstring), durationSeconds?,
/// approvalTimeoutSeconds?.
struct MDocPresentRequest {
    var documentIdentifier: String
    var device: String
    var target: MDocPresentTarget
    var durationSeconds: Int
    var approvalTimeoutSeconds: Int

    init(_ p: Params) throws(TesseraError) {
        documentIdentifier = try p.string("documentIdentifier")
        device = try p.string("device")
        target = MDocPresentTarget(device: device)
        durationSeconds = try p.optionalInt("durationSeconds") ?? 120
        approvalTimeoutSeconds = try Self.approvalTimeoutSeconds(p)
        guard (1...86_400).contains(durationSeconds) else {
            throw TesseraError(.invalidInput, "durationSeconds must be 1…86400", details: ["field": "durationSeconds"])
        }
    }

    /// `approvalTimeoutSeconds?` of `mdoc.present` and `mdoc.respond`: 1…3600, default 60.
    static func approvalTimeoutSeconds(_ p: Params) throws(TesseraError) -> Int {
        let seconds = try p.optionalInt("approvalTimeoutSeconds") ?? 60
        guard (1...3_600).contains(seconds) else {
            throw TesseraError(
                .invalidInput, "approvalTimeoutSeconds must be 1…3600", details: ["field": "approvalTimeoutSeconds"])
        }
        return seconds
    }

}

/// Whether the response to an approved request reached the reader: `released` (the `mdoc.released` notification,
/// the `mdoc.approve` result) only once its last chunk went out; a response the reader never took (the card left
/// first, the presentation ended) is `undelivered` with CARD_REMOVED (`mdoc.undelivered`).
final class MDocDelivery: Sendable {
    private struct State {
        var made: (id: String, released: [String])?
        var ended: String?
    }
    private let state = Locked(State())
    let outcomes: MDocOutcomes
    let documentIdentifier: String
    let log: @Sendable (JSONValue) -> Void
    let notify: @Sendable (String, JSONValue) async -> Void

    init(
        outcomes: MDocOutcomes, documentIdentifier: String, log: @escaping @Sendable (JSONValue) -> Void,
        notify: @escaping @Sendable (String, JSONValue) async -> Void
    ) {
        self.outcomes = outcomes; self.documentIdentifier = documentIdentifier; self.log = log; self.notify = notify
    }

    /// The response to presentation `id` is made and goes to the reader.
    func made(_ id: String, released: [String]) async {
        let ended = state.withLock { s -> String? in
            if s.ended == nil { s.made = (id, released) }
            return s.ended
        }
        if let ended { await undelivered(id, released: released, reason: ended) }
    }

    /// The reader took the response's last chunk.
    func delivered() async {
        guard
            let made = state.withLock({ s in
                defer { s.made = nil }; return s.made
            })
        else { return }
        let entry: JSONValue = [
            "presentationId": .string(made.id), "outcome": "released",
            "elements": .array(made.released.map { .string($0) }),
        ]
        log(entry)
        await notify("mdoc.released", entry)
        await outcomes.finish(made.id, .success(made.released))
    }

    /// The presentation ended (`reason`): a response not taken by then never reaches the reader.
    func end(reason: String) async {
        let made = state.withLock { s in
            defer { s.made = nil; s.ended = reason }
            return s.made
        }
        if let made { await undelivered(made.id, released: made.released, reason: reason) }
    }

    private func undelivered(_ id: String, released: [String], reason: String) async {
        let error = TesseraError(
            .cardRemoved, "the reader did not take the response: the card left the reader first (\(reason))",
            details: ["reason": .string(reason), "presentationId": .string(id)])
        let entry: [String: JSONValue] = [
            "presentationId": .string(id), "outcome": "undelivered", "code": .string(error.code.rawValue),
            "message": .string(error.message), "reason": .string(reason),
            "elements": .array(released.map { .string($0) }),
        ]
        log(.object(entry))
        var note = entry
        note["documentIdentifier"] = .string(documentIdentifier)
        await notify("mdoc.undelivered", .object(note))
        await outcomes.finish(id, .failure(error))
    }
}

enum MDocHolderViews {
    static func registration(_ r: MDocRegistrationRecord, now: Date = Date()) -> JSONValue {
        var o: [String: JSONValue] = [
            "documentIdentifier": .string(r.documentIdentifier), "docType": .string(r.docType),
            "tokenId": .string(r.tokenId), "keyId": .string(Base64URL.encode(r.keyHandle)),
            "supportedAuthorityKeyIdentifiers": .array(r.authorityKeyIdentifiers.map { .string(Hex.encode($0)) }),
            "validUntil": .string(MDocDate.format(r.validUntil)), "ownerUid": .number(Double(r.ownerUid)),
            "createdAt": .string(MDocDate.format(r.createdAt)), "offered": .bool(r.offered(at: now)),
        ]
        if let d = r.invalidationDate { o["invalidationDate"] = .string(MDocDate.format(d)) }
        return .object(o)
    }
}
