import DoorList
import FoundationEssentials
import ICAO
import TesseraCore
import X509Support

/// A door that follows a badge office (`accessControl.registry`, docs/ACCESS.md "A building"): the door list and
/// the badge CA's CRL it applied last, by `SignedDoorList.accept` and `BadgeCRL.accept`. Files are read and saved
/// by the daemon; this holds what was accepted and answers the door's lookups.
public actor RegistryFollower {
    /// The office's publisher certificate: a list verifies with its key or is refused.
    public nonisolated let publisher: ParsedCertificate
    /// Seconds after its issue time a list stops being used (the freeze bound).
    public nonisolated let maxAge: Double

    private var index: DoorListIndex?
    private var doors = DoorTable()
    private var crl: CertificateRevocationList?
    private var crlNumber: UInt64?
    /// The file the applied CRL was read from (what a decision it answers names).
    private var crlFile: String?
    private var appliedAt: Date?

    public init(publisher: ParsedCertificate, maxAge: Double) {
        self.publisher = publisher; self.maxAge = maxAge
    }

    /// What a decision uses: the applied list's index (nil: none yet), the applied CRL, and whether the list is
    /// stale at `now`.
    public struct View: Sendable {
        public var index: DoorListIndex?
        /// The list's doors (none before the first list).
        public var doors: DoorTable
        public var crl: CertificateRevocationList?
        /// The file `crl` was read from.
        public var crlFile: String?
        public var stale: Bool
        public var stamp: AccessDecision.RegistryStamp
    }

    public func view(at now: Date = Date()) -> View {
        guard let index else {
            return View(
                index: nil, doors: doors, crl: crl, crlFile: crlFile, stale: true, stamp: .init(number: nil, age: nil))
        }
        return View(
            index: index, doors: doors, crl: crl, crlFile: crlFile, stale: index.list.isStale(at: now, maxAge: maxAge),
            stamp: .init(number: index.list.number, age: index.list.age(at: now)))
    }

    /// Offers a signed list: applied when `SignedDoorList.accept` takes it, else the refusal (the door keeps its
    /// list). Returns the applied list's number. The verification and the parse run off this actor: decisions go on
    /// with the current list meanwhile.
    @concurrent
    public nonisolated func offerList(_ bytes: [UInt8], now: Date = Date()) async -> Result<UInt64, DoorListRefusal> {
        switch prepareList(bytes, current: await number, now: now) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let prepared): return await apply(prepared, now: now)
        }
    }

    /// A list verified and indexed, with its door table: what `apply` takes.
    public struct PreparedList: Sendable {
        let index: DoorListIndex
        let doors: DoorTable
    }

    /// The blocking half of an offer (verify, read into the index, make the door table), on the caller's thread:
    /// the list in `bytes` when `SignedDoorList.accept` takes it above `current`, else the refusal.
    public nonisolated func prepareList(_ bytes: [UInt8], current: UInt64?, now: Date = Date())
        -> Result<PreparedList, DoorListRefusal>
    {
        switch SignedDoorList.accept(bytes, publisher: publisher, current: current, now: now) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let index):
            // The doors must make a door table as the configuration's would (a reader of one door, a known mode).
            guard let table = try? Self.doorTable(index.list.doors) else { return .failure(.malformed) }
            return .success(PreparedList(index: index, doors: table))
        }
    }

    /// The number of the applied list (nil: none yet).
    public var number: UInt64? { index?.list.number }

    /// Applies a prepared list unless a list with its number or a higher one was applied meanwhile.
    public func apply(_ prepared: PreparedList, now: Date = Date()) -> Result<UInt64, DoorListRefusal> {
        if let number, prepared.index.list.number <= number { return .failure(.notNewer) }
        index = prepared.index
        doors = prepared.doors
        appliedAt = now
        return .success(prepared.index.list.number)
    }

    /// Offers the badge CA's CRL: applied when `BadgeCRL.accept` takes it — signed by one of `anchors`, the badge
    /// CAs the door trusts now. Returns its CRL number. `file`: where it was read from.
    public func offerCRL(_ der: [UInt8], anchors: [ParsedCertificate], file: String? = nil, now: Date = Date())
        -> Result<UInt64, DoorListRefusal>
    {
        switch BadgeCRL.accept(der, anchors: anchors, current: crlNumber, now: now) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let (list, number)):
            crl = list
            crlNumber = number
            crlFile = file
            return .success(number)
        }
    }

    /// The door table of a list's doors (the per-door shape of `accessControl.doors`).
    public static func doorTable(_ doors: [String: DoorList.Door]) throws(TesseraError) -> DoorTable {
        var rules: [DoorRule] = []
        for (name, door) in doors {
            guard let mode = AccessMode(rawValue: door.mode ?? "cak") else {
                throw TesseraError.invalidInput("door '\(name)': mode must be cak or auth")
            }
            rules.append(
                DoorRule(
                    name: name, readers: door.readers, allow: Set(door.allow), mode: mode,
                    grantCommand: door.grantCommand))
        }
        return try DoorTable(rules)
    }

    /// Whether the applied list names the badge `badgeId`.
    public func knows(badgeId: String) -> Bool { index?.badge(badgeId) != nil }

    /// `access.status` at a door: the list's number, issue and expiry times, age, whether it is stale, what it holds,
    /// and the CRL's number.
    public func status(at now: Date = Date()) -> JSONValue {
        var o: [String: JSONValue] = [
            "role": "door", "maxAgeSeconds": .number(maxAge),
            "crlNumber": crlNumber.map { .number(Double($0)) } ?? .null,
        ]
        guard let index else {
            o["number"] = .null
            o["stale"] = true
            return .object(o)
        }
        let list = index.list
        o["number"] = .number(Double(list.number))
        o["issuedAt"] = .string(list.issuedAt.iso8601Seconds)
        o["expiresAt"] = .string(list.expiresAt.iso8601Seconds)
        o["appliedAt"] = appliedAt.map { .string($0.iso8601Seconds) } ?? .null
        o["age"] = .number((list.age(at: now) * 10).rounded() / 10)
        o["stale"] = .bool(list.isStale(at: now, maxAge: maxAge))
        o["badges"] = .number(Double(index.badgeCount))
        o["doors"] = .array(list.doors.keys.sorted().map(JSONValue.string))
        return .object(o)
    }
}
