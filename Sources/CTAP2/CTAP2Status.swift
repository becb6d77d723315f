/// CTAP 2.1 status codes (§8.2) that this authenticator returns.
public enum CTAP2Status: UInt8, Sendable {
    case ok = 0x00
    case invalidCommand = 0x01
    case invalidParameter = 0x02
    case invalidLength = 0x03
    case cborUnexpectedType = 0x11
    case invalidCBOR = 0x12
    case missingParameter = 0x14
    case limitExceeded = 0x15
    case credentialExcluded = 0x19
    case unsupportedAlgorithm = 0x26
    case operationDenied = 0x27
    case keyStoreFull = 0x28
    case unsupportedOption = 0x2B
    case invalidOption = 0x2C
    case keepaliveCancel = 0x2D
    case noCredentials = 0x2E
    case userActionTimeout = 0x2F
    case notAllowed = 0x30
    case pinInvalid = 0x31
    case pinBlocked = 0x32
    case pinAuthInvalid = 0x33
    case pinAuthBlocked = 0x34
    case pinNotSet = 0x35
    case pinUvAuthTokenRequired = 0x36
    case pinPolicyViolation = 0x37
    case requestTooLarge = 0x39
    case upRequired = 0x3B
    case invalidSubcommand = 0x3E
    case unauthorizedPermission = 0x40
    case other = 0x7F
}

/// A CTAP2 failure: the status byte the client gets, and a message for the daemon's log.
public struct CTAP2Error: Error, Sendable, Equatable {
    public var status: CTAP2Status
    public var message: String
    public init(_ status: CTAP2Status, _ message: String = "") { self.status = status; self.message = message }
}

/// CTAP2 command bytes (§6).
public enum CTAP2Command: UInt8, Sendable {
    case makeCredential = 0x01
    case getAssertion = 0x02
    case getInfo = 0x04
    case clientPIN = 0x06
    case reset = 0x07
    case getNextAssertion = 0x08
    case credentialManagement = 0x0A
    case selection = 0x0B
}
