import CredentialStore
import FoundationEssentials
import KeyStores
import MDoc
import Ownership
import Passkeys
import TesseraCore
import X509Support

/// What the holder asks the user before releasing anything: a trusted reader's request for a registered document.
public struct MDocConsentRequest: Sendable {
    public var documentIdentifier: String
    public var docType: String
    public var reader: MDocReaderIdentity
    public var elements: [MDocRequestedElement]

    public init(
        documentIdentifier: String, docType: String, reader: MDocReaderIdentity, elements: [MDocRequestedElement]
    ) {
        self.documentIdentifier = documentIdentifier; self.docType = docType; self.reader = reader
        self.elements = elements
    }

    /// The `mdoc.request` notification's params; `origin` is the web origin of an 18013-7 Annex C request.
    public func json(presentationId: String, origin: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "presentationId": .string(presentationId), "documentIdentifier": .string(documentIdentifier),
            "docType": .string(docType),
            "reader": [
                "subject": .string(reader.subject), "authorityKeyIdentifier": .string(reader.authorityKeyIdentifier),
            ],
            "elements": .array(
                elements.map {
                    [
                        "namespace": .string($0.namespace), "identifier": .string($0.identifier),
                        "intentToRetain": .bool($0.intentToRetain),
                    ]
                }),
        ]
        if let origin { o["origin"] = .string(origin) }
        return .object(o)
    }
}

/// The user's answer: approved or not, which elements (`namespace/identifier`; nil: all requested), and the
/// token PIN when the user gave one (tried once through `PINRules.withCallerPIN` for `caller`).
public struct MDocConsent: Sendable {
    public var approved: Bool
    public var elements: [String]? = nil
    public var pin: String? = nil
    public var allowFinalPinTry = false
    public var caller: PINCaller? = nil
    /// Why not approved: declined, timeout, ended.
    public var reason = "declined"

    public init(approved: Bool) { self.approved = approved }

    public init(approved: Bool, reason: String) {
        self.approved = approved; self.reason = reason
    }

    public static func refused(_ reason: String) -> MDocConsent { MDocConsent(approved: false, reason: reason) }
}

/// What `respond` released.
public struct MDocHolderResponse: Sendable {
    /// DeviceResponse CBOR, to be encrypted by the front door's session.
    public var deviceResponse: [UInt8]
    /// The released elements, `namespace/identifier`.
    public var released: [String]
}

/// The holder side of mdoc (docs/MDOC.md, "Holder"): device keys on tokens, registrations, and the decision and
/// signing of a response. Front doors (NFC `mdoc.present`, 18013-7 Annex C `mdoc.respond`) own the session
/// and its SessionTranscript and call `respond`.
public final class MDocHolderService: Sendable {
    /// `CKA_LABEL` of device keys: `tessera:mdoc:UID`. The `tessera:` prefix keeps them out of the SSH agent, and
    /// passkeys are only the keys of credential records, so a device key is never offered as either.
    public static let labelPrefix = "tessera:mdoc:"

    public let passkeys: PasskeyService
    public let store: MDocRegistrationStore
    /// The reader root certificates (`--mdoc-reader-root`): a readerAuth chain must validate to one of them, and its
    /// subject key identifier must be in the registration's supportedAuthorityKeyIdentifiers.
    public let readerRoots: [ParsedCertificate]
    /// What each `mdoc.approve` waits for: its presentation's outcome.
    public let outcomes = MDocOutcomes()

    public init(passkeys: PasskeyService, store: MDocRegistrationStore, readerRoots: [ParsedCertificate] = []) {
        self.passkeys = passkeys; self.store = store; self.readerRoots = readerRoots
    }

    /// A P-256 key generated on a PKCS#11 token; its COSE_Key (EC2). The private key never leaves the token.
    public func createDeviceKey(tokenId: String?, uid: UInt32, pin: String?, caller: PINCaller, allowFinalPinTry: Bool)
        async throws(TesseraError) -> (tokenId: String, keyId: [UInt8], deviceKey: MDocECKey)
    {
        let token = try await passkeys.chooseToken(tokenId)
        guard token.backend == "pkcs11" else {
            throw TesseraError(
                .invalidInput,
                "mdoc device keys are made on PKCS#11 tokens only (token \(token.id) is \(token.backend))",
                details: ["field": "tokenId"])
        }
        let handle = SecureRandom.bytes(16)
        let label = Self.labelPrefix + String(uid)
        try await store.recordDeviceKey(tokenId: token.id, keyHandle: handle)
        let point: [UInt8]
        if let pin {
            point = try await passkeys.pinRules.withCallerPIN(
                pin, caller: caller, allowFinalTry: allowFinalPinTry, tokenId: token.id
            ) { attempt throws(TesseraError) in
                try await token.generateP256Key(handle: handle, label: label, pin: attempt)
            }
        } else {
            point = try await token.generateP256Key(handle: handle, label: label, pin: nil)
        }
        return (token.id, handle, try MDocECKey(uncompressedPoint: point))
    }

    /// The device key `keyId` on `tokenId`, made by `createDeviceKey` for `uid` (any uid when `isAdmin`).
    public func deviceKey(tokenId: String, keyId: [UInt8], uid: UInt32, isAdmin: Bool) async throws(TesseraError)
        -> MDocECKey
    {
        let token = try await passkeys.chooseToken(tokenId)
        let keys = try await token.publicKeys()
        guard let key = keys.first(where: { $0.handle == keyId && $0.label.hasPrefix(Self.labelPrefix) }),
            key.value.isP256, isAdmin || key.label == Self.labelPrefix + String(uid)
        else {
            throw TesseraError(
                .mdocDeviceKeyNotFound,
                "no mdoc device key \(Base64URL.encode(keyId)) of uid \(uid) on token \(tokenId)",
                details: ["keyId": .string(Base64URL.encode(keyId)), "tokenId": .string(tokenId)])
        }
        return try MDocECKey(uncompressedPoint: key.publicPoint)
    }

    /// Validates and stores a registration (see `mdoc.register` in docs/API.md).
    public func register(
        documentIdentifier: String, docType: String, issuerSigned bytes: [UInt8], tokenId: String, keyId: [UInt8],
        supportedAuthorityKeyIdentifiers: [[UInt8]], invalidationDate: Date?, uid: UInt32, isAdmin: Bool
    ) async throws(TesseraError) -> MDocRegistrationRecord {
        let issuerSigned = try IssuerSigned(bytes: bytes)
        let mso = try MobileSecurityObject(issuerAuth: issuerSigned.issuerAuth)
        guard mso.docType == docType else {
            throw TesseraError(
                .mdocDocTypeMismatch, "the MSO's docType is \(mso.docType), not \(docType)",
                details: ["msoDocType": .string(mso.docType)])
        }
        let key = try await deviceKey(tokenId: tokenId, keyId: keyId, uid: uid, isAdmin: isAdmin)
        guard mso.deviceKey == key else {
            throw TesseraError(
                .mdocDeviceKeyMismatch, "the MSO's deviceKey is not the token key \(Base64URL.encode(keyId))",
                details: ["keyId": .string(Base64URL.encode(keyId))])
        }
        let record = MDocRegistrationRecord(
            documentIdentifier: documentIdentifier, docType: docType, issuerSigned: bytes, tokenId: tokenId,
            keyHandle: keyId, supportedAuthorityKeyIdentifiers: supportedAuthorityKeyIdentifiers,
            invalidationDate: invalidationDate, validUntil: mso.validUntil, ownerUid: uid)
        try await store.insert(record)
        return record
    }

    /// The registration `documentIdentifier` if `uid` owns it (or `isAdmin`); MDOC_REGISTRATION_NOT_FOUND when it
    /// does not exist or is another uid's, the same answer (docs/API.md, "Owners").
    public func registration(_ documentIdentifier: String, uid: UInt32, isAdmin: Bool) async throws(TesseraError)
        -> MDocRegistrationRecord
    {
        guard let record = try await store.registration(documentIdentifier),
            Requester(uid: uid, isAdmin: isAdmin).owns(record.ownerUid)
        else {
            throw TesseraError(
                .mdocRegistrationNotFound, "no mdoc registration \(documentIdentifier)",
                details: ["documentIdentifier": .string(documentIdentifier)])
        }
        return record
    }

    /// The registration that answers `request` when the caller names none (`mdoc.respond`): among `uid`'s
    /// registrations offered now whose docType the request asks for (oldest first), the first whose
    /// supportedAuthorityKeyIdentifiers trust the request's reader over `sessionTranscript`, else the first of them
    /// (`respond` then says why the reader is refused). MDOC_NOT_OFFERED when there is none: reason `docType` (no
    /// registration of a requested docType) or `expired` (only expired ones).
    public func registration(
        for request: DeviceRequest, sessionTranscript: SessionTranscript, uid: UInt32, now: Date = Date()
    ) async throws(TesseraError) -> MDocRegistrationRecord {
        let docTypes = Set(request.docRequests.map(\.docType))
        let matching = try await store.registrations(ownerUid: uid).filter { docTypes.contains($0.docType) }
        let offered = matching.filter { $0.offered(at: now) }
        guard let first = offered.first else {
            let reason = matching.isEmpty ? "docType" : "expired"
            throw TesseraError(
                .mdocNotOffered,
                matching.isEmpty
                    ? "no registration of uid \(uid) has a requested docType (\(docTypes.sorted().joined(separator: ", ")))"
                    : "every registration of a requested docType has expired",
                details: ["reason": .string(reason)])
        }
        for registration in offered {
            guard let doc = request.docRequests.first(where: { $0.docType == registration.docType }) else { continue }
            if (try? await MDocReaderTrust.evaluate(
                doc, sessionTranscript: sessionTranscript, roots: readerRoots,
                supportedAuthorityKeyIdentifiers: registration.authorityKeyIdentifiers, now: now)) != nil
            {
                return registration
            }
        }
        return first
    }

    /// The response to one DeviceRequest for `registration`, or a `TesseraError` saying why nothing is released:
    ///
    /// 1. the registration is `uid`'s and offered now (MDOC_NOT_OFFERED when invalidationDate or validUntil is past),
    ///    and the request has a DocRequest for its docType (MDOC_NOT_OFFERED);
    /// 2. that DocRequest's readerAuth is detached and verifies over this `sessionTranscript`, and its chain validates
    ///    by signature to one of `readerRoots` whose key identifier is in the registration's
    ///    supportedAuthorityKeyIdentifiers (`MDocReaderTrust`; MDOC_READER_NOT_TRUSTED);
    /// 3. `consent` is asked (only now: an untrusted request is never shown) and must approve (MDOC_NOT_APPROVED);
    /// 4. the approved ∩ requested ∩ held elements are released with a deviceSignature (ES256) by the token key,
    ///    with the consent's PIN if it has one (token errors such as PIN_REQUIRED pass through).
    ///
    /// The front door supplies the SessionTranscript (NFC engagement for `mdoc.present`, 18013-7 Annex C's for `mdoc.respond`)
    /// and encrypts the returned DeviceResponse in its session.
    public func respond(
        registration: MDocRegistrationRecord, request: DeviceRequest, sessionTranscript: SessionTranscript,
        uid: UInt32, now: Date = Date(), consent: @Sendable (MDocConsentRequest) async -> MDocConsent
    ) async throws(TesseraError) -> MDocHolderResponse {
        guard registration.ownerUid == uid else {
            throw TesseraError(.unauthorized, "mdoc registration \(registration.documentIdentifier) is another uid's")
        }
        guard registration.offered(at: now) else {
            throw TesseraError(
                .mdocNotOffered, "registration \(registration.documentIdentifier) has expired",
                details: ["reason": "expired"])
        }
        guard let doc = request.docRequests.first(where: { $0.docType == registration.docType }) else {
            throw TesseraError(
                .mdocNotOffered, "the request asks for no \(registration.docType)", details: ["reason": "docType"])
        }
        let reader = try await MDocReaderTrust.evaluate(
            doc, sessionTranscript: sessionTranscript, roots: readerRoots,
            supportedAuthorityKeyIdentifiers: registration.authorityKeyIdentifiers, now: now)
        let issuerSigned = try IssuerSigned(bytes: [UInt8](registration.issuerSigned))
        let requested = MDocElementSelection.requested(doc)
        let answer = await consent(
            MDocConsentRequest(
                documentIdentifier: registration.documentIdentifier, docType: registration.docType, reader: reader,
                elements: requested))
        guard answer.approved else {
            throw TesseraError(
                .mdocNotApproved, "the request was not approved (\(answer.reason))",
                details: ["reason": .string(answer.reason)])
        }
        let released = MDocElementSelection.released(
            requested: requested, approved: answer.elements, available: issuerSigned)
        let token = try await passkeys.chooseToken(registration.tokenId)
        let handle = [UInt8](registration.keyHandle)
        let pinRules = passkeys.pinRules
        let signer: AsyncCOSESigner = { (tbs: [UInt8]) async throws(TesseraError) -> [UInt8] in
            guard let pin = answer.pin else { return try await token.signP256(handle: handle, message: tbs, pin: nil) }
            return try await pinRules.withCallerPIN(
                pin, caller: answer.caller, allowFinalTry: answer.allowFinalPinTry, tokenId: token.id
            ) { attempt throws(TesseraError) in
                try await token.signP256(handle: handle, message: tbs, pin: attempt)
            }
        }
        let bytes = try await MDocPresentation.deviceResponse(
            issuerSigned: issuerSigned, docType: registration.docType, sessionTranscript: sessionTranscript,
            released: released, signer: signer)
        return MDocHolderResponse(deviceResponse: bytes, released: released)
    }
}

/// The outcome of an approved presentation (the released elements, or why nothing was) for the `mdoc.approve` that
/// answered it. The question itself waits in the presence broker (door `mdoc`, keyed by presentationId); an approve
/// opens a slot before it answers, so an outcome that comes before the approve waits for it is kept.
public actor MDocOutcomes {
    private enum Slot {
        case open
        case waiting(CheckedContinuation<Result<[String], TesseraError>, Never>)
        case done(Result<[String], TesseraError>)
    }
    private var slots: [String: [UInt64: Slot]] = [:]
    private var next: UInt64 = 0

    /// Opens a slot for presentation `id` before answering it; returns the slot's token.
    public func expect(_ id: String) -> UInt64 {
        next += 1
        slots[id, default: [:]][next] = .open
        return next
    }

    /// Closes a slot (its approve did not answer).
    public func drop(_ id: String, _ token: UInt64) {
        slots[id]?[token] = nil
        if slots[id]?.isEmpty == true { slots[id] = nil }
    }

    /// The outcome for the slot, once `finish` reported it.
    public func wait(_ id: String, _ token: UInt64) async -> Result<[String], TesseraError> {
        switch slots[id]?[token] {
        case .done(let result)?:
            drop(id, token)
            return result
        case .open?:
            return await withCheckedContinuation { slots[id]?[token] = .waiting($0) }
        case .waiting?, nil:
            return .failure(TesseraError(.internalError, "no outcome slot for presentation \(id)"))
        }
    }

    /// Reports presentation `id`'s outcome to its open and waiting slots.
    public func finish(_ id: String, _ result: Result<[String], TesseraError>) {
        guard let open = slots.removeValue(forKey: id) else { return }
        for (token, slot) in open {
            switch slot {
            case .waiting(let continuation): continuation.resume(returning: result)
            case .open: slots[id, default: [:]][token] = .done(result)
            case .done: break
            }
        }
    }
}
