/// Why a badge was denied (or, for `granted`, nothing). Stable UPPER_SNAKE codes: docs/ACCESS.md and docs/API.md.
public enum AccessReason: String, Sendable, Codable, CaseIterable, Hashable {
    /// No PIV application, or the card did not answer as a PIV card does.
    case notPIV = "NOT_PIV"
    /// The card was pulled (or the reader lost it) before the check ended.
    case cardRemoved = "CARD_REMOVED"
    /// The certificate of the checked slot (9E, or 9A in `auth` mode) is missing or does not parse.
    case certMissing = "CERT_MISSING"
    /// The card's signature over the fresh challenge does not verify with the certificate's key: a clone that
    /// copied the certificate (and CHUID) but not the private key, or a card without that key.
    case cakSignatureInvalid = "CAK_SIGNATURE_INVALID"
    /// The certificate does not chain to a configured anchor (or violates the path rules: key usage, CA flags, EKU).
    case certUntrusted = "CERT_UNTRUSTED"
    /// The certificate is past its notAfter.
    case certExpired = "CERT_EXPIRED"
    /// The certificate is before its notBefore.
    case certNotYetValid = "CERT_NOT_YET_VALID"
    /// A configured CRL of the certificate's issuer lists its serial number.
    case certRevoked = "CERT_REVOKED"
    /// Every configured CRL of the certificate's issuer is past its nextUpdate: revocation cannot be known.
    case certRevocationUnknown = "CERT_REVOCATION_UNKNOWN"
    /// The certificate names neither a FASC-N nor a card UUID.
    case certNoIdentifier = "CERT_NO_IDENTIFIER"
    /// The card has no CHUID, or it does not parse.
    case chuidMissing = "CHUID_MISSING"
    /// The CHUID's issuer signature is absent, does not verify, or its signer does not chain to an anchor.
    case chuidSignatureInvalid = "CHUID_SIGNATURE_INVALID"
    /// The CHUID's FASC-N or GUID differ from the certificate's.
    case chuidMismatch = "CHUID_MISMATCH"
    /// The CHUID's expiration date has passed.
    case chuidExpired = "CHUID_EXPIRED"
    /// `auth` mode: no PIN was given.
    case pinRequired = "PIN_REQUIRED"
    /// `auth` mode: the PIN was wrong (one try spent).
    case pinInvalid = "PIN_INVALID"
    /// `auth` mode: the PIN is blocked, or only the final try is left (the final-try guard).
    case pinLocked = "PIN_LOCKED"
    /// `auth` mode: the caller's wrong PINs put it in back-off.
    case pinBackoff = "PIN_BACKOFF"
    /// The badge is not registered in Tessera's store.
    case badgeUnknown = "BADGE_UNKNOWN"
    /// The card's key is not the one the badge was registered with: another card with the badge's UUID / FASC-N
    /// and a certificate on another key (a CA that was tricked or compromised, an anchor shared with another office).
    case badgeKeyMismatch = "BADGE_KEY_MISMATCH"
    /// The badge is suspended (may be resumed).
    case badgeSuspended = "BADGE_SUSPENDED"
    /// The badge is deactivated (final).
    case badgeDeactivated = "BADGE_DEACTIVATED"
    /// The badge was replaced by another one (final).
    case badgeReplaced = "BADGE_REPLACED"
    /// The door's rule does not admit this badge.
    case doorNotAllowed = "DOOR_NOT_ALLOWED"
    /// A door following an office's list (`accessControl.registry`) has none, or its list is older than
    /// `maxAgeSeconds` or expired: it denies every badge until a newer list arrives (the freeze bound).
    case registryStale = "REGISTRY_STALE"
    /// The card answered something the check cannot use (a card error other than the ones above).
    case cardError = "CARD_ERROR"
}
