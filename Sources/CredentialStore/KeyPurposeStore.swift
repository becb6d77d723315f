import FoundationEssentials
import TesseraCore

/// What a key on a token serves. Each door offers only keys of its own purpose (docs/API.md, "Key purposes"): the
/// SSH agent `ssh` keys (and keys with no recorded purpose, which a user put on the token), the passkey methods and
/// CTAP only passkeys.
public enum KeyPurpose: String, Codable, Sendable, CaseIterable, SQLArgument {
    /// A WebAuthn credential's key (`passkey.enroll`, CTAP makeCredential).
    case passkey
    /// An SSH key (`ssh.keygen`).
    case ssh
    /// An mdoc's device key (`mdoc.createDeviceKey`).
    case mdocDevice = "mdoc-device"
    /// The badge CA's key (`accessControl.issuer`).
    case badgeIssuer = "badge-issuer"
    /// A PIV card's own key in slot 9A or 9E (its certificate's key).
    case pivSlot = "piv-slot"
}

/// One purpose recorded for one key (a key recorded with two purposes is offered by neither door's rule that
/// needs one alone).
public struct KeyPurposeRecord: Codable, Sendable, Equatable {
    public var tokenId: String
    /// The key's handle on the token (`CKA_ID`).
    public var keyHandle: Data
    public var purpose: KeyPurpose
    public var createdAt: Date

    public init(tokenId: String, keyHandle: [UInt8], purpose: KeyPurpose, createdAt: Date = Date()) {
        self.tokenId = tokenId; self.keyHandle = Data(keyHandle); self.purpose = purpose; self.createdAt = createdAt
    }
}

/// The purposes of the keys Tessera made or was configured to use (shares the daemon's database). Besides its own
/// rows (mdoc device keys, the configured badge CA key once seen) it reads the records that already say what a key
/// is for: passkeys' credentials (`credential`, PKCS#11 and PIV backends), `ssh.keygen`'s owners (`ssh_key_owner`)
/// and mdoc registrations (`mdoc_registration`).
public final class KeyPurposeStore: Sendable {
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v14-key-purpose".
    static let migrate = """
        CREATE TABLE "key_purpose" ("tokenId" TEXT NOT NULL, "keyHandle" BLOB NOT NULL, "purpose" TEXT NOT NULL, \
        "createdAt" DATETIME NOT NULL, PRIMARY KEY ("tokenId", "keyHandle", "purpose"))
        """

    /// Records `purpose` for the key (kept beside any other purpose recorded for it: a key never loses one).
    public func record(_ record: KeyPurposeRecord) async throws(TesseraError) {
        try await db.write { c in try Self.insert(record, c) }
    }

    static func insert(_ record: KeyPurposeRecord, _ c: SQLConnection) throws {
        try c.run(
            "INSERT OR IGNORE INTO key_purpose (tokenId, keyHandle, purpose, createdAt) VALUES (?, ?, ?, ?)",
            [record.tokenId, record.keyHandle, record.purpose, record.createdAt])
    }

    /// Every recorded purpose, by token id and key handle.
    public func purposes() async throws(TesseraError) -> [String: [Data: Set<KeyPurpose>]] {
        try await db.read { c in
            var out: [String: [Data: Set<KeyPurpose>]] = [:]
            func add(_ sql: String, _ purpose: KeyPurpose?) throws {
                try c.forEach(sql) { row in
                    let tokenId: String = try row.get(0), handle: Data = try row.get(1)
                    let named = try purpose ?? row.get(2, as: String?.self).flatMap(KeyPurpose.init(rawValue:))
                    guard let named else { return }
                    out[tokenId, default: [:]][handle, default: []].insert(named)
                }
            }
            try add("SELECT tokenId, keyHandle, purpose FROM key_purpose", nil)
            try add("SELECT tokenId, keyHandle FROM credential WHERE backend IN ('pkcs11', 'piv')", .passkey)
            try add("SELECT tokenId, keyHandle FROM ssh_key_owner", .ssh)
            try add("SELECT tokenId, keyHandle FROM mdoc_registration", .mdocDevice)
            return out
        }
    }
}

/// A key the configuration names for a purpose by its token's id and its `CKA_LABEL` (`accessControl.issuer`):
/// every key so labelled on that token has that purpose, recorded when a door first sees it.
public struct ConfiguredKey: Sendable, Equatable {
    public var tokenId: String
    public var label: String
    public var purpose: KeyPurpose

    public init(tokenId: String, label: String, purpose: KeyPurpose) {
        self.tokenId = tokenId; self.label = label; self.purpose = purpose
    }
}
