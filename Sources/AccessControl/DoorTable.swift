import TesseraCore

/// One door: the readers that are its own, whom it admits, how it checks a badge and what a grant runs.
public struct DoorRule: Sendable, Equatable {
    /// Matches every registered badge in `allow`.
    public static let everyBadge = "*"

    public var name: String
    /// Reader names (PC/SC names, libnfc connstrings) of this door.
    public var readers: [String]
    /// Holders (as registered) and badge ids admitted; `*` admits every registered badge.
    public var allow: Set<String>
    public var mode: AccessMode
    /// argv run on each grant at this door (nil: the door runs none of its own).
    public var grantCommand: [String]?

    public init(
        name: String, readers: [String], allow: Set<String>, mode: AccessMode = .cak, grantCommand: [String]? = nil
    ) {
        self.name = name; self.readers = readers; self.allow = allow; self.mode = mode
        self.grantCommand = grantCommand
    }

    /// Whether the badge of `holder` / `badgeId` may pass (the lifecycle and cryptography are checked elsewhere).
    public func admits(holder: String?, badgeId: String?) -> Bool {
        if allow.contains(Self.everyBadge) { return holder != nil }
        return [holder, badgeId].contains { $0.map(allow.contains) ?? false }
    }
}

/// The doors of a site and the reader → door map: a reader belongs to at most one door. Pure, so that the
/// configuration and a signed door list build it alike.
public struct DoorTable: Sendable, Equatable {
    public let doors: [String: DoorRule]
    private let doorOfReader: [String: String]

    /// Refuses (INVALID_INPUT) a door without readers, an empty reader name, and a reader named by two doors.
    public init(_ rules: [DoorRule]) throws(TesseraError) {
        var doors: [String: DoorRule] = [:]
        var doorOfReader: [String: String] = [:]
        for rule in rules.sorted(by: { $0.name < $1.name }) {
            guard !rule.name.isEmpty else { throw TesseraError.invalidInput("a door needs a name") }
            guard doors[rule.name] == nil else { throw TesseraError.invalidInput("door '\(rule.name)' twice") }
            guard !rule.readers.isEmpty, !rule.readers.contains(where: \.isEmpty) else {
                throw TesseraError.invalidInput("door '\(rule.name)' needs readers: [READER...] (non-empty names)")
            }
            for reader in rule.readers {
                if let other = doorOfReader[reader] {
                    let which =
                        other == rule.name ? "twice by door '\(other)'" : "by doors '\(other)' and '\(rule.name)'"
                    throw TesseraError.invalidInput(
                        "reader '\(reader)' is named \(which): a reader belongs to at most one door")
                }
                doorOfReader[reader] = rule.name
            }
            doors[rule.name] = rule
        }
        self.doors = doors
        self.doorOfReader = doorOfReader
    }

    /// No doors: every reader is a reader of no door.
    public init() {
        doors = [:]
        doorOfReader = [:]
    }

    public var isEmpty: Bool { doors.isEmpty }

    /// The door `reader` belongs to; nil for a reader of no door.
    public func door(ofReader reader: String) -> DoorRule? { doorOfReader[reader].flatMap { doors[$0] } }

    /// Every door's readers, sorted.
    public var readers: [String] { doorOfReader.keys.sorted() }
}
