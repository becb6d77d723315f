import FoundationEssentials
import KeyStores
import Logging
import PIV
import PIVKeyStore
import Passkeys
import RPC
import TesseraCore

/// The PIV key store's wiring: the management key from the options and the PIV socket methods.
enum PIVSetup {
    /// The management key from `--piv-management-key-file`, or the default key with
    /// `--allow-default-piv-management-key`, or nil (PIV key creation answers MANAGEMENT_KEY_REQUIRED).
    /// The default key in the file without the flag is a configuration error.
    static func managementKey(_ options: DaemonOptions, logger: Logger) throws(TesseraError) -> PIVManagementKey? {
        guard let path = options.pivManagementKeyFile else {
            if options.allowDefaultPIVManagementKey {
                logger.warning("PIV: using the well-known default management key (--allow-default-piv-management-key)")
                return .factoryDefault
            }
            return nil
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TesseraError(.invalidInput, "cannot read the PIV management key file \(path)")
        }
        let key = try PIVManagementKey(parsing: String(decoding: data, as: UTF8.self))
        if key.isFactoryDefault && !options.allowDefaultPIVManagementKey {
            throw TesseraError(
                .invalidInput,
                "\(path) holds the well-known default PIV management key; change the card's key "
                    + "or pass --allow-default-piv-management-key")
        }
        logger.info("PIV: management key loaded (\(key.algorithm))")
        return key
    }
}

extension MethodTable {
    /// `tokens.changePin` and `tokens.pinStatus`; the card is named by id or label (`PasskeyService.token(named:)`).
    func registerPIV(_ piv: PIVKeyStore, passkeys: PasskeyService, pinRules: PINRules) {
        register("tokens.changePin", .admin) { p, connection in
            let tokenId = try await passkeys.token(named: p.string("tokenId")).id
            let new = try p.string("newPin")
            try await pinRules.withCallerPIN(
                p.string("oldPin"), caller: connection.pinCaller,
                allowFinalTry: p.optionalBool("allowFinalPinTry") ?? false, tokenId: tokenId
            ) {
                (old: PINAttempt) async throws(TesseraError) in
                try await piv.changePIN(tokenId: tokenId, old: old, new: new)
            }
            return ["changed": true, "tokenId": .string(tokenId)]
        }
        register("tokens.pinStatus", .read) { p, _ in
            let tokenId = try await passkeys.token(named: p.string("tokenId")).id
            switch try await piv.pinStatus(tokenId: tokenId) {
            case .verified: return ["tokenId": .string(tokenId), "verified": true, "blocked": false]
            case .notVerified(let n):
                return [
                    "tokenId": .string(tokenId), "verified": false, "blocked": false, "retriesLeft": .number(Double(n)),
                ]
            case .blocked: return ["tokenId": .string(tokenId), "verified": false, "blocked": true, "retriesLeft": 0]
            }
        }
    }
}
