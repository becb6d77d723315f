import CredentialStore
import FoundationEssentials
import Ownership
import TesseraCore

/// What `passkey.enroll` (and an enrollment's PASSKEY_CREATION) does with the provisioning check.
public struct ProvisioningRule: Sendable {
    /// Provision even when the check finds the user's credentials; they become `replaced`.
    public var replace: Bool
    public init(replace: Bool) { self.replace = replace }
}

/// The answer of the pre-provisioning check (vendor document 003's decision tree, docs/LIFECYCLE.md).
public struct ProvisioningCheck: Sendable, Equatable {
    public enum Decision: String, Sendable {
        /// The user has no credential at this relying party (replaced ones do not count).
        case provision
        /// An active credential exists on the token asked about.
        case alreadyProvisioned
        /// A credential of the user is deactivated: the access-control side revoked the person.
        case deactivated
        /// A credential of the user is suspended: resume it rather than issue another.
        case suspended
        /// Active credentials exist only on other tokens: provisioning this token is allowed.
        case provisionedOnOtherToken
    }

    public var decision: Decision
    /// The user's credentials at the relying party that are not `replaced`, oldest first.
    public var credentials: [CredentialRecord]

    /// The decision tree over the user's credentials at one relying party: none (replaced ones do not count) →
    /// provision; any deactivated → deactivated; any suspended → suspended; none on `tokenId` →
    /// provisionedOnOtherToken; else alreadyProvisioned (also when `tokenId` is nil: no token to compare).
    public static func decide(_ existing: [CredentialRecord], tokenId: String?) -> ProvisioningCheck {
        let live = existing.filter { $0.state != .replaced }
        let decision: Decision
        if live.isEmpty {
            decision = .provision
        } else if live.contains(where: { $0.state == .deactivated }) {
            decision = .deactivated
        } else if live.contains(where: { $0.state == .suspended }) {
            decision = .suspended
        } else if let tokenId, !live.contains(where: { $0.tokenId == tokenId }) {
            decision = .provisionedOnOtherToken
        } else {
            decision = .alreadyProvisioned
        }
        return ProvisioningCheck(decision: decision, credentials: live)
    }

    /// Whether a new credential may be created: the ids to mark `replaced` when it is (with `replace`, every
    /// credential counted, on any token), or `CREDENTIAL_DEACTIVATED` (deactivated) / `CREDENTIAL_EXISTS`
    /// (alreadyProvisioned, suspended) without `replace`.
    public func admit(replace: Bool) throws(TesseraError) -> [[UInt8]] {
        if replace { return credentials.map { [UInt8]($0.credentialId) } }
        switch decision {
        case .provision, .provisionedOnOtherToken:
            return []
        case .alreadyProvisioned, .suspended, .deactivated:
            let details: [String: JSONValue] = [
                "decision": .string(decision.rawValue),
                "credentialIds": .array(credentials.map { .string(Base64URL.encode($0.credentialId)) }),
            ]
            if decision == .deactivated {
                throw TesseraError(
                    .credentialDeactivated,
                    "a credential of this user is deactivated; pass replace: true to issue a new one",
                    details: details)
            }
            throw TesseraError(
                .credentialExists,
                decision == .suspended
                    ? "this user's credential here is suspended; resume it, or pass replace: true to replace it"
                    : "this user already has a credential on this token; pass replace: true to replace it",
                details: details)
        }
    }
}

extension PasskeyService {
    /// The provisioning check for `userId` at `rpId` on `tokenId` (nil: the token `enroll` would choose, if any).
    /// Only `requester`'s credentials count (nil: the daemon itself, all).
    public func provisioningCheck(rpId: String, userId: [UInt8], tokenId: String?, requester: Requester? = nil)
        async throws(TesseraError) -> ProvisioningCheck
    {
        try Self.validate(rpId: rpId)
        let token: String?
        if let tokenId {
            token = (try? await self.token(named: tokenId).id) ?? tokenId
        } else {
            token = try? await chooseToken(nil).id
        }
        return ProvisioningCheck.decide(
            try await credentials(rpId: rpId, userId: userId, requester: requester), tokenId: token)
    }

    /// Moves credentials to `state` (one transaction, audit events; see `CredentialStore.transition`).
    public func transition(
        ids: [[UInt8]], to state: CredentialState, actor: String, reason: String?,
        command: (jti: String, issuer: String)? = nil
    ) async throws(TesseraError) -> [CredentialStore.Transition] {
        let result = try await store.transition(ids: ids, to: state, actor: actor, reason: reason, command: command)
        remember(result)
        logger.notice(
            "credential state changed",
            metadata: [
                "state": "\(state.rawValue)", "actor": "\(actor)",
                "changed": "\(result.filter(\.changed).count)/\(result.count)",
            ])
        return result
    }

    /// The audit trail of one credential (or of all), oldest first.
    public func history(credentialId: [UInt8]?, limit: Int = 1000) async throws(TesseraError) -> [CredentialEvent] {
        try await store.events(credentialId: credentialId, limit: limit)
    }

    /// The provisioning check of an enrollment on `tokenId` over the user's credentials: the ids to mark
    /// `replaced`, or the refusal (no rule: nothing checked, nothing replaced).
    static func admission(_ rule: ProvisioningRule?, tokenId: String)
        -> @Sendable ([CredentialRecord]) throws(TesseraError) -> [[UInt8]]
    {
        { existing throws(TesseraError) in
            guard let rule else { return [] }
            return try ProvisioningCheck.decide(existing, tokenId: tokenId).admit(replace: rule.replace)
        }
    }

    /// Updates cached records after a transition.
    func remember(_ transitions: [CredentialStore.Transition]) {
        guard !transitions.isEmpty else { return }
        records.withLock { cache in
            for t in transitions {
                let key = ByteKey([UInt8](t.record.credentialId))
                if cache[key] != nil { cache[key] = t.record }
            }
        }
    }

    /// The first active credential among `candidates` (non-empty), or the refusal of the first one's state
    /// (`CREDENTIAL_SUSPENDED`, `CREDENTIAL_DEACTIVATED`): what an assertion would sign with.
    public static func firstActive(_ candidates: [CredentialRecord]) throws(TesseraError) -> CredentialRecord {
        try signing(candidates)[0]
    }

    /// The candidates that may sign: the active ones, or the refusal of the first one's state.
    static func signing(_ candidates: [CredentialRecord]) throws(TesseraError) -> [CredentialRecord] {
        let active = candidates.filter { $0.state == .active }
        if !active.isEmpty { return active }
        let first = candidates[0]
        let details: [String: JSONValue] = [
            "credentialId": .string(Base64URL.encode(first.credentialId)),
            "state": .string(first.state.rawValue),
        ]
        if first.state == .suspended {
            throw TesseraError(.credentialSuspended, "the credential is suspended", details: details)
        }
        throw TesseraError(.credentialDeactivated, "the credential is \(first.state.rawValue)", details: details)
    }
}
