import CredentialStore
import FoundationEssentials
import TesseraCore

/// A door's answer for one card: `{decision, reasons, cardholder, badgeId}` (docs/ACCESS.md).
public struct AccessDecision: Sendable, Equatable, Codable {
    public enum Outcome: String, Sendable, Codable { case granted, denied }

    public var decision: Outcome
    /// Every reason to deny, in check order; empty when granted.
    public var reasons: [AccessReason]
    /// The certificate subject's common name.
    public var cardholder: String?
    public var badgeId: String?
    /// The holder the badge is registered to, when it is.
    public var holder: String?
    /// The door the decision is for, when the request named one.
    public var door: String?
    /// The reader the card was on.
    public var reader: String?
    /// Command APDUs the check sent.
    public var apdus: Int
    /// Milliseconds from the card being opened to the decision.
    public var elapsedMs: Double
    /// At a door following an office's list: the list the decision used.
    public var registry: RegistryStamp?

    /// The number of the door list a decision used and its age in seconds (nil: the door has no list).
    public struct RegistryStamp: Sendable, Equatable, Codable {
        public var number: UInt64?
        public var age: Double?

        public init(number: UInt64?, age: Double?) { self.number = number; self.age = age }
    }

    /// Adds a reason to deny (after the ones the check found).
    public mutating func deny(_ reason: AccessReason) {
        if !reasons.contains(reason) { reasons.append(reason) }
        decision = .denied
    }
    /// The CRL that answered for the card's certificate, when one was consulted.
    public var crl: CRLSource?

    /// Combines the card's reading with the badge's lifecycle state (nil = not registered), whether the card's key is
    /// the one registered (`keyMismatch`) and the door rule (`admitted` nil = no door); `apdus` and `elapsed` are
    /// what the check cost.
    public init(
        reading: BadgeReading, state: CredentialState?, keyMismatch: Bool = false, admitted: Bool?,
        door: String? = nil, reader: String? = nil, apdus: Int = 0, elapsed: Duration = .zero
    ) {
        var reasons = reading.reasons
        // The lifecycle only speaks for a card whose identity the cryptography established.
        let cryptographyHolds = !reasons.contains { Self.identityUnproven.contains($0) }
        if reading.badgeId != nil && cryptographyHolds {
            if state != nil && keyMismatch { reasons.append(.badgeKeyMismatch) }
            switch state {
            case nil: reasons.append(.badgeUnknown)
            case .active?: break
            case .suspended?: reasons.append(.badgeSuspended)
            case .deactivated?: reasons.append(.badgeDeactivated)
            case .replaced?: reasons.append(.badgeReplaced)
            }
            if admitted == false { reasons.append(.doorNotAllowed) }
        }
        self.reasons = reasons
        decision = reasons.isEmpty ? .granted : .denied
        cardholder = reading.cardholder
        badgeId = reading.badgeId
        crl = reading.crl
        self.door = door
        self.reader = reader
        self.apdus = apdus
        elapsedMs = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
    }

    static let identityUnproven: Set<AccessReason> = [
        .notPIV, .cardRemoved, .certMissing, .cakSignatureInvalid, .certUntrusted, .certNoIdentifier, .cardError,
        .pinRequired, .pinInvalid, .pinLocked, .pinBackoff,
    ]

    /// The decision as JSON (what `access.check` returns and `grantCommand` reads on stdin).
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "decision": .string(decision.rawValue), "reasons": .array(reasons.map { .string($0.rawValue) }),
            "cardholder": cardholder.map(JSONValue.string) ?? .null, "badgeId": badgeId.map(JSONValue.string) ?? .null,
            "apdus": .number(Double(apdus)), "elapsedMs": .number(elapsedMs),
        ]
        if let holder { o["holder"] = .string(holder) }
        if let door { o["door"] = .string(door) }
        if let reader { o["reader"] = .string(reader) }
        if let registry {
            o["registry"] = [
                "number": registry.number.map { .number(Double($0)) } ?? .null,
                "age": registry.age.map { .number(($0 * 10).rounded() / 10) } ?? .null,
            ]
        }
        if let crl { o["crl"] = crl.json }
        return .object(o)
    }
}
