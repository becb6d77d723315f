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
/// grow with the list (the doors become `AccessControl`'s `DoorTable`). Each badge is held in fixed-size values in
/// flat arrays (its id and key hash as words, its state and flags as bytes, its holder as a number), holder names
/// once each in one byte buffer, and the lookup is an open-addressing table of 4-byte positions: about 10 MB for
/// 100,000 badges, and one probe into the table (plus the rare collision) per decision.
public struct DoorListIndex: Sendable {
    /// The list without its badges (they are in the index).
    public let list: DoorList
    /// How many badges the list holds.
    public var badgeCount: Int { ids.count }
    private let ids: [Key]
    private let keys: [KeyHash]
    /// Bit 0: the badge has a key hash; bits 1–7: its state's index into `states`.
    private let flags: [UInt8]
    private let holderOf: [UInt32]
    /// Per badge: 0, or n when `authKeys[n - 1]` is its PIV Authentication key's hash.
    private let authOf: [UInt32]
    private let authKeys: [KeyHash]
    private let holders: ByteStrings
    private let states: [String]
    /// Hash of an id → position + 1 in the arrays (0: empty slot); a power of two, at most half full.
    private let slots: [UInt32]
    /// Badges whose id is not base64url of at most 31 bytes (no card makes one; kept by their text).
    private let otherIds: [String: UInt32]

    /// A badge id's bytes (a card UUID's 17 or a FASC-N's 26, with their tag byte) and their count in four words.
    struct Key: Hashable, Sendable {
        var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

        init?(_ id: String) { self.init(utf8: Array(id.utf8)[...]) }

        init?(utf8: ArraySlice<UInt8>) {
            guard let bytes = Base64URL.decode(utf8: utf8), bytes.count < 32 else { return nil }
            var w: [UInt64] = [UInt64(bytes.count), 0, 0, 0]
            for (i, byte) in bytes.enumerated() { w[(i + 1) / 8] |= UInt64(byte) << (8 * UInt64((i + 1) % 8)) }
            (w0, w1, w2, w3) = (w[0], w[1], w[2], w[3])
        }

        init() { (w0, w1, w2, w3) = (0, 0, 0, 0) }
    }

    /// A key's SHA-256 in four words.
    struct KeyHash: Sendable, Equatable {
        var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

        /// Nil: not 64 hex digits (no key matches it).
        init?(hex: some Sequence<UInt8>) {
            guard let bytes = Hex.decode(utf8: hex), bytes.count == 32 else { return nil }
            var w: [UInt64] = [0, 0, 0, 0]
            for (i, byte) in bytes.enumerated() { w[i / 8] = w[i / 8] << 8 | UInt64(byte) }
            (w0, w1, w2, w3) = (w[0], w[1], w[2], w[3])
        }

        init() { (w0, w1, w2, w3) = (0, 0, 0, 0) }

        var hex: String {
            Hex.encode([w0, w1, w2, w3].flatMap { w in (0..<8).map { UInt8(truncatingIfNeeded: w >> (56 - 8 * $0)) } })
        }
    }

    /// Strings stored once each in one byte buffer, numbered in the order first added.
    struct ByteStrings: Sendable {
        private(set) var bytes: [UInt8] = []
        /// String n is `bytes[ends[n - 1]..<ends[n]]` (from 0 for the first).
        private(set) var ends: [UInt32] = []
        /// While adding: hash → number + 1 (0: empty), a power of two at most half full; empty once finished.
        private var table: [UInt32] = []

        var count: Int { ends.count }

        subscript(n: Int) -> String {
            String(decoding: bytes[(n == 0 ? 0 : Int(ends[n - 1]))..<Int(ends[n])], as: UTF8.self)
        }

        private func slice(_ n: Int) -> ArraySlice<UInt8> { bytes[(n == 0 ? 0 : Int(ends[n - 1]))..<Int(ends[n])] }

        /// The number of `string`, added when it is new.
        mutating func intern(_ string: ArraySlice<UInt8>) -> UInt32 {
            if table.count < 2 * (count + 1) { grow() }
            let mask = table.count - 1
            var slot = Self.hash(string) & mask
            while table[slot] != 0 {
                if slice(Int(table[slot]) - 1).elementsEqual(string) { return table[slot] - 1 }
                slot = (slot + 1) & mask
            }
            bytes.append(contentsOf: string)
            ends.append(UInt32(bytes.count))
            table[slot] = UInt32(count)
            return UInt32(count - 1)
        }

        private mutating func grow() {
            table = [UInt32](repeating: 0, count: max(64, table.count * 2))
            let mask = table.count - 1
            for n in 0..<count {
                var slot = Self.hash(slice(n)) & mask
                while table[slot] != 0 { slot = (slot + 1) & mask }
                table[slot] = UInt32(n + 1)
            }
        }

        /// Drops the interning table and spare capacity: what a door keeps.
        mutating func finish() {
            table = []
            bytes = DoorListIndex.compact(bytes)
            ends = DoorListIndex.compact(ends)
        }

        static func hash(_ string: ArraySlice<UInt8>) -> Int {
            var hasher = Hasher()
            string.withUnsafeBytes { hasher.combine(bytes: $0) }
            return hasher.finalize()
        }
    }

    public init(_ list: DoorList) {
        var builder = Builder()
        for badge in list.badges {
            builder.add(
                id: Array(badge.id.utf8)[...], holder: Array(badge.holder.utf8)[...],
                key: Array(badge.keySHA256.utf8)[...], authKey: badge.authKeySHA256.map { Array($0.utf8)[...] },
                state: badge.state)
        }
        var header = list
        header.badges = []
        self.init(header: header, builder)
    }

    init(header: DoorList, _ builder: Builder) {
        var builder = builder
        builder.holders.finish()
        list = header
        ids = Self.compact(builder.ids)
        keys = Self.compact(builder.keys)
        flags = Self.compact(builder.flags)
        holderOf = Self.compact(builder.holderOf)
        authOf = Self.compact(builder.authOf)
        authKeys = Self.compact(builder.authKeys)
        holders = builder.holders
        states = builder.states
        otherIds = builder.otherIds
        // The table: at most half full, so a probe rarely looks at a second slot.
        var size = 64
        while size < 2 * builder.ids.count { size *= 2 }
        var slots = [UInt32](repeating: 0, count: size)
        for position in builder.ids.indices where !builder.other.contains(position) {
            var slot = Self.slot(builder.ids[position], size)
            while slots[slot] != 0, builder.ids[Int(slots[slot]) - 1] != builder.ids[position] {
                slot = (slot + 1) & (size - 1)
            }
            // A repeated id: the last one counts (as a dictionary's assignment would).
            slots[slot] = UInt32(position + 1)
        }
        self.slots = slots
    }

    private static func slot(_ key: Key, _ size: Int) -> Int { key.hashValue & (size - 1) }

    /// A copy of `array` without the spare capacity its growth left.
    static func compact<T>(_ array: [T]) -> [T] { array.withUnsafeBufferPointer { Array($0) } }

    /// Collects badges one at a time, so a list is indexed while it is read.
    struct Builder {
        var ids: [Key] = []
        var keys: [KeyHash] = []
        var flags: [UInt8] = []
        var holderOf: [UInt32] = []
        var authOf: [UInt32] = []
        var authKeys: [KeyHash] = []
        var holders = ByteStrings()
        var states: [String] = []
        var otherIds: [String: UInt32] = [:]
        /// Positions of the ids in `otherIds`.
        var other: Set<Int> = []

        mutating func add(
            id: ArraySlice<UInt8>, holder: ArraySlice<UInt8>, key: ArraySlice<UInt8>, authKey: ArraySlice<UInt8>?,
            state: String
        ) {
            let position = ids.count
            var stateIndex = states.firstIndex(of: state)
            if stateIndex == nil, states.count < 127 {
                states.append(state)
                stateIndex = states.count - 1
            }
            // A list has four states; more than 127 distinct ones read as the first.
            let hash = KeyHash(hex: key)
            flags.append(UInt8(stateIndex ?? 0) << 1 | (hash == nil ? 0 : 1))
            keys.append(hash ?? KeyHash())
            holderOf.append(holders.intern(holder))
            if let authKey, let hash = KeyHash(hex: authKey) {
                authKeys.append(hash)
                authOf.append(UInt32(authKeys.count))
            } else {
                authOf.append(0)
            }
            if let key = Key(utf8: id) {
                ids.append(key)
            } else {
                ids.append(Key())
                other.insert(position)
                otherIds[String(decoding: id, as: UTF8.self)] = UInt32(position)
            }
        }
    }

    /// Reads the JSON of a list straight from its bytes into an index (`JSONPullReader`): no tree, no copy of the
    /// text, each badge indexed as it is read. MALFORMED_DATA for anything else (another format included).
    public static func decode(_ bytes: [UInt8]) throws(TesseraError) -> DoorListIndex {
        do {
            return try read(bytes)
        } catch {
            throw TesseraError(.malformedData, "the door list does not parse: \(error.message)")
        }
    }

    private static func read(_ bytes: [UInt8]) throws(TesseraError) -> DoorListIndex {
        var reader = JSONPullReader(bytes)
        var format: UInt64?, number: UInt64?, issuedAt: Date?, expiresAt: Date?
        var doors: [String: DoorList.Door]?
        var builder: Builder?
        func date(_ reader: inout JSONPullReader, _ name: String) throws(TesseraError) -> Date {
            guard let date = Date(rfc3339: try reader.string()) else { throw .invalidInput("\(name) is not a date") }
            return date
        }
        try reader.enterObject()
        while let key = try reader.nextKey() {
            switch key {
            case "format" where format == nil: format = try reader.unsignedInteger()
            case "number" where number == nil: number = try reader.unsignedInteger()
            case "issuedAt" where issuedAt == nil: issuedAt = try date(&reader, key)
            case "expiresAt" where expiresAt == nil: expiresAt = try date(&reader, key)
            case "doors" where doors == nil: doors = try readDoors(&reader)
            case "badges" where builder == nil: builder = try readBadges(&reader)
            case "format", "number", "issuedAt", "expiresAt", "doors", "badges":
                throw .invalidInput("\(key) appears twice")
            default: try reader.skipValue()
            }
        }
        try reader.end()
        guard let format, let number, let issuedAt, let expiresAt, let doors, let builder else {
            throw .invalidInput("a door list has format, number, issuedAt, expiresAt, badges and doors")
        }
        guard format == DoorList.format else {
            throw .invalidInput("door list format \(format) is not \(DoorList.format)")
        }
        let header = DoorList(number: number, issuedAt: issuedAt, expiresAt: expiresAt, badges: [], doors: doors)
        return DoorListIndex(header: header, builder)
    }

    private static func readBadges(_ reader: inout JSONPullReader) throws(TesseraError) -> Builder {
        var builder = Builder()
        try reader.enterArray()
        while try reader.nextElement() {
            var id: ArraySlice<UInt8>?, holder: ArraySlice<UInt8>?, key: ArraySlice<UInt8>?
            var authKey: ArraySlice<UInt8>?, state: String?
            try reader.enterObject()
            while let name = try reader.nextKey() {
                switch name {
                case "id": id = try reader.stringBytes()
                case "holder": holder = try reader.stringBytes()
                case "keySHA256": key = try reader.stringBytes()
                case "authKeySHA256": authKey = try reader.null() ? nil : try reader.stringBytes()
                case "state": state = try reader.string()
                default: try reader.skipValue()
                }
            }
            guard let id, let holder, let key, let state else {
                throw .invalidInput("badge \(builder.ids.count) lacks id, holder, keySHA256 or state")
            }
            builder.add(id: id, holder: holder, key: key, authKey: authKey, state: state)
        }
        return builder
    }

    private static func readDoors(_ reader: inout JSONPullReader) throws(TesseraError) -> [String: DoorList.Door] {
        func strings(_ reader: inout JSONPullReader) throws(TesseraError) -> [String] {
            var out: [String] = []
            try reader.enterArray()
            while try reader.nextElement() { out.append(try reader.string()) }
            return out
        }
        var doors: [String: DoorList.Door] = [:]
        try reader.enterObject()
        while let name = try reader.nextKey() {
            var readers: [String]?, allow: [String]?, grantCommand: [String]?, mode: String?
            try reader.enterObject()
            while let field = try reader.nextKey() {
                switch field {
                case "readers": readers = try strings(&reader)
                case "allow": allow = try strings(&reader)
                case "grantCommand": grantCommand = try reader.null() ? nil : try strings(&reader)
                case "mode": mode = try reader.null() ? nil : try reader.string()
                default: try reader.skipValue()
                }
            }
            guard let readers, let allow else { throw .invalidInput("door '\(name)' lacks readers or allow") }
            doors[name] = DoorList.Door(readers: readers, allow: allow, grantCommand: grantCommand, mode: mode)
        }
        return doors
    }

    /// The badge with id `id`; nil when the list does not name it.
    public func badge(_ id: String) -> DoorList.Badge? {
        let found: Int?
        if let key = Key(id) {
            var slot = Self.slot(key, slots.count)
            while slots[slot] != 0, ids[Int(slots[slot]) - 1] != key { slot = (slot + 1) & (slots.count - 1) }
            found = slots[slot] == 0 ? nil : Int(slots[slot]) - 1
        } else {
            found = otherIds[id].map(Int.init)
        }
        guard let position = found else { return nil }
        let flag = flags[position]
        return DoorList.Badge(
            id: id, holder: holders[Int(holderOf[position])], keySHA256: flag & 1 == 1 ? keys[position].hex : "-",
            authKeySHA256: authOf[position] == 0 ? nil : authKeys[Int(authOf[position]) - 1].hex,
            state: states[Int(flag >> 1)])
    }
}

extension DoorList {
    /// The pinned-key hash of a badge: SHA-256 (hex) of its certificate's SubjectPublicKeyInfo.
    public static func keySHA256(_ certificate: ParsedCertificate) -> String {
        Hex.encode(MessageDigest.sha256(certificate.subjectPublicKeyInfo))
    }
}
