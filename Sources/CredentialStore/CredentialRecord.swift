import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Metadata of one passkey. The private key lives on the token (`tokenId`, `keyHandle`); only public data is here.
public struct CredentialRecord: Codable, Sendable, Equatable {
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
    /// Lifecycle state (docs/LIFECYCLE.md); only `active` credentials sign.
    public var state: CredentialState
    public var stateChangedAt: Date?
    /// The identity binding of a document-verified creation (`IdentityBinding` JSON), nil without one.
    public var identityBinding: String?
    /// The uid that created the credential: only it and administrators see, use or change it (docs/API.md,
    /// "Owners"). Rows from before owners were recorded belong to the daemon's uid.
    public var ownerUid: UInt32

    public init(
        credentialId: Data, rpId: String, userId: Data, userName: String, userDisplayName: String,
        tokenId: String, backend: String, keyHandle: Data, publicKey: Data, counterReserved: Int64 = 0,
        createdAt: Date = Date(), lastUsedAt: Date? = nil, state: CredentialState = .active,
        stateChangedAt: Date? = nil, identityBinding: String? = nil, ownerUid: UInt32 = geteuid()
    ) {
        self.ownerUid = ownerUid
        self.credentialId = credentialId; self.rpId = rpId; self.userId = userId; self.userName = userName
        self.userDisplayName = userDisplayName; self.tokenId = tokenId; self.backend = backend
        self.keyHandle = keyHandle; self.publicKey = publicKey; self.counterReserved = counterReserved
        self.createdAt = createdAt; self.lastUsedAt = lastUsedAt
        self.state = state; self.stateChangedAt = stateChangedAt; self.identityBinding = identityBinding
    }
}

/// A credential's lifecycle state. `deactivated` and `replaced` are final: such a credential never signs again.
public enum CredentialState: String, Codable, Sendable, CaseIterable, SQLArgument {
    case active, suspended, deactivated, replaced

    /// Whether no transition leads out of this state (except `deactivated` → `replaced` by a replacement).
    public var isFinal: Bool { self == .deactivated || self == .replaced }
}

/// The columns of a credential a badge office publishes (`CredentialStore.summaries`).
public struct CredentialSummary: Sendable, Equatable {
    public var credentialId: Data
    public var userName: String
    public var keyHandle: Data
    public var publicKey: Data
    public var state: CredentialState
    public var stateChangedAt: Date?
    public var createdAt: Date
}

/// One entry of the credential audit trail: a state change or a deletion, who asked and why.
public struct CredentialEvent: Codable, Sendable, Equatable {
    public var credentialId: Data
    public var at: Date
    /// The state before; nil for a creation.
    public var fromState: String?
    /// The new state, or "deleted".
    public var toState: String
    /// Who: "uid:N" for a socket caller, "issuer:ISS jti:JTI" for a lifecycle command, "enrollment:ID", ….
    public var actor: String
    public var reason: String?

    public init(credentialId: Data, at: Date, fromState: String?, toState: String, actor: String, reason: String?) {
        self.credentialId = credentialId; self.at = at; self.fromState = fromState; self.toState = toState
        self.actor = actor; self.reason = reason
    }
}

extension CredentialRecord {
    /// The columns `init(row:)` reads, in its order.
    static let columns = """
        credentialId, rpId, userId, userName, userDisplayName, tokenId, backend, keyHandle, publicKey, \
        counterReserved, createdAt, lastUsedAt, state, stateChangedAt, identityBinding, ownerUid
        """
    static let selectSQL = "SELECT \(columns) FROM credential"
    static let insertSQL = "INSERT INTO credential (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    init(row: SQLRow) throws {
        self.init(
            credentialId: try row.get(0), rpId: try row.get(1), userId: try row.get(2), userName: try row.get(3),
            userDisplayName: try row.get(4), tokenId: try row.get(5), backend: try row.get(6),
            keyHandle: try row.get(7), publicKey: try row.get(8), counterReserved: try row.get(9),
            createdAt: try row.get(10), lastUsedAt: try row.get(11), state: try row.get(12),
            stateChangedAt: try row.get(13), identityBinding: try row.get(14), ownerUid: try row.get(15))
    }

    func insert(_ c: SQLConnection) throws {
        try c.run(
            Self.insertSQL,
            [
                credentialId, rpId, userId, userName, userDisplayName, tokenId, backend, keyHandle, publicKey,
                counterReserved, createdAt, lastUsedAt, state, stateChangedAt, identityBinding, ownerUid,
            ])
    }

    /// The record with `id`, nil when there is none.
    static func fetch(_ c: SQLConnection, id: Data) throws -> CredentialRecord? {
        try c.first(fetchSQL, [id], CredentialRecord.init(row:))
    }
    private static let fetchSQL = selectSQL + " WHERE credentialId = ?"
}

extension CredentialEvent {
    func insert(_ c: SQLConnection) throws {
        try c.run(
            "INSERT INTO credential_event (credentialId, at, fromState, toState, actor, reason) VALUES (?, ?, ?, ?, ?, ?)",
            [credentialId, at, fromState, toState, actor, reason])
    }

    init(row: SQLRow) throws {
        self.init(
            credentialId: try row.get(0), at: try row.get(1), fromState: try row.get(2), toState: try row.get(3),
            actor: try row.get(4), reason: try row.get(5))
    }
}
