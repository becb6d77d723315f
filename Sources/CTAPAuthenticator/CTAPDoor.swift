import CTAP2
import CTAPHID
import Logging
import Passkeys
import Presence
import WebAuthn

extension CTAPHIDHub {
    /// The authenticator on the passkey service (`CTAPPasskeyBackend`, AAGUID `tesseraAAGUID`) behind the one hub
    /// every transport shares: one transaction at a time, whichever transport a request comes from.
    public static func passkeyAuthenticator(
        passkeys: PasskeyService, presence: PresenceBroker, access: CTAPAccess, tokenId: String?, clientPIN: Bool,
        logger: Logger
    ) -> CTAPHIDHub {
        let backend = CTAPPasskeyBackend(
            passkeys: passkeys, options: passkeys.ctapOptions, presence: presence, access: access, tokenId: tokenId,
            logger: logger)
        let authenticator = CTAP2Authenticator(
            backend: backend,
            info: .init(aaguid: tesseraAAGUID, maxMessageSize: CTAPHID.maxMessageSize, clientPIN: clientPIN))
        return CTAPHIDHub(authenticator: authenticator, logger: logger)
    }
}
