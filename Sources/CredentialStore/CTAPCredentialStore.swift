import FoundationEssentials
import TesseraCore

/// CTAP options of a credential made over CTAP (`tesserad --ctap-socket`): whether it is discoverable and its
/// credProtect level. A credential without a row (made through `passkey.enroll`) is discoverable, level 1.
/// The row is written before the credential (it names the credential id the CTAP front door chose), so a crash
/// in between leaves an unused row, never a credential without its protection level.
public struct CTAPCredentialOptions: Codable, Sendable, Equatable {
    public var credentialId: Data
    public var discoverable: Bool
    /// 1, 2 or 3 (CTAP 2.1 §12.1).
    public var credProtect: Int
    /// The credential has hmac-secret keys (CTAP 2.1 §12.5) on its token, made with its key: `CKA_ID` key handle ‖
    /// 0x01 (CredRandomWithoutUV) and ‖ 0x02 (CredRandomWithUV), deleted with the key.
    public var hmacSecret: Bool

    public init(credentialId: Data, discoverable: Bool, credProtect: Int, hmacSecret: Bool = false) {
        self.credentialId = credentialId; self.discoverable = discoverable; self.credProtect = credProtect
        self.hmacSecret = hmacSecret
    }
}

/// The `ctap_credential` table (shares the daemon's database). Rows are read through a cache: a row is written
/// once, before its credential, and only deleted with it.
public final class CTAPCredentialStore: Sendable {
    private let db: TesseraDatabase
    /// Options by credential id; `.some(nil)`: no row (a passkey made through another door).
    private let cache = Locked<[Data: CTAPCredentialOptions?]>([:])

    public init(database: TesseraDatabase) { db = database }

    /// "ctap-credential-options".
    static let migrate = """
        CREATE TABLE "ctap_credential" ("credentialId" BLOB PRIMARY KEY, "discoverable" BOOLEAN NOT NULL, \
        "credProtect" INTEGER NOT NULL)
        """

    /// "v7-ctap-hmac-secret": the `hmacSecret` column (false for rows written before it).
    static let migrateHMACSecret = #"ALTER TABLE "ctap_credential" ADD COLUMN "hmacSecret" BOOLEAN NOT NULL DEFAULT 0"#

    public func save(_ options: CTAPCredentialOptions) async throws(TesseraError) {
        try await db.write { c in
            try c.run(
                """
                INSERT INTO ctap_credential (credentialId, discoverable, credProtect, hmacSecret) VALUES (?, ?, ?, ?)
                ON CONFLICT (credentialId) DO UPDATE SET discoverable = excluded.discoverable,
                credProtect = excluded.credProtect, hmacSecret = excluded.hmacSecret
                """, [options.credentialId, options.discoverable, options.credProtect, options.hmacSecret])
        }
        cache.withLock { $0[options.credentialId] = .some(options) }
    }

    /// As `options`, from memory for credentials seen before (no database read on an assertion's path).
    public func cachedOptions(_ ids: [Data]) async throws(TesseraError) -> [Data: CTAPCredentialOptions] {
        var found: [Data: CTAPCredentialOptions] = [:]
        var missing: [Data] = []
        cache.withLock { cache in
            for id in ids {
                switch cache[id] {
                case .some(.some(let o)): found[id] = o
                case .some(.none): break
                case .none: missing.append(id)
                }
            }
        }
        guard !missing.isEmpty else { return found }
        let loaded = try await options(missing)
        cache.withLock { cache in
            if cache.count >= 65_536 { cache.removeAll(keepingCapacity: true) }
            for id in missing where cache[id] == nil { cache[id] = .some(loaded[id]) }
        }
        return found.merging(loaded) { a, _ in a }
    }

    /// The options of the given credentials (those without a row are absent from the answer).
    public func options(_ ids: [Data]) async throws(TesseraError) -> [Data: CTAPCredentialOptions] {
        let rows = try await db.read { c in
            try ids.compactMap { id in
                try c.first(
                    "SELECT credentialId, discoverable, credProtect, hmacSecret FROM ctap_credential WHERE credentialId = ?",
                    [id]
                ) { row in
                    CTAPCredentialOptions(
                        credentialId: try row.get(0), discoverable: try row.get(1), credProtect: try row.get(2),
                        hmacSecret: try row.get(3))
                }
            }
        }
        return Dictionary(rows.map { ($0.credentialId, $0) }, uniquingKeysWith: { a, _ in a })
    }

    public func delete(_ id: Data) async throws(TesseraError) {
        try await db.write { c in _ = try c.run("DELETE FROM ctap_credential WHERE credentialId = ?", [id]) }
        _ = cache.withLock { $0.removeValue(forKey: id) }
    }
}
