import Foundation
import GRDB
import TesseraCore

/// CTAP options of a credential made over CTAP (`tesserad --ctap-socket`): whether it is discoverable and its
/// credProtect level. A credential without a row (made through `passkey.enroll`) is discoverable, level 1.
/// The row is written before the credential (it names the credential id the CTAP front door chose), so a crash
/// in between leaves an unused row, never a credential without its protection level.
public struct CTAPCredentialOptions: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "ctap_credential"

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

/// The `ctap_credential` table (shares the daemon's database).
public final class CTAPCredentialStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "ctap_credential") { t in
            t.column("credentialId", .blob).primaryKey()
            t.column("discoverable", .boolean).notNull()
            t.column("credProtect", .integer).notNull()
        }
    }

    /// The `hmacSecret` column (false for rows written before it).
    static func migrateHMACSecret(_ db: Database) throws {
        try db.alter(table: "ctap_credential") { t in
            t.add(column: "hmacSecret", .boolean).notNull().defaults(to: false)
        }
    }

    public func save(_ options: CTAPCredentialOptions) async throws(TesseraError) {
        do { try await db.write { try options.save($0) } } catch { throw storageError(error) }
    }

    /// The options of the given credentials (those without a row are absent from the answer).
    public func options(_ ids: [Data]) async throws(TesseraError) -> [Data: CTAPCredentialOptions] {
        do {
            let rows = try await db.read { try CTAPCredentialOptions.fetchAll($0, keys: ids) }
            return Dictionary(rows.map { ($0.credentialId, $0) }, uniquingKeysWith: { a, _ in a })
        } catch { throw storageError(error) }
    }

    public func delete(_ id: Data) async throws(TesseraError) {
        do { _ = try await db.write { try CTAPCredentialOptions.deleteOne($0, key: id) } } catch {
            throw storageError(error)
        }
    }
}
