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
    /// registered to, the SHA-256 of its pinned Card Authentication public key (SubjectPublicKeyInfo, hex) and its
    /// state (`active`, `suspended`, `deactivated`, `replaced`).
    public struct Badge: Sendable, Equatable, Codable {
        public var id: String
        public var holder: String
        public var keySHA256: String
        public var state: String

        public init(id: String, holder: String, keySHA256: String, state: String) {
            self.id = id; self.holder = holder; self.keySHA256 = keySHA256; self.state = state
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

    /// Parses the JSON of a list. MALFORMED_DATA for anything else (another format included).
    public static func decode(_ bytes: [UInt8]) throws(TesseraError) -> DoorList {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let list: DoorList
        do { list = try decoder.decode(DoorList.self, from: Data(bytes)) } catch {
            throw TesseraError(.malformedData, "the door list does not parse: \(error)")
        }
        guard list.format == format else {
            throw TesseraError(.malformedData, "door list format \(list.format) is not \(format)")
        }
        return list
    }

    /// Seconds since the list was issued at `now` (never negative).
    public func age(at now: Date) -> Double { max(0, now.timeIntervalSince(issuedAt)) }

    /// Whether a door deciding with this list at `now` must refuse every badge (REGISTRY_STALE): the list is older
    /// than `maxAge` seconds (the freeze bound: the door stopped hearing from the office) or past its expiry.
    public func isStale(at now: Date, maxAge: Double) -> Bool { age(at: now) > maxAge || now >= expiresAt }
}

/// A door's lookups into a list: badges by id and doors by reader, built once when the list is applied, so a
/// decision's lookup does not grow with the list.
public struct DoorListIndex: Sendable {
    /// The list without its badges (they are in `badges`).
    public let list: DoorList
    /// How many badges the list holds.
    public let badgeCount: Int
    public let badges: [String: DoorList.Badge]
    /// Reader name → the door it belongs to.
    public let doorOfReader: [String: String]
    /// Door name → the holders and badge ids it admits.
    public let allowed: [String: Set<String>]

    public init(_ list: DoorList) {
        var header = list
        header.badges = []
        self.list = header
        badgeCount = list.badges.count
        var badges: [String: DoorList.Badge] = [:]
        badges.reserveCapacity(list.badges.count)
        for badge in list.badges { badges[badge.id] = badge }
        self.badges = badges
        var readers: [String: String] = [:]
        for (name, door) in list.doors { for reader in door.readers { readers[reader] = name } }
        doorOfReader = readers
        allowed = list.doors.mapValues { Set($0.allow) }
    }
}

extension DoorList {
    /// The pinned-key hash of a badge: SHA-256 (hex) of its certificate's SubjectPublicKeyInfo.
    public static func keySHA256(_ certificate: ParsedCertificate) -> String {
        Hex.encode(MessageDigest.sha256(certificate.subjectPublicKeyInfo))
    }
}
