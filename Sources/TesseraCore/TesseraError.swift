/// The one error type that crosses every layer and the socket unchanged.
///
/// `code` is a stable UPPER_SNAKE identifier clients branch on; `message` is for humans;
/// `retryable` says whether the same request may succeed later without a change by the caller;
/// `details` carries structured facts (e.g. `retriesLeft`) that clients may show.
public struct TesseraError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Code
    public var message: String
    public var retryable: Bool
    public var details: [String: JSONValue]

    public init(_ code: Code, _ message: String, retryable: Bool? = nil, details: [String: JSONValue] = [:]) {
        self.code = code
        self.message = message
        self.retryable = retryable ?? code.defaultRetryable
        self.details = details
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// A stable error code. New codes are added here and documented in `docs/API.md`.
    public struct Code: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }

        // Protocol / request
        public static let parseError: Code = "PARSE_ERROR"
        public static let invalidRequest: Code = "INVALID_REQUEST"
        public static let methodNotFound: Code = "METHOD_NOT_FOUND"
        public static let invalidInput: Code = "INVALID_INPUT"
        public static let unauthorized: Code = "UNAUTHORIZED"
        public static let frameTooLarge: Code = "FRAME_TOO_LARGE"
        public static let internalError: Code = "INTERNAL"
        public static let shuttingDown: Code = "SHUTTING_DOWN"
        public static let daemonUnavailable: Code = "DAEMON_UNAVAILABLE"
        /// The connection already has the maximum number of requests in flight.
        public static let busy: Code = "BUSY"
        // Tokens and passkeys
        public static let tokenNotPresent: Code = "TOKEN_NOT_PRESENT"
        public static let tokenError: Code = "TOKEN_ERROR"
        public static let tokenRemoved: Code = "TOKEN_REMOVED"
        public static let cardReset: Code = "CARD_RESET"
        public static let pinRequired: Code = "PIN_REQUIRED"
        public static let pinInvalid: Code = "PIN_INVALID"
        public static let pinLocked: Code = "PIN_LOCKED"
        /// The token has one PIN try left and the request did not say `allowFinalPinTry: true`.
        public static let pinFinalTryProtected: Code = "PIN_FINAL_TRY_PROTECTED"
        /// A wrong PIN from this uid a moment ago: no PIN is tried for it until `retryAfterSeconds` have passed.
        public static let pinBackoff: Code = "PIN_BACKOFF"
        /// A PIN was given and is empty (an empty line on `--pin-stdin`, an empty `pin`): refused, never taken as no PIN.
        public static let pinEmpty: Code = "PIN_EMPTY"
        /// The user cancelled the PIN or confirmation dialog (pinentry, the terminal prompt); nothing was tried.
        public static let pinEntryCancelled: Code = "PIN_ENTRY_CANCELLED"
        /// The pinentry program could not be found or run, or did not answer in the Assuan protocol.
        public static let pinEntryFailed: Code = "PIN_ENTRY_FAILED"
        public static let passkeyNotFound: Code = "PASSKEY_NOT_FOUND"
        public static let credentialExcluded: Code = "CREDENTIAL_EXCLUDED"
        public static let pcscUnavailable: Code = "PCSC_UNAVAILABLE"
        /// Another program holds the card exclusively.
        public static let cardInUse: Code = "CARD_IN_USE"
        /// The operation was cancelled (client went away, task cancelled).
        public static let cancelled: Code = "CANCELLED"
        /// `presence.confirm` found no CTAP request of the caller's uid waiting for presence (or it is off).
        public static let presenceNotPending: Code = "PRESENCE_NOT_PENDING"
        // Documents and readers
        public static let noReader: Code = "NO_READER"
        public static let noCard: Code = "NO_CARD"
        public static let accessDenied: Code = "ACCESS_DENIED"
        public static let cardRemoved: Code = "CARD_REMOVED"
        public static let secureMessagingError: Code = "SECURE_MESSAGING_ERROR"
        public static let unsupportedProtocol: Code = "UNSUPPORTED_PROTOCOL"
        public static let malformedData: Code = "MALFORMED_DATA"
        public static let cardError: Code = "CARD_ERROR"
        /// The reader is held by another driver or program (kernel pn533 driver, pcscd, another libnfc user).
        public static let deviceBusy: Code = "DEVICE_BUSY"
        public static let mrzInvalid: Code = "MRZ_INVALID"
        public static let cryptoError: Code = "CRYPTO_ERROR"
        public static let storageError: Code = "STORAGE_ERROR"
        /// Creating/deleting a key on a PIV card needs its management key, and none (acceptable) is configured.
        public static let managementKeyRequired: Code = "MANAGEMENT_KEY_REQUIRED"
        /// An ISO/IEC 18013-7 Annex C request (`deviceRequest`, `encryptionInfo`, or the origin) does not parse
        /// (`details.field`).
        public static let mdocRequestMalformed: Code = "MDOC_REQUEST_MALFORMED"
        /// An ISO/IEC 18013-7 Annex C EncryptedResponse does not parse.
        public static let mdocResponseMalformed: Code = "MDOC_RESPONSE_MALFORMED"
        // Enrollment
        /// Another enrollment is active; `force: true` interrupts it.
        public static let enrollmentActive: Code = "ENROLLMENT_ACTIVE"
        public static let noActiveEnrollment: Code = "NO_ACTIVE_ENROLLMENT"
        public static let nothingToResume: Code = "NOTHING_TO_RESUME"
        /// The enrollment was idle longer than the idle timeout and was swept.
        public static let enrollmentExpired: Code = "ENROLLMENT_EXPIRED"
        /// A submission for a step that is not waiting for input (`details.expected`).
        public static let stepNotExpected: Code = "STEP_NOT_EXPECTED"
        public static let notRetryable: Code = "NOT_RETRYABLE"
        /// Unknown workflow, or one this station cannot run (`details.reasons`).
        public static let candidateUnavailable: Code = "CANDIDATE_UNAVAILABLE"
        /// Wrong one-time code (`details.attemptsLeft`).
        public static let otpInvalid: Code = "OTP_INVALID"
        public static let otpExpired: Code = "OTP_EXPIRED"
        public static let otpAttemptsExceeded: Code = "OTP_ATTEMPTS_EXCEEDED"
        public static let otpDeliveryFailed: Code = "OTP_DELIVERY_FAILED"
        /// The document does not match the expected attributes (`details.mismatches`).
        public static let attributeMismatch: Code = "ATTRIBUTE_MISMATCH"
        /// Passive authentication was required and did not succeed.
        public static let documentNotAuthentic: Code = "DOCUMENT_NOT_AUTHENTIC"
        /// Not a compact JWS, bad base64url/JSON, or a required claim missing or of the wrong type.
        public static let activationTokenMalformed: Code = "ACTIVATION_TOKEN_MALFORMED"
        /// Algorithm not ES256, unknown issuer or key id, or the signature does not verify.
        public static let activationTokenSignatureInvalid: Code = "ACTIVATION_TOKEN_SIGNATURE_INVALID"
        /// Expired, or not yet valid.
        public static let activationTokenExpired: Code = "ACTIVATION_TOKEN_EXPIRED"
        /// The token's `jti` was used before.
        public static let activationTokenReplayed: Code = "ACTIVATION_TOKEN_REPLAYED"
        /// `aud` does not name this station.
        public static let activationTokenAudience: Code = "ACTIVATION_TOKEN_AUDIENCE"
        /// The credential is suspended (until resumed; not retryable unchanged).
        public static let credentialSuspended: Code = "CREDENTIAL_SUSPENDED"
        /// The credential is deactivated or replaced: final.
        public static let credentialDeactivated: Code = "CREDENTIAL_DEACTIVATED"
        /// The provisioning check found a credential for this user (`details.decision`); pass `replace: true`.
        public static let credentialExists: Code = "CREDENTIAL_EXISTS"
        /// A lifecycle command that does not parse, verify, or name this station, or has expired.
        public static let lifecycleCommandInvalid: Code = "LIFECYCLE_COMMAND_INVALID"
        /// The lifecycle command's `jti` was applied before.
        public static let lifecycleCommandReplayed: Code = "LIFECYCLE_COMMAND_REPLAYED"
        /// The step-up's document is not the credential holder's (or does not match the expected attributes).
        public static let stepUpCredentialUserMismatch: Code = "STEP_UP_CREDENTIAL_USER_MISMATCH"
        /// A step-up driven by another user or with another `crossPlatformSessionId` than it was started with.
        public static let stepUpAuthSessionMismatch: Code = "STEP_UP_AUTH_SESSION_MISMATCH"
        /// The challenge's `expiresAt` passed before the assertion.
        public static let challengeExpired: Code = "CHALLENGE_EXPIRED"
        /// The user (or the station's client) cancelled; the same request may be made again.
        public static let userCancelled: Code = "USER_CANCELLED"
        /// A recovery token that does not parse or verify, names no identity, or was used by another attempt.
        public static let recoveryTokenInvalid: Code = "RECOVERY_TOKEN_INVALID"
        /// The recovery token (and so the attempt) has expired.
        public static let recoveryAttemptExpired: Code = "RECOVERY_ATTEMPT_EXPIRED"
        /// The attempt was cancelled (`recovery.cancel`).
        public static let recoveryAttemptCancelled: Code = "RECOVERY_ATTEMPT_CANCELLED"
        /// The document is not the person the recovery token names.
        public static let recoveryMatchFailed: Code = "RECOVERY_MATCH_FAILED"
        /// Too many recovery attempts for the user or the station (`retryAfterSeconds`).
        public static let recoveryRateLimited: Code = "RECOVERY_RATE_LIMITED"
        /// No authentic document read: the identity check was not completed.
        public static let recoveryIDVNotCompleted: Code = "RECOVERY_IDV_NOT_COMPLETED"
        /// Creating the replacement passkey failed (`data.cause`); the same attempt may be started again.
        public static let recoveryRegistrationFailed: Code = "RECOVERY_REGISTRATION_FAILED"
        // Mobile documents, holder side (docs/MDOC.md)
        /// The MSO's deviceKey is not the token key the registration names.
        public static let mdocDeviceKeyMismatch: Code = "MDOC_DEVICE_KEY_MISMATCH"
        /// The MSO's docType differs from the registration's docType.
        public static let mdocDocTypeMismatch: Code = "MDOC_DOCTYPE_MISMATCH"
        /// No mdoc device key with that keyId on the token (or it belongs to another uid).
        public static let mdocDeviceKeyNotFound: Code = "MDOC_DEVICE_KEY_NOT_FOUND"
        /// A registration with that documentIdentifier exists.
        public static let mdocRegistrationExists: Code = "MDOC_REGISTRATION_EXISTS"
        /// No registration with that documentIdentifier (visible to the caller).
        public static let mdocRegistrationNotFound: Code = "MDOC_REGISTRATION_NOT_FOUND"
        /// The registration is not offered: invalidationDate or the MSO's validUntil is past, or the request asks
        /// for another docType.
        public static let mdocNotOffered: Code = "MDOC_NOT_OFFERED"
        /// The request carries no readerAuth, one that does not verify, or one whose chain names no root in the
        /// registration's supportedAuthorityKeyIdentifiers (`details.reason`: missing, invalid, untrusted).
        public static let mdocReaderNotTrusted: Code = "MDOC_READER_NOT_TRUSTED"
        /// `access.*` called on a daemon without an `accessControl` section.
        public static let accessNotConfigured: Code = "ACCESS_NOT_CONFIGURED"
        /// A door that follows a badge office's list (`accessControl.registry`) changes no badge locally:
        /// `access.register`, `access.issue` and the lifecycle methods on a badge belong to the office.
        public static let registryReadOnly: Code = "REGISTRY_READ_ONLY"
        /// `access.register`: the card fails the badge check (`details.reasons`: the stable reason codes).
        public static let badgeNotValid: Code = "BADGE_NOT_VALID"
        /// The holder declined the request or did not answer in time (`details.reason`: declined, timeout,
        /// ended).
        public static let mdocNotApproved: Code = "MDOC_NOT_APPROVED"
        /// `mdoc.approve` for a presentation that is not waiting for approval.
        public static let mdocPresentationNotPending: Code = "MDOC_PRESENTATION_NOT_PENDING"

        // Face matching (docs/ENROLLMENT.md, "Face matching")
        /// The face matcher could not be run, crashed, timed out or gave no answer (retryable; never a match).
        public static let faceMatcherUnavailable: Code = "FACE_MATCHER_UNAVAILABLE"
        /// The live capture is not the person of the reference portrait (or template); never says how close.
        public static let faceMismatch: Code = "FACE_MISMATCH"
        /// A "live" capture is the reference itself (the same bytes or pixels, or a copy scoring above the
        /// matcher's `replayThreshold`): the enrollment fails.
        public static let faceReplay: Code = "FACE_REPLAY"
        /// The step used its `faceMatching.maxAttempts` comparisons: the enrollment fails.
        public static let faceAttemptsExceeded: Code = "FACE_ATTEMPTS_EXCEEDED"
        /// The matcher found no face in a capture (or in the reference).
        public static let faceNotFound: Code = "FACE_NOT_FOUND"
        /// The frames do not show the liveness challenge performed by the face that matched.
        public static let livenessFailed: Code = "LIVENESS_FAILED"
        /// MID_SELFIE_MATCHING found no face template kept for this identity.
        public static let faceTemplateNotFound: Code = "FACE_TEMPLATE_NOT_FOUND"

        // Reading the MRZ from a camera frame (docs/KIOSK.md, "The MRZ from the camera")
        /// The MRZ reader program is not configured, could not be run, crashed, timed out or answered nonsense.
        public static let mrzReaderUnavailable: Code = "MRZ_READER_UNAVAILABLE"
        /// The reader found no MRZ in the frame (the person has not held the document up yet).
        public static let mrzNotFound: Code = "MRZ_NOT_FOUND"

        /// Whether an error with this code is, by default, worth retrying unchanged.
        public var defaultRetryable: Bool {
            switch self {
            case .tokenNotPresent, .tokenRemoved, .pinBackoff, .cardReset, .noCard, .cardRemoved, .pcscUnavailable,
                .cardInUse,
                .shuttingDown, .noReader, .deviceBusy, .otpDeliveryFailed, .busy, .userCancelled, .recoveryRateLimited,
                .faceMatcherUnavailable, .faceMismatch, .faceNotFound, .livenessFailed, .mrzReaderUnavailable,
                .mrzNotFound:
                return true
            default:
                return false
            }
        }
    }
}

extension TesseraError {
    public static func invalidInput(_ message: String) -> TesseraError { TesseraError(.invalidInput, message) }
    public static func internalError(_ message: String) -> TesseraError { TesseraError(.internalError, message) }
}
