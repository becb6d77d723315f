import Foundation
import GRDB
import TesseraCore

/// An mdoc the daemon holds (`mdoc.register`): its IssuerSigned and the token key that is its device key.
public struct MDocRegistrationRecord: Codable, Sendable, Equatable, PersistableRecord, TimestampColumns {
    public static let databaseTableName = "mdoc_registration"

    public var documentIdentifier: String
    public var docType: String
    /// IssuerSigned CBOR as registered.
    public var issuerSigned: Data
    public var tokenId: String
    /// The device key's handle on the token (`CKA_ID`).
    public var keyHandle: Data
    /// Lower-case hex key identifiers, separated by commas (empty: none).
    public var supportedAuthorityKeyIdentifiers: String
    public var invalidationDate: Date?
    /// The MSO's validUntil.
    public var validUntil: Date
    public var ownerUid: UInt32
    public var createdAt: Date

    public init(
        documentIdentifier: String, docType: String, issuerSigned: [UInt8], tokenId: String, keyHandle: [UInt8],
        supportedAuthorityKeyIdentifiers: [[UInt8]], invalidationDate: Date?, validUntil: Date, ownerUid: UInt32,
        createdAt: Date = Date()
    ) {
        self.documentIdentifier = documentIdentifier; self.docType = docType
        self.issuerSigned = Data(issuerSigned); self.tokenId = tokenId; self.keyHandle = Data(keyHandle)
        self.supportedAuthorityKeyIdentifiers = supportedAuthorityKeyIdentifiers.map { Hex.encode($0) }.joined(
            separator: ",")
        self.invalidationDate = invalidationDate; self.validUntil = validUntil; self.ownerUid = ownerUid
        self.createdAt = createdAt
    }

    public var authorityKeyIdentifiers: [[UInt8]] {
        supportedAuthorityKeyIdentifiers.split(separator: ",").compactMap { Hex.decode(String($0)) }
    }

    /// Offered for presentment at `now`: neither invalidationDate nor the MSO's validUntil is past.
    public func offered(at now: Date) -> Bool {
        now <= validUntil && (invalidationDate.map { now <= $0 } ?? true)
    }
}

/// The mdoc registrations (shares the daemon's database).
public final class MDocRegistrationStore: Sendable {
    private let db: DatabasePool

    public init(database: TesseraDatabase) { db = database.writer }

    static func migrate(_ db: Database) throws {
        try db.create(table: "mdoc_registration") { t in
            t.column("documentIdentifier", .text).primaryKey()
            t.column("docType", .text).notNull()
            t.column("issuerSigned", .blob).notNull()
            t.column("tokenId", .text).notNull()
            t.column("keyHandle", .blob).notNull()
            t.column("supportedAuthorityKeyIdentifiers", .text).notNull()
            t.column("invalidationDate", .datetime)
            t.column("validUntil", .datetime).notNull()
            t.column("ownerUid", .integer).notNull().indexed()
            t.column("createdAt", .datetime).notNull()
        }
    }

    /// Records a new device key's purpose (`mdoc-device`), before the key is made: a generation that fails leaves
    /// an unused row, never a key with no purpose.
    public func recordDeviceKey(tokenId: String, keyHandle: [UInt8]) async throws(TesseraError) {
        let record = KeyPurposeRecord(tokenId: tokenId, keyHandle: keyHandle, purpose: .mdocDevice)
        do { try await db.write { db in try KeyPurposeStore.insert(record, db) } } catch { throw storageError(error) }
    }

    /// Stores a new registration; MDOC_REGISTRATION_EXISTS when its documentIdentifier is taken.
    public func insert(_ record: MDocRegistrationRecord) async throws(TesseraError) {
        do {
            try await db.write { db in
                if try MDocRegistrationRecord.fetchOne(db, key: record.documentIdentifier) != nil {
                    throw TesseraError(
                        .mdocRegistrationExists,
                        "a registration with documentIdentifier \(record.documentIdentifier) exists",
                        details: ["documentIdentifier": .string(record.documentIdentifier)])
                }
                try record.insert(db)
            }
        } catch { throw storageError(error) }
    }

    /// One registration, or nil.
    public func registration(_ documentIdentifier: String) async throws(TesseraError) -> MDocRegistrationRecord? {
        do { return try await db.read { db in try MDocRegistrationRecord.fetchOne(db, key: documentIdentifier) } } catch
        {
            throw storageError(error)
        }
    }

    /// The registrations of `ownerUid` (nil: all), oldest first.
    public func registrations(ownerUid: UInt32?) async throws(TesseraError) -> [MDocRegistrationRecord] {
        do {
            return try await db.read { db in
                var query = MDocRegistrationRecord.order(Column("createdAt"), Column("documentIdentifier"))
                if let ownerUid { query = query.filter(Column("ownerUid") == ownerUid) }
                return try query.fetchAll(db)
            }
        } catch { throw storageError(error) }
    }

    /// Deletes a registration; false when there was none.
    public func delete(_ documentIdentifier: String) async throws(TesseraError) -> Bool {
        do {
            return try await db.write { db in try MDocRegistrationRecord.deleteOne(db, key: documentIdentifier) }
        } catch {
            throw storageError(error)
        }
    }
}
