import FoundationEssentials
import TesseraCore

/// An mdoc the daemon holds (`mdoc.register`): its IssuerSigned and the token key that is its device key.
public struct MDocRegistrationRecord: Codable, Sendable, Equatable {
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

extension MDocRegistrationRecord {
    static let columns = """
        documentIdentifier, docType, issuerSigned, tokenId, keyHandle, supportedAuthorityKeyIdentifiers, \
        invalidationDate, validUntil, ownerUid, createdAt
        """
    static let selectSQL = "SELECT \(columns) FROM mdoc_registration"

    init(row: SQLRow) throws {
        documentIdentifier = try row.get(0); docType = try row.get(1); issuerSigned = try row.get(2)
        tokenId = try row.get(3); keyHandle = try row.get(4); supportedAuthorityKeyIdentifiers = try row.get(5)
        invalidationDate = try row.get(6); validUntil = try row.get(7); ownerUid = try row.get(8)
        createdAt = try row.get(9)
    }
}

/// The mdoc registrations (shares the daemon's database).
public final class MDocRegistrationStore: Sendable {
    private let db: TesseraDatabase

    public init(database: TesseraDatabase) { db = database }

    /// "v8-mdoc-registrations".
    static let migrate = """
        CREATE TABLE "mdoc_registration" ("documentIdentifier" TEXT PRIMARY KEY, "docType" TEXT NOT NULL, \
        "issuerSigned" BLOB NOT NULL, "tokenId" TEXT NOT NULL, "keyHandle" BLOB NOT NULL, \
        "supportedAuthorityKeyIdentifiers" TEXT NOT NULL, "invalidationDate" DATETIME, \
        "validUntil" DATETIME NOT NULL, "ownerUid" INTEGER NOT NULL, "createdAt" DATETIME NOT NULL);
        CREATE INDEX "mdoc_registration_on_ownerUid" ON "mdoc_registration"("ownerUid");
        """

    /// Records a new device key's purpose (`mdoc-device`), before the key is made: a generation that fails leaves
    /// an unused row, never a key with no purpose.
    public func recordDeviceKey(tokenId: String, keyHandle: [UInt8]) async throws(TesseraError) {
        let record = KeyPurposeRecord(tokenId: tokenId, keyHandle: keyHandle, purpose: .mdocDevice)
        try await db.write { c in try KeyPurposeStore.insert(record, c) }
    }

    /// Stores a new registration; MDOC_REGISTRATION_EXISTS when its documentIdentifier is taken.
    public func insert(_ record: MDocRegistrationRecord) async throws(TesseraError) {
        try await db.write { c in
            let taken: Bool? = try c.value(
                "SELECT 1 FROM mdoc_registration WHERE documentIdentifier = ?", [record.documentIdentifier])
            if taken != nil {
                throw TesseraError(
                    .mdocRegistrationExists,
                    "a registration with documentIdentifier \(record.documentIdentifier) exists",
                    details: ["documentIdentifier": .string(record.documentIdentifier)])
            }
            try c.run(
                "INSERT INTO mdoc_registration (\(MDocRegistrationRecord.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    record.documentIdentifier, record.docType, record.issuerSigned, record.tokenId, record.keyHandle,
                    record.supportedAuthorityKeyIdentifiers, record.invalidationDate, record.validUntil,
                    record.ownerUid, record.createdAt,
                ])
        }
    }

    /// One registration, or nil.
    public func registration(_ documentIdentifier: String) async throws(TesseraError) -> MDocRegistrationRecord? {
        try await db.read { c in
            try c.first(
                MDocRegistrationRecord.selectSQL + " WHERE documentIdentifier = ?", [documentIdentifier],
                MDocRegistrationRecord.init(row:))
        }
    }

    /// The registrations of `ownerUid` (nil: all), oldest first.
    public func registrations(ownerUid: UInt32?) async throws(TesseraError) -> [MDocRegistrationRecord] {
        try await db.read { c in
            let order = " ORDER BY createdAt, documentIdentifier"
            if let ownerUid {
                return try c.all(
                    MDocRegistrationRecord.selectSQL + " WHERE ownerUid = ?" + order, [ownerUid],
                    MDocRegistrationRecord.init(row:))
            }
            return try c.all(MDocRegistrationRecord.selectSQL + order, [], MDocRegistrationRecord.init(row:))
        }
    }

    /// Deletes a registration; false when there was none.
    public func delete(_ documentIdentifier: String) async throws(TesseraError) -> Bool {
        try await db.write { c in
            try c.run("DELETE FROM mdoc_registration WHERE documentIdentifier = ?", [documentIdentifier]) > 0
        }
    }
}
