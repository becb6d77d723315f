import APDU
import ICAO
import TesseraCore

/// Chip Authentication v1 inside a read: DG14 is read under the access session, CA runs, the remaining files
/// are read under CA's keys. CA is `valid` once the chip answered a command correctly under the new keys and
/// DG14 passed passive authentication.
struct ChipAuthenticationStep: Sendable {
    /// `valid` only after confirmation; `notChecked` while waiting for it.
    var result: ChipAuthenticationResult
    /// What was sent, for evidence; nil when CA did not get as far as the key exchange.
    var run: ChipAuthenticationRun?
    /// The channel under CA's keys, nil when CA did not switch keys.
    var channel: SecureChannel?
    /// Keys switched; the next protected answer decides.
    var awaitingConfirmation: Bool { channel != nil && result.status == .notChecked }

    mutating func confirm() {
        guard awaitingConfirmation else { return }
        result = ChipAuthenticationResult(status: .valid, keyId: run?.keyId, mechanism: .chipAuthentication)
    }

    mutating func fail(_ error: TesseraError) {
        result = ChipAuthenticationResult(
            status: .invalid,
            reason: "the chip's answer under the Chip Authentication session keys does not verify, so it does not hold "
                + "the private key of DG14's chip authentication key (\(error.message))",
            keyId: run?.keyId, mechanism: .chipAuthentication)
        channel = nil
    }
}

extension DocumentService {
    /// The SecurityInfos of DG14 when it announces Chip Authentication v1; nil otherwise.
    static func announcedChipAuthentication(dg14 bytes: [UInt8]?) -> SecurityInfos? {
        guard let bytes, let infos = try? SecurityInfos(encoded: try DG14(parsing: bytes).securityInfos),
            ChipAuthentication.isAnnounced(in: infos)
        else { return nil }
        return infos
    }

    /// Runs CA with the preferred usable key of DG14 over `channel`. A chip that refuses it is `invalid` (the
    /// caller establishes access again); keys this reader cannot use are `notChecked`, as are keys whose
    /// protected command needs extended length when the card link (`extendedLength`) cannot carry it (DH-2048
    /// over a PN532). Retryable errors (card removed) end the read.
    static func runChipAuthentication(
        _ infos: SecurityInfos, over channel: SecureChannel,
        extendedLength: Bool
    ) async throws(TesseraError) -> ChipAuthenticationStep {
        var (candidates, problems) = ChipAuthentication.candidates(in: infos)
        if !extendedLength, var session = await channel.currentSession {
            let fitting = candidates.filter { candidate in
                // The ephemeral key has the length of the chip's public key.
                ChipAuthentication.commands(
                    algorithm: candidate.algorithm, keyId: candidate.keyId,
                    ephemeralPublicKey: candidate.publicKey
                ).allSatisfy { command in
                    (try? session.protectCommand(command))?.forceExtended == false
                }
            }
            if fitting.count < candidates.count {
                problems.append(
                    "the reader cannot send an extended-length APDU, which Chip Authentication with "
                        + candidates.filter { !fitting.contains($0) }.map { "\($0.algorithm) on \($0.domain)" }.joined(
                            separator: ", ")
                        + " needs")
            }
            candidates = fitting
        }
        guard let candidate = candidates.first else {
            return ChipAuthenticationStep(
                result: ChipAuthenticationResult(
                    status: .notChecked,
                    reason: "DG14 announces Chip Authentication this reader cannot run: "
                        + problems.joined(separator: "; "),
                    mechanism: .chipAuthentication))
        }
        do {
            let (session, run) = try await ChipAuthentication.perform(over: channel, candidate: candidate)
            return ChipAuthenticationStep(
                result: ChipAuthenticationResult(
                    status: .notChecked, reason: "awaiting the chip's answer under the new keys",
                    keyId: candidate.keyId, mechanism: .chipAuthentication),
                run: run, channel: SecureChannel(inner: channel.inner, session: session))
        } catch  where !error.retryable {
            return ChipAuthenticationStep(
                result: ChipAuthenticationResult(
                    status: .invalid,
                    reason: "the chip failed Chip Authentication (\(candidate.algorithm)): \(error.message)",
                    keyId: candidate.keyId, mechanism: .chipAuthentication))
        }
    }

    /// The final CA result: a confirmed run counts only when DG14 (the key) is authenticated by passive authentication.
    static func finishChipAuthentication(_ step: ChipAuthenticationStep, passive: PassiveAuthenticationResult?)
        -> ChipAuthenticationResult
    {
        var result = step.result
        if result.status == .notChecked && step.channel != nil {
            result = ChipAuthenticationResult(
                status: .invalid, reason: "the chip never answered under the Chip Authentication keys",
                keyId: result.keyId, mechanism: .chipAuthentication)
        }
        if result.status == .valid, passive?.dataGroupHashes[14] != .valid || passive?.signature != .valid {
            result = ChipAuthenticationResult(
                status: .invalid, reason: "DG14 is not authenticated by passive authentication",
                keyId: result.keyId, mechanism: .chipAuthentication)
        }
        return result
    }

    /// Offline re-check of a recorded CA run: CA is an online proof (the chip answered under keys only its private
    /// key gives), so the reader's record is taken; what is checked is that the key it used is the chip
    /// authentication key of a DG14 that passive authentication accepts.
    static func recheckChipAuthentication(
        status: String?, run: ChipAuthenticationRun, dg14 bytes: [UInt8]?,
        passive: PassiveAuthenticationResult
    ) -> ChipAuthenticationResult {
        func result(_ s: ChipAuthenticationResult.Status, _ reason: String) -> ChipAuthenticationResult {
            ChipAuthenticationResult(status: s, reason: reason, keyId: run.keyId, mechanism: .chipAuthentication)
        }
        guard let infos = announcedChipAuthentication(dg14: bytes) else {
            return result(.invalid, "the evidence's DG14 does not announce Chip Authentication")
        }
        guard
            infos.chipAuthenticationPublicKeyInfos.contains(where: { $0.subjectPublicKeyInfo == run.chipPublicKeyInfo })
        else {
            return result(.invalid, "the recorded chip authentication key is not in DG14")
        }
        guard passive.dataGroupHashes[14] == .valid, passive.signature == .valid else {
            return result(.invalid, "DG14 is not authenticated by passive authentication")
        }
        switch status {
        case ChipAuthenticationResult.Status.valid.rawValue:
            return result(
                .valid,
                "online proof recorded by the reader (Chip Authentication cannot be re-checked offline); the key matches DG14"
            )
        case ChipAuthenticationResult.Status.invalid.rawValue:
            return result(.invalid, "the reader recorded a failed Chip Authentication")
        default:
            return result(.notChecked, "the reader recorded no Chip Authentication outcome")
        }
    }
}
