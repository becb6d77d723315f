import FoundationEssentials
import TesseraCore

/// Whose an SSH key on a token is: the uid that made it with `ssh.keygen`. A key with no row (made elsewhere, a PIV
/// card's certificate key, or made before owners were recorded) is the daemon's uid's.
public struct SSHKeyOwnerRecord: Codable, Sendable, Equatable {
    public var tokenId: String
    /// The key's handle on the token (`CKA_ID`).
    public var keyHandle: Data
    public var ownerUid: UInt32
    public var createdAt: Date

    public init(tokenId: String, keyHandle: [UInt8], ownerUid: UInt32, createdAt: Date = Date()) {
        self.tokenId = tokenId; self.keyHandle = Data(keyHandle); self.ownerUid = ownerUid; self.createdAt = createdAt
    }
}

/// The owners of the SSH keys `ssh.keygen` made (shares the daemon's database).
public final class SSHKeyOwnerStore: Sendable {
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v10-ssh-key-owner".
    static let migrate = """
        CREATE TABLE "ssh_key_owner" ("tokenId" TEXT NOT NULL, "keyHandle" BLOB NOT NULL, \
        "ownerUid" INTEGER NOT NULL, "createdAt" DATETIME NOT NULL, PRIMARY KEY ("tokenId", "keyHandle"))
        """

    /// Records `ownerUid` as the owner of the key (replacing an earlier row for the same token and handle).
    public func record(_ owner: SSHKeyOwnerRecord) async throws(TesseraError) {
        try await db.write { c in
            try c.run(
                """
                INSERT INTO ssh_key_owner (tokenId, keyHandle, ownerUid, createdAt) VALUES (?, ?, ?, ?)
                ON CONFLICT (tokenId, keyHandle) DO UPDATE SET ownerUid = excluded.ownerUid,
                createdAt = excluded.createdAt
                """, [owner.tokenId, owner.keyHandle, owner.ownerUid, owner.createdAt])
        }
    }

    /// Every recorded owner, by token id and key handle.
    public func owners() async throws(TesseraError) -> [String: [Data: UInt32]] {
        try await db.read { c in
            var out: [String: [Data: UInt32]] = [:]
            try c.forEach("SELECT tokenId, keyHandle, ownerUid FROM ssh_key_owner") { row in
                out[try row.get(0), default: [:]][try row.get(1)] = try row.get(2)
            }
            return out
        }
    }
}
