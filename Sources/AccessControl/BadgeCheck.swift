import APDU
import CryptoPrimitives
import FoundationEssentials
import ICAO
import KeyStores
import PIV
import Passkeys
import TesseraCore
import X509
import X509Support

/// How a door checks a badge: `cak` (SP 800-116 PKI-CAK: the Card Authentication key 9E, no PIN) or `auth`
/// (PKI-AUTH: the PIV Authentication key 9A after the cardholder's PIN, two factors).
public enum AccessMode: String, Sendable, Codable, CaseIterable {
    case cak, auth

    /// The key reference whose key answers the challenge.
    public var slot: UInt8 { self == .cak ? PIV.Slot.cardAuthentication : PIV.Slot.authentication }
    /// The EKU the slot's certificate must carry when it has an EKU extension.
    var requiredEKU: String? { self == .cak ? PIVOID.cardAuth : nil }
}

/// What the card proved in one check: its identifiers, the cardholder and every reason to deny, in check order.
public struct BadgeReading: Sendable, Equatable {
    public var identifiers = BadgeIdentifiers()
    /// The certificate subject's common name.
    public var cardholder: String?
    /// Empty when the cryptography, the certificate path and the CHUID all hold.
    public var reasons: [AccessReason] = []
    /// The checked slot's certificate (DER), when the card had one.
    public var certificate: [UInt8]?
    /// The card or transport error that ended the check early, for the log.
    public var error: TesseraError?
    /// The CRL that answered for the checked certificate, when one was consulted.
    public var crl: CRLSource?
    public init() {}

    /// The badge id (`BadgeIdentifiers.badgeId`).
    public var badgeId: String? { identifiers.badgeId }
}

/// The PKI-CAK (or PKI-AUTH) check of one PIV card over any APDU transport (SP 800-116 rev. 1 §6.2.1): SELECT,
/// read the slot's certificate, sign a fresh random challenge with the slot's key and verify it with the
/// certificate's key, validate the certificate to the anchors (validity, CRLs, path, key usage, EKU), take the
/// identifiers from its subjectAltName, then read the CHUID and check its issuer signature, expiration and
/// identifiers against the certificate's. Transport-free; the caller owns the card session.
public struct BadgeCheck: Sendable {
    public let trust: BadgeTrust
    public let mode: AccessMode

    public init(trust: BadgeTrust, mode: AccessMode = .cak) {
        self.trust = trust; self.mode = mode
    }

    /// Runs the check. `pin` (auth mode) goes through its final-try guard and records its outcome. A card pulled
    /// mid-check gives CARD_REMOVED; any other card failure CARD_ERROR. Never throws: the reasons say it all.
    public func run(transport: any APDUTransport, pin: PINAttempt? = nil, now: Date = Date()) async -> BadgeReading {
        let app = PIVApplication(transport: transport)
        var reading = BadgeReading()
        do throws(TesseraError) {
            try await check(app, pin: pin, now: now, into: &reading)
        } catch {
            reading.reasons.append(Self.reason(for: error))
            reading.error = error
        }
        return reading
    }

    private func check(_ app: PIVApplication, pin: PINAttempt?, now: Date, into reading: inout BadgeReading)
        async throws(TesseraError)
    {
        try await app.select()
        guard let object = try await app.getData(PIV.Object.certificate(slot: mode.slot) ?? 0),
            let der = try? TLV.parseAll(object, options: .card).first(tag: 0x70)?.value,
            let leaf = try? ParsedCertificate(der: der), let certificate = try? Certificate(derEncoded: der)
        else {
            reading.reasons.append(.certMissing)
            return
        }
        reading.certificate = der
        reading.identifiers = BadgeIdentifiers(certificate: certificate)
        reading.cardholder = Self.commonName(certificate)
        if mode == .auth { try await verify(pin, app) }

        let challenge = SecureRandom.bytes(32)
        if !(try await challengeResponse(app, challenge: challenge, key: leaf.subjectPublicKeyInfo)) {
            reading.reasons.append(.cakSignatureInvalid)
        }
        reading.reasons += await trust.problems(leaf: leaf, requiredEKU: mode.requiredEKU, now: now)
        reading.crl = trust.answeringCRL(for: leaf, now: now)
        if reading.identifiers.badgeId == nil { reading.reasons.append(.certNoIdentifier) }

        guard let content = try await app.getData(PIV.Object.chuid), let chuid = try? CHUID(content: content) else {
            reading.reasons.append(.chuidMissing)
            return
        }
        if !(await chuidSignatureHolds(chuid, now: now)) { reading.reasons.append(.chuidSignatureInvalid) }
        if chuid.isExpired(at: now) { reading.reasons.append(.chuidExpired) }
        let ids = reading.identifiers
        if (ids.fascn != nil && ids.fascn != chuid.fascn) || (ids.uuid != nil && ids.uuid != chuid.guid) {
            reading.reasons.append(.chuidMismatch)
        }
    }

    /// VERIFY under the final-try guard; the outcome is recorded on `pin` (its caller's back-off).
    private func verify(_ pin: PINAttempt?, _ app: PIVApplication) async throws(TesseraError) {
        guard let pin else { throw TesseraError(.pinRequired, "auth mode needs the cardholder's PIN") }
        switch try await app.pinStatus() {
        case .verified: try pin.willSpendTry(retriesLeft: nil)
        case .notVerified(let n): try pin.willSpendTry(retriesLeft: n)
        case .blocked: throw TesseraError(.pinLocked, "the PIN of this badge is blocked")
        }
        do throws(TesseraError) {
            try await app.verifyPIN(pin.pin)
            pin.didSpendTry(nil)
        } catch {
            if error.code == .pinInvalid || error.code == .pinLocked { pin.didSpendTry(error) }
            throw error
        }
    }

    /// GENERAL AUTHENTICATE with the slot's key over SHA-256 of `challenge` (P-256), or its PKCS#1 v1.5 block
    /// (RSA), verified with the certificate's key. False for a wrong signature or a card without that key.
    private func challengeResponse(_ app: PIVApplication, challenge: [UInt8], key spki: [UInt8])
        async throws(TesseraError) -> Bool
    {
        let description = try Signatures.describe(publicKey: spki)
        let signature: [UInt8]
        let scheme: SignatureScheme
        do throws(TesseraError) {
            if description.kind == .rsa {
                let size = description.bits / 8
                let block = try Signatures.pkcs1v15Block(
                    digest: MessageDigest.sha256(challenge), hash: .sha256, length: size)
                signature = try await app.signRSA(
                    slot: mode.slot, algorithm: size == 128 ? .rsa1024 : .rsa2048, block: block)
                scheme = .rsaPKCS1v15(.sha256)
            } else {
                signature = try await app.signP256(slot: mode.slot, digest: MessageDigest.sha256(challenge))
                scheme = .ecdsa(.sha256)
            }
        } catch {
            // A card that has the certificate but not the key (a copy) cannot sign: the same as a wrong signature.
            if error.code == .passkeyNotFound { return false }
            throw error
        }
        return (try? Signatures.verify(signature, over: challenge, publicKey: spki, scheme: scheme)) ?? false
    }

    /// The CHUID's detached CMS signature verifies over its content, with a signer certificate (included in the
    /// SignedData) that chains to an anchor with id-PIV-content-signing where it has an EKU.
    func chuidSignatureHolds(_ chuid: CHUID, now: Date) async -> Bool {
        guard let bytes = chuid.signature,
            var signed = try? CMSSignedData(contentInfo: bytes, detachedAllowed: true),
            signed.contentType == PIVOID.chuidSecurityObject, signed.signerInfos.count == 1,
            let signer = signed.signerInfos.first, let signerCertificate = signed.certificate(for: signer)
        else { return false }
        if !signed.content.isEmpty && signed.content != chuid.signedContent { return false }
        signed.content = chuid.signedContent
        guard signed.verify(signer, signerKey: signerCertificate.subjectPublicKeyInfo) == .valid else { return false }
        return await trust.problems(leaf: signerCertificate, requiredEKU: PIVOID.contentSigning, now: now).isEmpty
    }

    static func commonName(_ certificate: Certificate) -> String? {
        for rdn in certificate.subject {
            for attribute in rdn where attribute.type == .RDNAttributeType.commonName {
                return String(describing: attribute.value)
            }
        }
        return nil
    }

    static func reason(for error: TesseraError) -> AccessReason {
        switch error.code {
        case .cardRemoved, .noCard, .cardReset, .noReader: .cardRemoved
        case .unsupportedProtocol: .notPIV
        case .pinRequired: .pinRequired
        case .pinInvalid: .pinInvalid
        case .pinLocked, .pinFinalTryProtected: .pinLocked
        case .pinBackoff: .pinBackoff
        default: .cardError
        }
    }
}
