import CredentialStore
import Documents
import FoundationEssentials
import KeyStores
import MDoc
import MRZ
import Ownership
import Passkeys
import TesseraCore
import TesseraRuntime

/// The steps themselves: `begin` runs a step's daemon side (or asks for input), `handleInput` takes a submission.
extension EnrollmentEngine {
    func begin(_ step: WorkflowStep) async throws(TesseraError) -> StepResult {
        switch step.kind {
        case .emailInfo:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: "Email address",
                    input: Self.schema(["email": ["type": "string", "format": "email"]])))
        case .phoneInfo:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: "Mobile phone number in international format (+…)",
                    input: Self.schema(["phone": ["type": "string", "pattern": "^\\+[1-9][0-9 ().-]{1,20}$"]])))
        case .phoneOTP, .emailOTP:
            return try await beginOTP(step)
        case .nfcMRZ:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: "The document's machine readable zone (or its card access number)",
                    input: Self.mrzSchema))
        case .nfcPhase:
            return try await readDocument(step)
        case .mdocPhase:
            return try await readMDoc(step)
        case .attributeMatching:
            return try matchAttributes()
        case .passkeyCreation:
            return try await createPasskey(step, pin: nil)
        case .faceMatching, .livenessSession, .livenessPhase, .midSelfie:
            return try beginFaceStep(step)
        case .client:
            return .needsInput(
                StepRequest(
                    key: step.key, prompt: step.string("prompt") ?? step.key,
                    input: step.settings["input"] ?? ["type": "object"]))
        case .unsupported:
            throw TesseraError(.candidateUnavailable, "step \(step.key) cannot be performed on this station")
        }
    }

    func handleInput(_ step: WorkflowStep, payload: JSONValue, caller: PINCaller?) async throws(TesseraError)
        -> StepResult
    {
        let p = try Params(payload)
        switch step.kind {
        case .emailInfo:
            return .completed(["email": .string(try ContactValidation.emailAddress(p.string("email")))])
        case .phoneInfo:
            return .completed(["phone": .string(try ContactValidation.phoneNumber(p.string("phone")))])
        case .phoneOTP, .emailOTP:
            return try await checkOTP(step, p)
        case .nfcMRZ:
            return .completed(["documentAccess": try Self.documentAccess(p)])
        case .passkeyCreation:
            let pin = try p.string("pin")
            guard !pin.isEmpty else {
                throw TesseraError(.invalidInput, "pin must not be empty", details: ["field": "pin"])
            }
            return try await createPasskey(
                step, pin: pin, caller: caller,
                allowFinalPinTry: p.optionalBool("allowFinalPinTry") ?? false)
        case .client:
            if let required = step.settings["input"]?["required"]?.arrayValue {
                for name in required.compactMap(\.stringValue) where payload[name] == nil {
                    throw TesseraError(.invalidInput, "\(name) is required", details: ["field": .string(name)])
                }
            }
            var custom = row?.data["custom"]?.objectValue ?? [:]
            custom[step.key] = payload
            return .completed(["custom": .object(custom)])
        case .faceMatching, .livenessPhase, .midSelfie:
            return try await handleFaceInput(step, payload: payload)
        case .nfcPhase, .mdocPhase, .attributeMatching, .livenessSession, .unsupported:
            throw TesseraError(.stepNotExpected, "step \(step.key) takes no input")
        }
    }

    // MARK: one-time codes

    func beginOTP(_ step: WorkflowStep) async throws(TesseraError) -> StepResult {
        guard let row, let notifier = configuration.notifier else {
            throw TesseraError(.candidateUnavailable, "no OTP notifier is configured")
        }
        let isPhone = step.kind == .phoneOTP
        guard let to = row.data[isPhone ? "phone" : "email"]?.stringValue else {
            throw TesseraError(
                .internalError, "\(step.key) runs before the \(isPhone ? "phone number" : "email address") is known")
        }
        var state = row.stepState.objectValue ?? [:]
        let now = clock()
        // A code already delivered (e.g. before a daemon restart) stays valid: it is not sent again.
        if state["delivered"]?.boolValue == true, let stored = state["otp"].flatMap({ try? OneTimeCode(json: $0) }),
            stored.expiresAt > now, stored.attemptsLeft > 0
        {
            return .needsInput(otpRequest(step, to: to, stored: stored, resendsLeft: resendsLeft(state)))
        }
        return try await sendCode(step, to: to, notifier: notifier, state: &state, now: now)
    }

    private func sendCode(
        _ step: WorkflowStep, to: String, notifier: OTPNotifier, state: inout [String: JSONValue],
        now: Date
    ) async throws(TesseraError) -> StepResult {
        guard let row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        let (code, stored) = OneTimeCode.issue(
            ttl: configuration.otpTTL, attempts: configuration.otpAttempts, now: now,
            secret: secret)
        let sends = (state["sends"]?.intValue ?? 0) + 1
        state["otp"] = stored.json
        state["sends"] = .number(Double(sends))
        state["delivered"] = false
        // The code is recorded (as a MAC) before it leaves, so a crash never leaves an unknown code out there.
        try await saveStepState(.object(state))
        await emit("enrollment.busy", event(["expectedInterval": "short", "step": .string(step.key)]))
        let message: JSONValue = [
            "type": "otp", "channel": .string(step.kind == .phoneOTP ? "sms" : "email"), "to": .string(to),
            "code": .string(code), "enrollmentId": .string(row.id), "workflow": .string(row.workflow),
            "stepKey": .string(step.key), "expiresAt": .string(stored.expiresAt.iso8601Seconds),
        ]
        try await notifier.deliver(message, name: "\(row.id)-\(step.key)-\(sends)")
        state["delivered"] = true
        try await saveStepState(.object(state))
        logger.info("one-time code sent", metadata: ["enrollment": "\(row.id)", "step": "\(step.key)"])
        return .needsInput(otpRequest(step, to: to, stored: stored, resendsLeft: resendsLeft(state)))
    }

    private func resendsLeft(_ state: [String: JSONValue]) -> Int {
        max(0, configuration.otpMaxResends - (state["resends"]?.intValue ?? 0))
    }

    private func otpRequest(_ step: WorkflowStep, to: String, stored: OneTimeCode, resendsLeft: Int) -> StepRequest {
        let isPhone = step.kind == .phoneOTP
        let masked = isPhone ? ContactValidation.maskedPhone(to) : ContactValidation.maskedEmail(to)
        return StepRequest(
            key: step.key, prompt: "Enter the 6-digit code sent to \(masked)",
            input: [
                "type": "object",
                "properties": ["otp": ["type": "string", "pattern": "^[0-9]{6}$"], "resend": ["type": "boolean"]],
                "oneOf": [["required": ["otp"]], ["required": ["resend"]]],
            ],
            extra: [
                "to": .string(masked), "expiresAt": .string(stored.expiresAt.iso8601Seconds),
                "attemptsLeft": .number(Double(stored.attemptsLeft)), "resendsLeft": .number(Double(resendsLeft)),
            ])
    }

    func checkOTP(_ step: WorkflowStep, _ p: Params) async throws(TesseraError) -> StepResult {
        guard let row, let notifier = configuration.notifier else {
            throw TesseraError(.noActiveEnrollment, "there is no active enrollment")
        }
        var state = row.stepState.objectValue ?? [:]
        let now = clock()
        if try p.optionalBool("resend") == true {
            guard resendsLeft(state) > 0 else {
                throw TesseraError(.invalidInput, "no resends left for \(step.key)", details: ["field": "resend"])
            }
            state["resends"] = .number(Double((state["resends"]?.intValue ?? 0) + 1))
            let to = row.data[step.kind == .phoneOTP ? "phone" : "email"]?.stringValue ?? ""
            return try await sendCode(step, to: to, notifier: notifier, state: &state, now: now)
        }
        let submitted = try p.string("otp")
        guard let json = state["otp"] else { throw TesseraError(.otpExpired, "no code is outstanding for \(step.key)") }
        var stored = try OneTimeCode(json: json)
        do {
            try stored.verify(submitted, now: now, secret: secret)
        } catch {
            state["otp"] = stored.json
            // The spent attempt is durable before the caller hears about it.
            try await saveStepState(.object(state))
            throw error
        }
        return .completed([step.kind == .phoneOTP ? "phoneVerified" : "emailVerified": true])
    }

    // MARK: document

    static let mrzSchema: JSONValue = [
        "type": "object",
        "properties": [
            "mrz": ["type": "string", "description": "the 2 or 3 MRZ lines"],
            "documentNumber": ["type": "string"], "dateOfBirth": ["type": "string", "pattern": "^[0-9]{6}$"],
            "dateOfExpiry": ["type": "string", "pattern": "^[0-9]{6}$"],
            "can": ["type": "string", "pattern": "^[0-9]{6}$"],
        ],
        "oneOf": [
            ["required": ["mrz"]], ["required": ["documentNumber", "dateOfBirth", "dateOfExpiry"]],
            ["required": ["can"]],
        ],
    ]

    /// The access data kept for `NFC_PHASE`: `{mrzInformation}` or `{can}`.
    static func documentAccess(_ p: Params) throws(TesseraError) -> JSONValue {
        switch try DocumentAccessKey(params: p) {
        case .mrz(let info): return ["mrzInformation": .string(info)]
        case .can(let can): return ["can": .string(can)]
        }
    }

    func readDocument(_ step: WorkflowStep) async throws(TesseraError) -> StepResult {
        guard let access = row?.data["documentAccess"] else {
            throw TesseraError(.internalError, "NFC_PHASE runs before the document access data is known")
        }
        let key: DocumentAccessKey
        if let info = access["mrzInformation"]?.stringValue {
            key = .mrz(mrzInformation: info)
        } else {
            key = try DocumentAccessKey(can: access["can"]?.stringValue ?? "")
        }
        await emit("enrollment.busy", event(["expectedInterval": "long", "step": .string(step.key)]))
        let reader = try await waitForCard(
            step, reader: step.string("reader"),
            seconds: step.settings["cardWaitSeconds"]?.intValue ?? 60)
        let groups = (step.settings["dataGroups"]?.arrayValue ?? ["DG1", "DG2"])
            .compactMap { $0.stringValue.flatMap(EnrollmentConfiguration.dataGroupNumber) }
        let allowClonable = step.settings["allowClonable"]?.boolValue ?? false
        // `requirePassiveAuthentication: false` is the older spelling of `allowUnverified: true`.
        let allowUnverified =
            step.settings["allowUnverified"]?.boolValue
            ?? (step.settings["requirePassiveAuthentication"]?.boolValue == false)
        let result = try await forwardingProgress(of: step) { report async throws(TesseraError) in
            try await documents.read(
                DocumentReadRequest(
                    reader: reader, key: key, dataGroups: groups, verify: true,
                    allowClonable: allowClonable)
            ) { report($0.json) }
        }
        let pa = result.passiveAuthentication?.status.rawValue ?? "unverified"
        // Only `authentic` passes, `unverified` when the step allows it; `notAuthentic` (tampered data, a clone) never.
        let verdict = result.verdict
        if verdict.verdict != .authentic && !(verdict.verdict == .unverified && allowUnverified) {
            throw result.notAuthenticError
        }
        guard let mrz = result.mrz else {
            throw TesseraError(.malformedData, "the chip's DG1 could not be read or parsed")
        }
        var summary: [String: JSONValue] = [
            "documentType": .string(String(mrz.documentCode.prefix(1))), "documentCode": .string(mrz.documentCode),
            "issuingState": .string(mrz.issuingState), "nationality": .string(mrz.nationality),
            "documentNumber": .string(mrz.documentNumber),
            "surname": .string(MRZ.comparableName(mrz.primaryIdentifier)),
            "givenNames": .string(MRZ.comparableName(mrz.secondaryIdentifier)),
            "accessProtocol": .string(result.accessProtocol == .pace ? "PACE" : "BAC"),
            "passiveAuthentication": .string(pa),
            "verdict": .string(verdict.verdict.rawValue),
            "chipAuthenticity": .string(verdict.chipAuthenticity.rawValue),
        ]
        if let b = mrz.birthDate() { summary["dateOfBirth"] = .string(b.description) }
        if let e = mrz.expiryDate() { summary["dateOfExpiry"] = .string(e.description) }
        if let aa = result.activeAuthentication { summary["activeAuthentication"] = .string(aa.status.rawValue) }
        if let mapping = result.paceMapping { summary["paceMapping"] = .string(mapping.rawValue) }
        if let ca = result.chipAuthentication { summary["chipAuthentication"] = .string(ca.status.rawValue) }
        return .completed(
            ["document": .object(summary), "documentMRZ": .string(mrz.raw)].merging(
                dg2Portrait(result.faceImages.map { ($0.mimeType, $0.data) })
            ) { a, _ in a })
    }

    /// Runs a document read, sending what it reports as `enrollment.progress` of `step`, in order; every report is
    /// sent before this returns or throws.
    func forwardingProgress<T>(
        of step: WorkflowStep,
        _ read: (_ report: @escaping @Sendable (JSONValue) -> Void) async throws(TesseraError) -> T
    ) async throws(TesseraError) -> T {
        let (events, sink) = AsyncStream.makeStream(of: JSONValue.self, bufferingPolicy: .bufferingNewest(256))
        let emit = self.emitter
        let enrollmentId = row?.id ?? ""
        let forwarder = Task {
            for await e in events {
                await emit(
                    "enrollment.progress",
                    ["enrollmentId": .string(enrollmentId), "step": .string(step.key), "progress": e])
            }
        }
        let result: Result<T, TesseraError>
        do throws(TesseraError) {
            result = .success(try await read { sink.yield($0) })
        } catch {
            result = .failure(error)
        }
        sink.finish()
        await forwarder.value
        return try result.get()
    }

    /// MDOC_PHASE: reads an mDL through the daemon's mdoc reader (NFC engagement, session, DeviceRequest,
    /// DeviceResponse verified against the IACAs). Only `authentic` passes; the attributes are kept for
    /// ATTRIBUTE_MATCHING (`documentAttributes`) and the summary for the identity binding (`document`).
    func readMDoc(_ step: WorkflowStep) async throws(TesseraError) -> StepResult {
        guard let mdocReader else {
            throw TesseraError(.candidateUnavailable, "this station cannot read mobile documents")
        }
        await emit("enrollment.busy", event(["expectedInterval": "long", "step": .string(step.key)]))
        let reader = try await waitForCard(
            step, reader: step.string("reader"),
            seconds: step.settings["cardWaitSeconds"]?.intValue ?? 60)
        let outcome = try await forwardingProgress(of: step) { report async throws(TesseraError) in
            try await mdocReader(
                MDocReadOrder(reader: reader, docType: MDL.docType, elements: mdocElementsWithPortrait(step)), report)
        }
        guard let document = outcome.documents.first(where: { $0.docType == MDL.docType }) ?? outcome.documents.first
        else {
            throw TesseraError(.malformedData, "the mdoc returned no document")
        }
        guard document.verdict == .authentic else { throw document.notAuthenticError }
        let attributes = try DocumentAttributes(mdl: document.elements(in: MDL.namespace), docType: document.docType)
        var summary = attributes.summary(document)
        summary["reader"] = .string(outcome.reader)
        return .completed(
            ["document": .object(summary), "documentAttributes": attributes.json].merging(mdocPortrait(document)) {
                a, _ in a
            })
    }

    /// The reader to read from: the configured one, or the first holding a card; waits up to `seconds` for a card.
    /// Announces `{step: "waitingForCard"}` progress once when no card is there yet.
    private func waitForCard(_ step: WorkflowStep, reader: String?, seconds: Int) async throws(TesseraError) -> String?
    {
        let deadline = ContinuousClock.now + .seconds(seconds)
        var lastError: TesseraError?
        var announced = false
        while true {
            if lastError != nil, !announced {
                announced = true
                await emit(
                    "enrollment.progress", event(["step": .string(step.key), "progress": ["step": "waitingForCard"]]))
            }
            do {
                let list = try await documents.readers()
                if let hit = list.first(where: { $0.cardPresent && (reader == nil || $0.name == reader) }) {
                    return hit.name
                }
                if let reader, !list.contains(where: { $0.name == reader }) {
                    lastError = TesseraError(.noReader, "reader \(reader) is not connected")
                } else {
                    lastError = TesseraError(.noCard, "no document was presented within \(seconds) s")
                }
            } catch {
                lastError = error
            }
            if ContinuousClock.now >= deadline || Task.isCancelled {
                throw lastError ?? TesseraError(.noCard, "no document was presented within \(seconds) s")
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
    }

    /// ATTRIBUTE_MATCHING: the expected attributes against every document read in this enrollment (NFC_PHASE's
    /// MRZ, MDOC_PHASE's attributes); all must match.
    func matchAttributes() throws(TesseraError) -> StepResult {
        guard let row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        let mrzText = row.data["documentMRZ"]?.stringValue
        let stored = row.data["documentAttributes"]
        guard mrzText != nil || stored != nil else {
            throw TesseraError(.internalError, "ATTRIBUTE_MATCHING runs before the document was read")
        }
        guard let json = row.parameters["expected"] else {
            throw TesseraError(.candidateUnavailable, "no expected attributes for ATTRIBUTE_MATCHING")
        }
        let expected = try ExpectedAttributes(json: json)
        var mismatches: [AttributeMismatch] = []
        if let mrzText { mismatches += AttributeMatcher.compare(expected, with: try MRZ.parse(mrzText)) }
        if let stored { mismatches += AttributeMatcher.compare(expected, with: try DocumentAttributes(json: stored)) }
        guard mismatches.isEmpty else {
            let list = mismatches.map(\.attribute).joined(separator: ", ")
            throw TesseraError(
                .attributeMismatch, "the document does not match the expected \(list)",
                details: ["mismatches": .array(mismatches.map(\.json))])
        }
        return .completed([
            "attributeMatching": [
                "matched": true, "attributes": .array((json.objectValue ?? [:]).keys.sorted().map { .string($0) }),
            ]
        ])
    }

    // MARK: passkey

    /// Creates the passkey, or picks up one created before a crash. The credential id and key handle are
    /// recorded before the key is generated (see docs/ENROLLMENT.md, "Durability").
    func createPasskey(
        _ step: WorkflowStep, pin: String?, caller: PINCaller? = nil,
        allowFinalPinTry: Bool = false
    ) async throws(TesseraError) -> StepResult {
        guard let current = row else { throw TesseraError(.noActiveEnrollment, "there is no active enrollment") }
        let rpId = step.string("rpId") ?? ""
        let origin = step.string("origin")
        let uv = current.parameters["userVerification"]?.stringValue ?? "preferred"
        var state = current.stepState.objectValue ?? [:]
        var plan = state["plan"]?.objectValue ?? [:]
        if plan["credentialId"] == nil {
            plan["credentialId"] = .string(Base64URL.encode(SecureRandom.bytes(32)))
            plan["keyHandle"] = .string(Base64URL.encode(SecureRandom.bytes(16)))
            plan["challenge"] = .string(Base64URL.encode(SecureRandom.bytes(32)))
        }
        guard var credentialId = plan["credentialId"]?.stringValue.flatMap(Base64URL.decode),
            var keyHandle = plan["keyHandle"]?.stringValue.flatMap(Base64URL.decode),
            let challenge = plan["challenge"]?.stringValue.flatMap(Base64URL.decode)
        else {
            throw TesseraError(.internalError, "the stored passkey plan does not parse")
        }
        await emit("enrollment.busy", event(["expectedInterval": "long", "step": .string(step.key)]))

        if let record = try? await passkeys.credential(id: credentialId) {
            // Created and recorded before a crash: use it.
            let r = try passkeys.rebuiltRegistration(of: record, challenge: challenge, origin: origin)
            logger.notice("reusing the passkey created before a restart", metadata: ["enrollment": "\(current.id)"])
            return .completed([
                "credential": Self.credentialJSON(r, rpId: rpId, userId: [UInt8](record.userId), recovered: true)
            ])
        }
        await passkeys.clearInterruptedKey(
            plan: &plan, credentialId: &credentialId, keyHandle: &keyHandle, logger: logger)
        let tokenId = try await passkeys.chooseToken(step.string("tokenId")).id
        plan["tokenId"] = .string(tokenId)
        if pin == nil, uv == "required" {
            state["plan"] = .object(plan)
            try await saveStepState(.object(state))
            return .needsInput(pinRequest(step, tokenId: tokenId))
        }
        // From here a key may exist under these ids: recorded before the attempt.
        plan["generating"] = true
        state["plan"] = .object(plan)
        try await saveStepState(.object(state))
        let data = current.data.objectValue ?? [:]
        let document = data["document"]?.objectValue
        let documentName = document.flatMap { d -> String? in
            let given = d["givenNames"]?.stringValue ?? "", surname = d["surname"]?.stringValue ?? ""
            let full = "\(given) \(surname)".trimmingWhitespace()
            return full.isEmpty ? nil : full
        }
        let userHandle =
            current.parameters["userHandle"]?.stringValue.flatMap(Base64URL.decode) ?? SecureRandom.bytes(16)
        // An activation token names its subject; a remote enrollment the email collected, else the holder.
        let userName =
            current.parameters["userName"]?.stringValue ?? current.subject ?? data["email"]?.stringValue
            ?? documentName ?? "enrollment-\(current.id.prefix(8))"
        let displayName = current.parameters["userDisplayName"]?.stringValue ?? documentName ?? userName
        let attestation = PasskeyService.Attestation(rawValue: step.string("attestation") ?? "none") ?? .none
        // A document verified as authentic in this enrollment binds the passkey to its holder.
        let binding = data["document"].flatMap { d -> IdentityBinding? in
            guard d["verdict"]?.stringValue == "authentic", let identity = DocumentIdentity(summary: d) else {
                return nil
            }
            return IdentityBinding(identity: identity, secret: secret, enrollmentId: current.id)
        }
        do {
            let r = try await passkeys.enroll(
                .init(
                    rpId: rpId, userId: userHandle, userName: userName, userDisplayName: displayName,
                    challenge: challenge,
                    origin: origin, tokenId: tokenId, pin: pin, attestation: attestation,
                    userVerification: PasskeyService.UserVerification(rawValue: uv) ?? .preferred,
                    credentialId: credentialId, keyHandle: keyHandle, caller: caller,
                    allowFinalPinTry: allowFinalPinTry,
                    provisioning: ProvisioningRule(replace: step.settings["replace"]?.boolValue ?? false),
                    actor: "enrollment:\(current.id)", identityBinding: binding?.text,
                    requester: Requester(uid: current.ownerUid, pid: caller?.pid ?? 0, isAdmin: false)))
            await Failpoint.reach("enrollment.afterPasskeyRecorded")
            return .completed(["credential": Self.credentialJSON(r, rpId: rpId, userId: userHandle, recovered: false)])
        } catch  where error.code == .pinRequired && pin == nil {
            return .needsInput(pinRequest(step, tokenId: tokenId))
        }
    }

    private func pinRequest(_ step: WorkflowStep, tokenId: String) -> StepRequest {
        StepRequest(
            key: step.key, prompt: "PIN of the token that will hold the passkey",
            input: Self.schema(["pin": ["type": "string", "minLength": 1, "writeOnly": true]]),
            extra: ["tokenId": .string(tokenId)])
    }

    static func credentialJSON(_ r: PasskeyService.EnrollResult, rpId: String, userId: [UInt8], recovered: Bool)
        -> JSONValue
    {
        var o: [String: JSONValue] = [
            "credentialId": .string(Base64URL.encode(r.credentialId)), "rpId": .string(rpId),
            "userId": .string(Base64URL.encode(userId)), "tokenId": .string(r.tokenId),
            "publicKey": .string(Base64URL.encode(r.publicKey)),
            "attestationObject": .string(Base64URL.encode(r.attestationObject)),
            "clientDataJSON": .string(Base64URL.encode(r.clientDataJSON)),
            "userVerified": .bool(r.userVerified),
        ]
        if recovered { o["recovered"] = true }
        return .object(o)
    }

    /// On a non-success end: deletes the passkey this enrollment made, whether its step completed, it was
    /// recorded before a crash, or it was only generated, so that no key outlives an enrollment that did not
    /// succeed. A token that cannot delete it (absent, or wanting a PIN the daemon does not hold) keeps it: that is
    /// logged, and `row.credentialId` (the audit record) names the credential left.
    func discardPasskey(_ row: inout EnrollmentRow) async {
        let plan = row.stepState["plan"]
        let planned = plan?["credentialId"]?.stringValue.flatMap(Base64URL.decode)
        if let id = row.credentialId.map({ [UInt8]($0) }) ?? planned, (try? await passkeys.credential(id: id)) != nil {
            do {
                try await passkeys.delete(id: id)
                logger.notice(
                    "deleted the passkey of an enrollment that did not succeed", metadata: ["enrollment": "\(row.id)"])
                row.credentialId = nil
            } catch {
                logger.warning(
                    "could not delete the passkey of an enrollment that did not succeed",
                    metadata: ["enrollment": "\(row.id)", "error": "\(error)"])
                row.credentialId = Data(id)
            }
            return
        }
        row.credentialId = nil
        guard let tokenId = plan?["tokenId"]?.stringValue,
            let handle = plan?["keyHandle"]?.stringValue.flatMap(Base64URL.decode)
        else { return }
        do { try await passkeys.discardUnrecordedKey(tokenId: tokenId, handle: handle) } catch {
            logger.warning(
                "could not delete an unrecorded key", metadata: ["token": "\(tokenId)", "error": "\(error)"])
        }
    }

    static func schema(_ properties: [String: JSONValue]) -> JSONValue {
        [
            "type": "object", "required": .array(properties.keys.sorted().map { .string($0) }),
            "properties": .object(properties),
        ]
    }
}
