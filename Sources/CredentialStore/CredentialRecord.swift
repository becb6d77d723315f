import Foundation
import GRDB

/// Metadata of one passkey. The private key lives on the token (`tokenId`, `keyHandle`); only public data is here.
public struct CredentialRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "credential"

    public var credentialId: Data
    public var rpId: String
    public var userId: Data
    public var userName: String
    public var userDisplayName: String
    /// Stable token id (see `tokens.list`).
    public var tokenId: String
    /// Key-store backend: "pkcs11" or "piv".
    public var backend: String
    /// Backend key reference: the PKCS#11 CKA_ID, or the PIV slot.
    public var keyHandle: Data
    /// COSE_Key of the public key.
    public var publicKey: Data
    /// Highest signature counter value durably reserved; values up to it may already have been returned.
    public var counterReserved: Int64
    public var createdAt: Date
    public var lastUsedAt: Date?

    public init(credentialId: Data, rpId: String, userId: Data, userName: String, userDisplayName: String,
                tokenId: String, backend: String, keyHandle: Data, publicKey: Data, counterReserved: Int64 = 0,
                createdAt: Date = Date(), lastUsedAt: Date? = nil) {
        self.credentialId = credentialId; self.rpId = rpId; self.userId = userId; self.userName = userName
        self.userDisplayName = userDisplayName; self.tokenId = tokenId; self.backend = backend
        self.keyHandle = keyHandle; self.publicKey = publicKey; self.counterReserved = counterReserved
        self.createdAt = createdAt; self.lastUsedAt = lastUsedAt
    }
}
