internal import CPKCS11
import CryptoPrimitives
import TesseraCore

/// What a token says about itself (`C_GetTokenInfo`, `C_GetSlotInfo`) and which module serves it.
public struct TokenInfo: Sendable, Equatable {
    public var label: String
    public var manufacturer: String
    public var model: String
    public var serial: String
    /// p11-kit's name for the module, or its file name when loaded by path.
    public var moduleName: String
    public var modulePath: String
    public var slotDescription: String
    public var flags: TokenFlags
    /// `ulMaxSessionCount`; nil when the token reports no limit or does not say.
    public var maxSessionCount: Int?
    public var minPINLength: Int
    public var maxPINLength: Int
}

/// Token and slot flags that matter for logging in and choosing a session pool size.
public struct TokenFlags: Sendable, Equatable {
    public var loginRequired: Bool
    public var userPinInitialized: Bool
    public var userPinCountLow: Bool
    public var userPinFinalTry: Bool
    public var userPinLocked: Bool
    public var tokenInitialized: Bool
    public var protectedAuthenticationPath: Bool
    public var writeProtected: Bool
    /// `CKF_HW_SLOT` on the slot: a physical reader or device.
    public var isHardwareSlot: Bool
    /// `CKF_REMOVABLE_DEVICE` on the slot.
    public var isRemovableDevice: Bool
}

/// Attributes of a private key read back from the token (what the token claims; sensitive values are never read).
@_spi(Testing)
public struct PrivateKeyAttributes: Sendable, Equatable {
    public var label: String
    public var isTokenObject: Bool?
    public var isPrivate: Bool?
    public var sensitive: Bool?
    public var extractable: Bool?
    public var alwaysSensitive: Bool?
    public var neverExtractable: Bool?
    public var canSign: Bool?
    /// Whether `CKA_VALUE` (the secret scalar) could be read; false for a properly protected key.
    public var valueReadable: Bool
    /// The `CKR_*` name the token answered when `CKA_VALUE` was requested.
    public var valueReadResult: String
}

extension TokenFlags {
    init(token: ck_flags_t, slot: ck_flags_t) {
        func has(_ flags: ck_flags_t, _ bit: UInt) -> Bool { flags & ck_flags_t(bit) != 0 }
        loginRequired = has(token, UInt(CKF_LOGIN_REQUIRED))
        userPinInitialized = has(token, UInt(CKF_USER_PIN_INITIALIZED))
        userPinCountLow = has(token, UInt(CKF_USER_PIN_COUNT_LOW))
        userPinFinalTry = has(token, UInt(CKF_USER_PIN_FINAL_TRY))
        userPinLocked = has(token, UInt(CKF_USER_PIN_LOCKED))
        tokenInitialized = has(token, UInt(CKF_TOKEN_INITIALIZED))
        protectedAuthenticationPath = has(token, UInt(CKF_PROTECTED_AUTHENTICATION_PATH))
        writeProtected = has(token, UInt(CKF_WRITE_PROTECTED))
        isHardwareSlot = has(slot, UInt(CKF_HW_SLOT))
        isRemovableDevice = has(slot, UInt(CKF_REMOVABLE_DEVICE))
    }
}

extension TokenInfo {
    init(token: ck_token_info, slot: ck_slot_info, module: Module) {
        label = paddedString(token.label)
        manufacturer = paddedString(token.manufacturer_id)
        model = paddedString(token.model)
        serial = paddedString(token.serial_number)
        moduleName = module.name
        modulePath = module.path
        slotDescription = paddedString(slot.slot_description)
        flags = TokenFlags(token: token.flags, slot: slot.flags)
        let limit = token.max_session_count
        maxSessionCount = (limit == 0 || limit == UInt.max || limit > UInt(Int.max)) ? nil : Int(limit)
        minPINLength = token.min_pin_len > 1024 ? 0 : Int(token.min_pin_len)
        maxPINLength = token.max_pin_len > 1024 ? 0 : Int(token.max_pin_len)
    }

    /// The stable token id: "p11-" + 16 hex digits of SHA-256 over module file name, manufacturer, model, serial, label.
    static func stableID(
        moduleFileName: String, manufacturer: String, model: String, serial: String, label: String,
        disambiguator: String = ""
    ) -> String {
        let material = [moduleFileName, manufacturer, model, serial, label, disambiguator].joined(separator: "\u{0}")
        return "p11-" + Hex.encode(Array(MessageDigest.sha256(Array(material.utf8)).prefix(8)))
    }
}

/// A public key object found on a token.
public struct TokenPublicKey: Sendable, Equatable {
    /// `CKA_ID` (shared with the private key of the pair).
    public var id: [UInt8]
    public var label: String
    /// Uncompressed P-256 point (65 bytes).
    public var point: [UInt8]
}

/// An RSA public key object on a token.
public struct TokenRSAPublicKey: Sendable, Equatable {
    /// `CKA_ID` (shared with the private key of the pair).
    public var id: [UInt8]
    public var label: String
    /// `CKA_MODULUS` and `CKA_PUBLIC_EXPONENT`, unsigned big-endian.
    public var modulus: [UInt8]
    public var exponent: [UInt8]
}

/// An X.509 certificate object on a token.
public struct TokenCertificate: Sendable, Equatable {
    /// `CKA_ID` (shared with the private key it certifies).
    public var id: [UInt8]
    public var label: String
    /// `CKA_VALUE`: the DER certificate.
    public var der: [UInt8]
}
