import FoundationEssentials
import Logging
import Pinentry
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The front door a presence question comes from.
public enum PresenceDoor: String, Sendable {
    /// CTAP user presence (makeCredential, getAssertion, selection).
    case ctap
    /// A signature with an SSH `confirm` key (or a token unlocked with `ssh-add -c -s`).
    case ssh
    /// The release of mdoc elements to a reader.
    case mdoc
}

/// One question for the user: who asks, through which door, what for.
public struct PresenceQuestion: Sendable {
    public var door: PresenceDoor
    /// The requesting client's uid; nil when the door knows none (the uhid device): then only an admin answers.
    public var uid: UInt32?
    public var pid: Int32?
    /// What is asked (rpId and operation, key and `forwarded`, document and elements…): given to the command, listed
    /// by `presence.list` and sent with the `presence.request` notification.
    public var details: [String: JSONValue]
    /// How long to wait (default and upper bound: the configured timeout; a question `answeredByDoor` waits its own).
    public var timeout: Duration?
    /// The door's own name for the question (mdoc: the presentationId), for `answer(key:…)`.
    public var key: String?
    /// The door session the question belongs to: `end(group:)` ends its questions, now and later.
    public var group: String?
    /// Whether the door's own method answers it too (`mdoc.approve`, through `answer(key:…)`): then it is asked even
    /// without a presence source, and a command that does not answer in time leaves it waiting.
    public var answeredByDoor: Bool
    /// Runs once the question waits and can be answered (a door's own notification to the user).
    public var onPending: (@Sendable (UInt64) async -> Void)?

    public init(
        door: PresenceDoor, uid: UInt32?, pid: Int32? = nil, details: [String: JSONValue] = [:],
        timeout: Duration? = nil, key: String? = nil, group: String? = nil, answeredByDoor: Bool = false,
        onPending: (@Sendable (UInt64) async -> Void)? = nil
    ) {
        self.door = door; self.uid = uid; self.pid = pid; self.details = details; self.timeout = timeout
        self.key = key; self.group = group; self.answeredByDoor = answeredByDoor; self.onPending = onPending
    }
}

/// An answer with what the door's own method gave with it (`mdoc.approve`'s consent; nil for the command and
/// `presence.confirm`/`presence.deny`).
public struct PresenceReply: Sendable {
    public var answer: PresenceAnswer
    public var payload: (any Sendable)?

    public init(_ answer: PresenceAnswer, payload: (any Sendable)? = nil) {
        self.answer = answer; self.payload = payload
    }
}

/// What `answer(key:…)` did.
public enum PresenceKeyedAnswer: Sendable, Equatable {
    case answered
    /// No waiting question has this key.
    case notPending
    /// The question is another uid's.
    case notYours
}

/// How a question ended.
public enum PresenceAnswer: String, Sendable, Equatable {
    case confirmed, denied, timedOut, cancelled
}

/// The `presence` configuration section.
public struct PresenceSettings: Sendable {
    /// Program (argv) asked first: the question as JSON on stdin, exit 0 = confirm, another status = deny.
    public var command: [String]?
    /// A pinentry asked with CONFIRM (OK = confirm, Cancel = deny), on the asking client's terminal when the daemon
    /// runs as the client's uid, else on the daemon's display (`presence.pinentry`).
    public var pinentry: Pinentry?
    /// Longest wait for an answer.
    public var timeout: Duration
    /// Whether `presence.confirm` / `presence.deny` on the JSON-RPC socket may answer (same uid or an admin).
    public var confirmOnSocket: Bool
    /// Questions one uid may have waiting at once; more are refused with `BUSY`.
    public var maxPendingPerUid: Int

    public init(
        command: [String]?, pinentry: Pinentry? = nil, timeout: Duration, confirmOnSocket: Bool,
        maxPendingPerUid: Int = 8
    ) {
        self.command = command?.isEmpty == true ? nil : command
        self.pinentry = pinentry
        self.timeout = timeout; self.confirmOnSocket = confirmOnSocket
        self.maxPendingPerUid = max(1, maxPendingPerUid)
    }
}

/// A notification for the clients of one uid (and admins): `presence.request` when a question starts waiting,
/// `presence.resolved` when it ends.
public struct PresenceEvent: Sendable {
    public var method: String
    public var uid: UInt32?
    public var params: JSONValue
}

/// The one consent mechanism of every front door: a question is answered by the configured command or, with
/// `confirmOnSocket`, by `presence.confirm`/`presence.deny` from the asking uid or an admin, whichever comes first;
/// after its timeout it is `timedOut`, and when the asking task is cancelled `cancelled`.
public actor PresenceBroker {
    private struct Pending {
        var question: PresenceQuestion
        var since: Date
        var continuation: CheckedContinuation<PresenceReply, Never>
        var tasks: [Task<Void, Never>]
    }

    public nonisolated let settings: PresenceSettings
    private let logger: Logger
    private let notify: @Sendable (PresenceEvent) async -> Void
    private var pending: [UInt64: Pending] = [:]
    private var nextID: UInt64 = 1
    private var notifying: Task<Void, Never>?
    private var endedGroups: Set<String> = []

    public init(
        _ settings: PresenceSettings, logger: Logger,
        notify: @escaping @Sendable (PresenceEvent) async -> Void = { _ in }
    ) {
        self.settings = settings; self.logger = logger; self.notify = notify
    }

    /// Whether anything can answer (a command, a pinentry, or `confirmOnSocket`).
    public nonisolated var hasSource: Bool {
        settings.command != nil || settings.pinentry != nil || settings.confirmOnSocket
    }

    /// Asks the user and waits for the answer. Without a source the answer is `denied` (logged with the setting
    /// to add). Throws `BUSY` (retryable) when the uid already has `maxPendingPerUid` questions waiting.
    public func ask(_ question: PresenceQuestion) async throws(TesseraError) -> PresenceAnswer {
        try await reply(question).answer
    }

    /// `ask`, with what the door's own answer carried.
    public func reply(_ question: PresenceQuestion) async throws(TesseraError) -> PresenceReply {
        guard hasSource || question.answeredByDoor else {
            logger.warning(
                """
                presence: a \(question.door.rawValue) request needs the user's presence and no presence source is \
                configured: set presence.command (a program that confirms with exit status 0), \
                presence.pinentry: true or presence.confirmOnSocket: true (then answer with presence.confirm on the main socket)
                """)
            return PresenceReply(.denied)
        }
        if let group = question.group, endedGroups.contains(group) { return PresenceReply(.cancelled) }
        let waiting = pending.values.filter { $0.question.uid == question.uid }.count
        guard waiting < settings.maxPendingPerUid else {
            throw TesseraError(
                .busy,
                "uid \(question.uid.map(String.init) ?? "unknown") already has \(waiting) presence requests waiting",
                details: ["limit": .number(Double(settings.maxPendingPerUid))])
        }
        let id = nextID
        nextID += 1
        let timeout =
            question.answeredByDoor
            ? question.timeout ?? settings.timeout : min(question.timeout ?? settings.timeout, settings.timeout)
        let commandTimeout = min(timeout, settings.timeout)
        let since = Date()
        let reply = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<PresenceReply, Never>) in
                guard !Task.isCancelled else { return continuation.resume(returning: PresenceReply(.cancelled)) }
                var tasks: [Task<Void, Never>] = [
                    Task { [weak self] in
                        try? await Task.sleep(for: timeout)
                        await self?.resolve(id, .timedOut)
                    }
                ]
                if let command = settings.command {
                    let input = Self.describe(id, question, since: since, timeout: timeout).serialized()
                    let logger = self.logger
                    let othersAnswer = settings.confirmOnSocket || question.answeredByDoor
                    tasks.append(
                        Task { [weak self] in
                            let answer: PresenceAnswer?
                            do {
                                switch try await ProgramRunner.run(command, input: input, timeout: commandTimeout) {
                                case .exited(0): answer = .confirmed
                                case .exited(let status):
                                    logger.notice("presence: command denied request \(id) (exit status \(status))")
                                    answer = .denied
                                case .timedOut:
                                    logger.notice(
                                        "presence: command timed out after \(commandTimeout) (request \(id))")
                                    answer = question.answeredByDoor ? nil : .timedOut
                                }
                            } catch {
                                logger.error("presence: command: \(error)")
                                answer = othersAnswer ? nil : .denied
                            }
                            if let answer { await self?.resolve(id, answer) }
                        })
                }
                if let pinentry = settings.pinentry {
                    let logger = self.logger
                    let othersAnswer = settings.command != nil || settings.confirmOnSocket || question.answeredByDoor
                    tasks.append(
                        Task { [weak self] in
                            let answer = await Self.askPinentry(
                                pinentry, id: id, question, timeout: commandTimeout, othersAnswer: othersAnswer,
                                logger: logger)
                            if let answer { await self?.resolve(id, answer) }
                        })
                }
                pending[id] = Pending(question: question, since: since, continuation: continuation, tasks: tasks)
                if let onPending = question.onPending { Task { await onPending(id) } }
                send(
                    PresenceEvent(
                        method: "presence.request", uid: question.uid,
                        params: Self.describe(id, question, since: since, timeout: timeout)))
            }
        } onCancel: {
            Task { await self.resolve(id, .cancelled) }
        }
        let answer = reply.answer
        let who = "presence: \(question.door.rawValue) request \(id) of uid \(question.uid.map(String.init) ?? "-")"
        switch answer {
        case .confirmed: logger.info("\(who): confirmed")
        case .denied: logger.notice("\(who): denied")
        case .timedOut: logger.notice("\(who): timed out after \(timeout)")
        case .cancelled: logger.info("\(who): cancelled")
        }
        return reply
    }

    private func resolve(_ id: UInt64, _ answer: PresenceAnswer, payload: (any Sendable)? = nil) {
        guard let p = pending.removeValue(forKey: id) else { return }
        for t in p.tasks { t.cancel() }
        p.continuation.resume(returning: PresenceReply(answer, payload: payload))
        send(
            PresenceEvent(
                method: "presence.resolved", uid: p.question.uid,
                params: ["requestId": .number(Double(id)), "answer": .string(answer.rawValue)]))
    }

    /// Sends notifications one after the other, in the order of the events (a request before its resolution).
    private func send(_ event: PresenceEvent) {
        let previous = notifying, notify = self.notify
        notifying = Task {
            await previous?.value
            await notify(event)
        }
    }

    /// `presence.confirm` / `presence.deny`: answers `requestId` for `uid`; a question is answerable by its own uid,
    /// or by an admin. Without `requestId` it answers the caller's own oldest waiting question (an admin's: of its own
    /// uid or of no uid, never another uid's, which it names by `requestId`). `PRESENCE_NOT_PENDING` when there is no
    /// such question or `confirmOnSocket` is off.
    public func answer(_ requestId: UInt64?, confirm: Bool, uid: UInt32, isAdmin: Bool) throws(TesseraError)
        -> UInt64
    {
        guard settings.confirmOnSocket else {
            throw TesseraError(
                .presenceNotPending, "answers on the socket are off: set presence.confirmOnSocket: true")
        }
        let mine = pending.filter { Self.may(uid: uid, isAdmin: isAdmin, answer: $0.value.question) }
        let own = mine.filter { $0.value.question.uid == uid || $0.value.question.uid == nil }
        guard let id = requestId ?? own.keys.min(), mine[id] != nil else {
            throw TesseraError(.presenceNotPending, "no presence request of uid \(uid) is waiting")
        }
        resolve(id, confirm ? .confirmed : .denied)
        return id
    }

    /// The door's own answer (`mdoc.approve`) to the question named `key`, with what it carries; from its uid or an
    /// admin, whether or not `confirmOnSocket` is on.
    public func answer(
        key: String, confirm: Bool, payload: (any Sendable)?, uid: UInt32, isAdmin: Bool
    ) -> PresenceKeyedAnswer {
        guard let (id, p) = pending.first(where: { $0.value.question.key == key }) else { return .notPending }
        guard Self.may(uid: uid, isAdmin: isAdmin, answer: p.question) else { return .notYours }
        resolve(id, confirm ? .confirmed : .denied, payload: payload)
        return .answered
    }

    /// Ends the questions of a door session (`cancelled`), and those it asks later, until `forget(group:)`.
    public func end(group: String) {
        endedGroups.insert(group)
        for (id, p) in pending where p.question.group == group { resolve(id, .cancelled) }
    }

    /// Forgets an ended door session.
    public func forget(group: String) { endedGroups.remove(group) }

    /// The waiting questions `uid` may answer, oldest first.
    public func list(uid: UInt32, isAdmin: Bool) -> [JSONValue] {
        pending.filter { Self.may(uid: uid, isAdmin: isAdmin, answer: $0.value.question) }.sorted { $0.key < $1.key }
            .map { id, p in Self.describe(id, p.question, since: p.since, timeout: nil) }
    }

    /// Whether a `presence.request` notification about a question of `owner` goes to a client of `uid`.
    public nonisolated static func sees(uid: UInt32, isAdmin: Bool, owner: UInt32?) -> Bool {
        isAdmin || (owner != nil && owner == uid)
    }

    private static func may(uid: UInt32, isAdmin: Bool, answer question: PresenceQuestion) -> Bool {
        sees(uid: uid, isAdmin: isAdmin, owner: question.uid)
    }

    /// A pinentry CONFIRM for question `id`: OK confirms, Cancel denies; nil (leave it to the other sources) when the
    /// pinentry cannot be run and another source can answer, or when it timed out on a question its door answers.
    private static func askPinentry(
        _ pinentry: Pinentry, id: UInt64, _ question: PresenceQuestion, timeout: Duration, othersAnswer: Bool,
        logger: Logger
    ) async -> PresenceAnswer? {
        var dialog = pinentry
        dialog.timeout = timeout
        do throws(TesseraError) {
            switch try await dialog.confirm(prompt(question)) {
            case .confirmed: return .confirmed
            case .cancelled:
                if Task.isCancelled { return nil }
                logger.notice("presence: pinentry denied request \(id)")
                return .denied
            case .timedOut:
                logger.notice("presence: pinentry timed out after \(timeout) (request \(id))")
                return question.answeredByDoor ? nil : .timedOut
            case .pin: return .denied
            }
        } catch {
            logger.error("presence: pinentry: \(error)")
            return othersAnswer ? nil : .denied
        }
    }

    /// What the pinentry shows for a question: the door, what is asked, and the client.
    static func prompt(_ q: PresenceQuestion) -> PinentryPrompt {
        let what: String
        switch q.door {
        case .ctap:
            let operation = q.details["operation"]?.stringValue ?? "a passkey operation"
            let rp = q.details["rpId"]?.stringValue.map { " for \($0)" } ?? ""
            what = "Passkey: \(operation)\(rp)"
        case .ssh:
            let key = q.details["key"]?.stringValue.map { "\n\($0)" } ?? ""
            let forwarded = q.details["forwarded"]?.boolValue == true ? " (through a forwarded agent)" : ""
            what = "SSH signature\(forwarded) with the key\(key)"
        case .mdoc:
            what = "Release mobile document elements to a reader"
        }
        let client = [q.uid.map { "uid \($0)" }, q.pid.map { "pid \($0)" }].compactMap { $0 }.joined(separator: " ")
        return PinentryPrompt(
            title: "Tessera: confirm",
            description: what + (client.isEmpty ? "" : "\nRequested by \(client).") + "\nAllow it?",
            ttyname: q.uid.flatMap { uid in q.pid.flatMap { Pinentry.clientTerminal(pid: $0, uid: uid) } },
            ok: "_Allow", cancel: "_Deny")
    }

    /// The question as JSON: its details, then `requestId`, `door`, `uid`, `pid`, `since` and `timeoutSeconds`.
    static func describe(_ id: UInt64, _ q: PresenceQuestion, since: Date, timeout: Duration?) -> JSONValue {
        var o = q.details
        o["requestId"] = .number(Double(id))
        o["door"] = .string(q.door.rawValue)
        if let uid = q.uid { o["uid"] = .number(Double(uid)) }
        if let pid = q.pid { o["pid"] = .number(Double(pid)) }
        o["since"] = .string(since.iso8601Seconds)
        if let timeout { o["timeoutSeconds"] = .number(Double(timeout.components.seconds)) }
        return .object(o)
    }
}
