import CryptoPrimitives
import FoundationEssentials
import TesseraCore
import X509Support

/// The door list a badge office publishes (docs/ACCESS.md, "A building"): every badge with its holder, the SHA-256
/// of its pinned public key and its lifecycle state, and each door's rule, under a number that only grows, an
/// issue time and an expiry. Its JSON is the eContent of the CMS SignedData the office signs (`SignedDoorList`).
public struct DoorList: Sendable, Equatable, Codable {
    /// The format of this structure; a door refuses another.
    public static let format = 1

    public var format: Int
    /// Grows with every publication; a door never applies a number it already has or a lower one.
    public var number: UInt64
    public var issuedAt: Date
    /// After this a door neither applies the list nor decides with it.
    public var expiresAt: Date
    /// Every badge the office knows, in the office's order.
    public var badges: [Badge]
    /// Door name → its rule.
    public var doors: [String: Door]

    /// One badge: its id (base64url of the card's UUID or FASC-N, as `access.check` reports it), the holder it is
    /// registered to, the SHA-256 (hex) of its pinned Card Authentication public key (SubjectPublicKeyInfo) and, when
    /// the card has one, of its PIV Authentication key (`auth` mode), and its state (`active`, `suspended`,
    /// `deactivated`, `replaced`).
    public struct Badge: Sendable, Equatable, Codable {
        public var id: String
        public var holder: String
        public var keySHA256: String
        public var authKeySHA256: String?
        public var state: String

        public init(id: String, holder: String, keySHA256: String, authKeySHA256: String? = nil, state: String) {
            self.id = id; self.holder = holder; self.keySHA256 = keySHA256; self.authKeySHA256 = authKeySHA256
            self.state = state
        }
    }

    /// A door's rule, the per-door shape of `accessControl.doors`: its readers, the holders and badge ids it admits,
    /// the program run on a grant and the check mode.
    public struct Door: Sendable, Equatable, Codable {
        public var readers: [String]
        public var allow: [String]
        public var grantCommand: [String]?
        public var mode: String?

        public init(readers: [String], allow: [String], grantCommand: [String]? = nil, mode: String? = nil) {
            self.readers = readers; self.allow = allow; self.grantCommand = grantCommand; self.mode = mode
        }
    }

    public init(number: UInt64, issuedAt: Date, expiresAt: Date, badges: [Badge], doors: [String: Door]) {
        format = Self.format
        self.number = number; self.issuedAt = issuedAt; self.expiresAt = expiresAt; self.badges = badges
        self.doors = doors
    }

    /// The list as JSON (sorted keys, RFC 3339 times): what the office signs.
    public func encoded() throws(TesseraError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        do { return Array(try encoder.encode(self)) } catch {
            throw TesseraError(.internalError, "cannot encode the door list: \(error)")
        }
    }

    /// Seconds since the list was issued at `now` (never negative).
    public func age(at now: Date) -> Double { max(0, now.timeIntervalSince(issuedAt)) }

    /// Whether a door deciding with this list at `now` must refuse every badge (REGISTRY_STALE): the list is older
    /// than `maxAge` seconds (the freeze bound: the door stopped hearing from the office) or past its expiry.
    public func isStale(at now: Date, maxAge: Double) -> Bool { age(at: now) > maxAge || now >= expiresAt }
}

/// A door's lookup into a list: badges by id, built once when the list is applied, so a decision's lookup does not
/// grow with the list (the doors become `AccessControl`'s `DoorTable`). Each badge is held in fixed-size values (its id and key hash as
/// bytes, its state as a number, its holder once per holder), not as the list's strings: 100,000 badges take a
/// few megabytes.
public struct DoorListIndex: Sendable {
    /// The list without its badges (they are in the index).
    public let list: DoorList
    /// How many badges the list holds.
    public let badgeCount: Int
    /// Badge id → its entry's position in `values` (a 4-byte value keeps the table small).
    private let entries: [Key: Int32]
    /// Badges whose id is not base64url of at most 31 bytes (no card makes one; kept by their text).
    private let otherEntries: [String: Int32]
    private let values: [Entry]
    private let holders: [String]
    private let states: [String]

    /// A badge id's bytes (a card UUID's 17 or a FASC-N's 26, with their tag byte) and their count in four words.
    struct Key: Hashable, Sendable {
        var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

        init?(_ id: String) {
            guard let bytes = Base64URL.decode(id), bytes.count < 32 else { return nil }
            var w: [UInt64] = [UInt64(bytes.count), 0, 0, 0]
            for (i, byte) in bytes.enumerated() { w[(i + 1) / 8] |= UInt64(byte) << (8 * UInt64((i + 1) % 8)) }
            (w0, w1, w2, w3) = (w[0], w[1], w[2], w[3])
        }
    }

    /// The holder (index into `holders`), the state (index into `states`) and the pinned keys' hashes.
    struct Entry: Sendable {
        var holder: Int32
        var state: UInt8
        var key: KeyHash?
        var authKey: KeyHash?
    }

    /// A key's SHA-256 in four words; nil in an entry: the list had none, or not 64 hex digits (no key matches it).
    struct KeyHash: Sendable, Equatable {
        var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

        init?(hex: String?) {
            guard let hex, let bytes = Hex.decode(hex), bytes.count == 32 else { return nil }
            var w: [UInt64] = [0, 0, 0, 0]
            for (i, byte) in bytes.enumerated() { w[i / 8] = w[i / 8] << 8 | UInt64(byte) }
            (w0, w1, w2, w3) = (w[0], w[1], w[2], w[3])
        }

        var hex: String {
            Hex.encode([w0, w1, w2, w3].flatMap { w in (0..<8).map { UInt8(truncatingIfNeeded: w >> (56 - 8 * $0)) } })
        }
    }

    public init(_ list: DoorList) {
        var builder = Builder(capacity: list.badges.count)
        for badge in list.badges { builder.add(badge) }
        var header = list
        header.badges = []
        self.init(header: header, builder)
    }

    init(header: DoorList, _ builder: Builder) {
        list = header
        badgeCount = builder.count
        entries = builder.entries
        otherEntries = builder.otherEntries
        values = builder.values
        holders = builder.holders
        // A list has four states; more than 256 distinct ones would alias.
        states = builder.states
    }

    /// Collects badges one at a time, so a list can be indexed while it is decoded.
    struct Builder {
        var count = 0
        var entries: [Key: Int32] = [:]
        var otherEntries: [String: Int32] = [:]
        var values: [Entry] = []
        var holders: [String] = []
        var holderIndex: [String: Int32] = [:]
        var states: [String] = []

        init(capacity: Int) {
            entries.reserveCapacity(capacity)
            values.reserveCapacity(capacity)
        }

        mutating func add(_ badge: DoorList.Badge) {
            count += 1
            let holder = holderIndex[badge.holder] ?? Int32(holders.count)
            if holder == Int32(holders.count) {
                holders.append(badge.holder)
                holderIndex[badge.holder] = holder
            }
            var state = states.firstIndex(of: badge.state)
            if state == nil {
                states.append(badge.state)
                state = states.count - 1
            }
            let entry = Entry(
                holder: holder, state: UInt8(truncatingIfNeeded: state ?? 0), key: KeyHash(hex: badge.keySHA256),
                authKey: KeyHash(hex: badge.authKeySHA256))
            let position = Int32(values.count)
            values.append(entry)
            if let id = Key(badge.id) { entries[id] = position } else { otherEntries[badge.id] = position }
        }
    }

    /// Parses the JSON of a list straight into an index: each badge is decoded, indexed and let go, so the list's
    /// badges never exist all at once as values. MALFORMED_DATA for anything else (another format included).
    public static func decode(_ bytes: [UInt8]) throws(TesseraError) -> DoorListIndex {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let streamed: Streamed
        do { streamed = try decoder.decode(Streamed.self, from: Data(bytes)) } catch {
            throw TesseraError(.malformedData, "the door list does not parse: \(error)")
        }
        guard streamed.format == DoorList.format else {
            throw TesseraError(.malformedData, "door list format \(streamed.format) is not \(DoorList.format)")
        }
        let header = DoorList(
            number: streamed.number, issuedAt: streamed.issuedAt, expiresAt: streamed.expiresAt, badges: [],
            doors: streamed.doors)
        return DoorListIndex(header: header, streamed.badges.builder)
    }

    /// A list as decoded for a door: the header's fields and the badges as an index.
    struct Streamed: Decodable {
        var format: Int
        var number: UInt64
        var issuedAt: Date
        var expiresAt: Date
        var doors: [String: DoorList.Door]
        var badges: Badges

        struct Badges: Decodable {
            var builder: Builder

            init(from decoder: any Decoder) throws {
                var container = try decoder.unkeyedContainer()
                builder = Builder(capacity: container.count ?? 0)
                while !container.isAtEnd { builder.add(try container.decode(DoorList.Badge.self)) }
            }
        }
    }

    /// The badge with id `id`; nil when the list does not name it.
    public func badge(_ id: String) -> DoorList.Badge? {
        guard let position = Key(id).flatMap({ entries[$0] }) ?? otherEntries[id] else { return nil }
        let entry = values[Int(position)]
        return DoorList.Badge(
            id: id, holder: holders[Int(entry.holder)], keySHA256: entry.key?.hex ?? "-",
            authKeySHA256: entry.authKey?.hex, state: states[Int(entry.state)])
    }
}

extension DoorList {
    /// The pinned-key hash of a badge: SHA-256 (hex) of its certificate's SubjectPublicKeyInfo.
    public static func keySHA256(_ certificate: ParsedCertificate) -> String {
        Hex.encode(MessageDigest.sha256(certificate.subjectPublicKeyInfo))
    }
}
