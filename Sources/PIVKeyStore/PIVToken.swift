import APDU
import CredentialStore
import Crypto
import CryptoPrimitives
import FoundationEssentials
import KeyStores
import Logging
import PCSC
import PIV
import SwiftASN1
import TesseraCore
import X509

/// One PIV card seen through the `KeyStoreToken` protocol (backend "piv").
///
/// Keys are ECC P-256 in the retired key-management slots 82…95 that Tessera created itself (recorded in
/// `PIVSlotStore`). A slot counts as free for a new key only when Tessera already owns it as free, or when
/// nothing suggests another program uses it: no certificate object, not among the first
/// `keysWithOnCardCerts + keysWithOffCardCerts` retired slots of the key history object, and — on cards that
/// answer Yubico GET METADATA — no key in it. Slots 9A/9C/9D/9E are never written; the SSH agent signs
/// with the keys of 9A and 9E when they hold a P-256 or RSA-1024/2048 certificate (`publicKeys`, `signRSA`).
///
/// PIN: a request's PIN is sent (one VERIFY, one try) in the same transaction as its signature or key generation,
/// after an empty VERIFY that reads the retry counter (no try spent) for the final-try guard, so an assertion with
/// user verification is SELECT + VERIFY (status) + VERIFY + GENERAL AUTHENTICATE, atomically.
final class PIVToken: KeyStoreToken {
    let id: String
    let reader: String
    let identity: PIVCardIdentity
    let session: PIVCardSession
    private let slots: PIVSlotStore
    private let managementKey: PIVManagementKey?
    private let logger: Logger
    private let cache = Locked(Cache())

    private struct Cache {
        var pinStatus: PIVPINStatus?
        var slotByHandle: [[UInt8]: UInt8] = [:]
        /// The certificate keys of 9A/9E (read once per insertion).
        var certificateKeys: [TokenKey]?
    }

    init(
        id: String, reader: String, identity: PIVCardIdentity, session: PIVCardSession, slots: PIVSlotStore,
        managementKey: PIVManagementKey?, pinStatus: PIVPINStatus?, logger: Logger
    ) {
        self.id = id; self.reader = reader; self.identity = identity; self.session = session; self.slots = slots
        self.managementKey = managementKey; self.logger = logger
        cache.withLock { $0.pinStatus = pinStatus }
    }

    /// "piv-" + the first 8 bytes of SHA-256 over the card's GUID (or FASC-N, or serial), in hex.
    static func tokenID(for identity: PIVCardIdentity) -> String? {
        guard let bytes = identity.identifyingBytes else { return nil }
        return "piv-" + Hex.encode(MessageDigest.sha256(bytes).prefix(8))
    }

    var backend: String { "piv" }

    var serialText: String {
        if let guid = identity.guid { return Hex.encode(guid) }
        if let serial = identity.serial { return String(serial) }
        if let fascn = identity.fascn { return Hex.encode(fascn) }
        return ""
    }

    func describe() async -> JSONValue {
        let status = cache.withLock { $0.pinStatus }
        var retries: JSONValue = .null
        var locked = false, finalTry = false, low = false, verified = false
        switch status {
        case .verified?: verified = true
        case .notVerified(let n)?:
            retries = .number(Double(n)); finalTry = n == 1; low = n < 3
        case .blocked?:
            retries = 0; locked = true
        case nil: break
        }
        return [
            "id": .string(id), "label": .string("PIV card \(serialText.suffix(8))"), "manufacturer": "PIV",
            "model": "PIV Card Application", "serial": .string(serialText), "backend": "piv", "present": true,
            "module": "pcsc", "reader": .string(reader), "pinRetriesLeft": retries,
            "flags": [
                "loginRequired": true, "loggedIn": .bool(verified), "pinCountLow": .bool(low),
                "pinFinalTry": .bool(finalTry), "pinLocked": .bool(locked), "hardware": true,
                "removable": true,
            ],
        ]
    }

    func needsPIN() async -> Bool {
        guard let status = try? await session.run({ app throws(TesseraError) in try await app.pinStatus() }) else {
            return true
        }
        cache.withLock { $0.pinStatus = status }
        return status != .verified
    }

    // MARK: PIN

    /// One operation in one transaction: SELECT, then (when the request gave a PIN) the PIN rules' checks against
    /// the card's retry counter and one VERIFY, then `body`.
    func run<T: Sendable>(pin: PINAttempt? = nil, _ body: @Sendable (PIVApplication) async throws(TesseraError) -> T)
        async throws(TesseraError) -> T
    {
        if let pin { _ = try PIV.paddedPIN(pin.pin) }  // INVALID_INPUT before anything reaches the card
        return try await session.run { app throws(TesseraError) -> T in
            if let pin {
                try await self.underPINRules(pin, app) { () async throws(TesseraError) in
                    try await app.verifyPIN(pin.pin)
                }
            }
            return try await body(app)
        }
    }

    /// Runs `check` (one PIN try: VERIFY or CHANGE REFERENCE DATA) under the PIN rules: an empty VERIFY first reads
    /// the retry counter (no try spent) for `willSpendTry`; the outcome goes to `didSpendTry` and the status cache.
    private func underPINRules(
        _ pin: PINAttempt, _ app: PIVApplication,
        _ check: () async throws(TesseraError) -> Void
    ) async throws(TesseraError) {
        let status = try await app.pinStatus()
        cache.withLock { $0.pinStatus = status }
        switch status {
        case .notVerified(let n): try pin.willSpendTry(retriesLeft: n)
        case .blocked:
            throw TesseraError(.pinLocked, "the PIN of PIV card \(id) is blocked", details: ["retriesLeft": 0])
        case .verified: try pin.willSpendTry(retriesLeft: nil)
        }
        do throws(TesseraError) {
            try await trackingPINStatus(check)
            pin.didSpendTry(nil)
        } catch {
            pin.didSpendTry(error)
            throw error
        }
    }

    /// The PIN status from an empty VERIFY (no try spent).
    func pinStatus() async throws(TesseraError) -> PIVPINStatus {
        let status = try await session.run { app throws(TesseraError) in try await app.pinStatus() }
        cache.withLock { $0.pinStatus = status }
        return status
    }

    /// CHANGE REFERENCE DATA for the application PIN (one try of `old`, under the PIN rules as for `run`).
    func changePIN(old: PINAttempt, new: String) async throws(TesseraError) {
        try await session.run { app throws(TesseraError) in
            try await self.underPINRules(old, app) { () async throws(TesseraError) in
                try await app.changePIN(old: old.pin, new: new)
            }
        }
    }

    /// Runs a PIN check (VERIFY or CHANGE REFERENCE DATA) and records what it tells about the PIN's state.
    private func trackingPINStatus(_ check: () async throws(TesseraError) -> Void) async throws(TesseraError) {
        do {
            try await check()
            cache.withLock { $0.pinStatus = .verified }
        } catch {
            if error.code == .pinInvalid, case .number(let n)? = error.details["retriesLeft"] {
                cache.withLock { $0.pinStatus = .notVerified(retriesLeft: Int(n)) }
            } else if error.code == .pinLocked {
                cache.withLock { $0.pinStatus = .blocked }
            }
            throw error
        }
    }

    // MARK: keys

    private func requireManagementKey() throws(TesseraError) -> PIVManagementKey {
        guard let managementKey else {
            throw TesseraError(
                .managementKeyRequired,
                "creating or deleting keys on PIV card \(id) needs its management key: start tesserad with --piv-management-key-file"
            )
        }
        return managementKey
    }

    func generateP256Key(handle: [UInt8], label: String, pin: PINAttempt?) async throws(TesseraError) -> [UInt8] {
        let key = try requireManagementKey()
        let slots = self.slots
        let tokenId = id
        let (slot, point) = try await run(pin: pin) { app throws(TesseraError) -> (UInt8, [UInt8]) in
            try await app.authenticate(managementKey: key)
            let owned = try await slots.slots(tokenId: tokenId)
            guard let slot = try await Self.chooseSlot(app, owned: owned) else {
                throw TesseraError(
                    .tokenError, "no free retired key slot (82…95) on PIV card \(tokenId) that Tessera may use")
            }
            // Recorded before the card is written: a crash leaves the slot known as Tessera's.
            try await slots.save(
                PIVSlotRecord(tokenId: tokenId, slot: Int(slot), state: .pending, keyHandle: Data(handle)))
            let point = try await app.generateP256(slot: slot)
            if Self.isSSHLabel(label), let certTag = PIV.Object.certificate(slot: slot) {
                try await app.putData(certTag, content: try Self.certificateObject(label: label, point: point))
            }
            try await slots.save(
                PIVSlotRecord(tokenId: tokenId, slot: Int(slot), state: .used, keyHandle: Data(handle)))
            return (slot, point)
        }
        cache.withLock {
            $0.slotByHandle[handle] = slot; $0.certificateKeys = nil
        }
        logger.info("PIV key generated", metadata: ["token": "\(id)", "slot": "\(String(slot, radix: 16))"])
        return point
    }

    /// The slot for a new key: a slot Tessera owns and no longer uses first, then a conservatively free one.
    static func chooseSlot(_ app: PIVApplication, owned: [PIVSlotRecord]) async throws(TesseraError) -> UInt8? {
        if let reusable = owned.first(where: { $0.state == .free || ($0.state == .pending) }) {
            return UInt8(reusable.slot)
        }
        let ownedSlots = Set(owned.map { UInt8($0.slot) })
        var reserved = 0
        if let history = try await app.getData(PIV.Object.keyHistory),
            let items = try? TLV.parseAll(history, options: .card)
        {
            let onCard = items.first(tag: 0xC1)?.value.first.map(Int.init) ?? 0
            let offCard = items.first(tag: 0xC2)?.value.first.map(Int.init) ?? 0
            reserved = onCard + offCard
        }
        for slot in PIV.Slot.retired where !ownedSlots.contains(slot) && Int(slot - 0x82) >= reserved {
            guard let certTag = PIV.Object.certificate(slot: slot) else { continue }
            if try await app.getData(certTag) != nil { continue }
            if try await app.slotHasKey(slot) == true { continue }
            return slot
        }
        return nil
    }

    private func slot(for handle: [UInt8]) async throws(TesseraError) -> UInt8 {
        if let s = cache.withLock({ $0.slotByHandle[handle] }) { return s }
        guard let record = try await slots.slot(tokenId: id, keyHandle: handle), record.state == .used,
            let slot = UInt8(exactly: record.slot)
        else {
            throw TesseraError(.passkeyNotFound, "no key with this handle on PIV card \(id)")
        }
        cache.withLock { $0.slotByHandle[handle] = slot }
        return slot
    }

    nonisolated(nonsending) func signP256(handle: [UInt8], message: [UInt8], pin: PINAttempt?)
        async throws(TesseraError)
        -> [UInt8]
    {
        let slot: UInt8
        if let standard = Self.certificateSlot(handle: handle) {
            slot = standard
        } else {
            slot = try await self.slot(for: handle)
        }
        let digest = MessageDigest.sha256(message)
        let der = try await run(pin: pin) { app throws(TesseraError) in
            try await app.signP256(slot: slot, digest: digest)
        }
        // Cards answer DER (SP 800-73-4 §3.2.4); some do not keep it minimal.
        return try ECDSASignature.rawFromDER(der, group: .p256, strictness: .lenient)
    }

    // MARK: SSH agent

    /// Slots whose key the SSH agent offers when a P-256 certificate is stored for it.
    static let sshCertificateSlots: [UInt8] = [PIV.Slot.authentication, PIV.Slot.cardAuthentication]
    private static let certificateHandlePrefix = Array("piv-slot:".utf8)

    /// The handle of the key in a standard slot (9A/9E): not a passkey handle (those are random 16 bytes).
    static func certificateHandle(slot: UInt8) -> [UInt8] { certificateHandlePrefix + [slot] }

    static func certificateSlot(handle: [UInt8]) -> UInt8? {
        guard handle.count == certificateHandlePrefix.count + 1, handle.starts(with: certificateHandlePrefix),
            let slot = handle.last, sshCertificateSlots.contains(slot)
        else { return nil }
        return slot
    }

    /// SSH keys made by `ssh.keygen` (`CKA_LABEL`-style labels `ssh:…` / `ssh-confirm:…`).
    static func isSSHLabel(_ label: String) -> Bool { label.hasPrefix("ssh:") || label.hasPrefix("ssh-confirm:") }

    /// The certificate object for an SSH key made in a retired slot: a certificate of the card's key whose subject
    /// CN is the label, issued by a throw-away software key (PIV has no other place for a public key and a name).
    static func certificateObject(label: String, point: [UInt8]) throws(TesseraError) -> [UInt8] {
        do {
            let issuerKey = P256.Signing.PrivateKey()
            let subject = try DistinguishedName { CommonName(label) }
            let issuer = try DistinguishedName { CommonName("Tessera SSH key") }
            let now = Date()
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(),
                publicKey: Certificate.PublicKey(try P256.Signing.PublicKey(x963Representation: point)),
                notValidBefore: now, notValidAfter: now.addingTimeInterval(100 * 365 * 86_400), issuer: issuer,
                subject: subject, signatureAlgorithm: .ecdsaWithSHA256, extensions: Certificate.Extensions(),
                issuerPrivateKey: Certificate.PrivateKey(issuerKey))
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return TLV.encode(tag: 0x70, value: serializer.serializedBytes) + TLV.encode(tag: 0x71, value: [0x00])
                + TLV.encode(tag: 0xFE, value: [])
        } catch {
            throw TesseraError(.cryptoError, "cannot build the certificate object of the SSH key: \(error)")
        }
    }

    /// The keys the SSH agent may offer (the key comes from the certificate; reading certificates needs no PIN):
    /// slots 9A and 9E that hold a P-256 or RSA-1024/2048 certificate (labelled `PIV 9a <subject>`), and keys
    /// `ssh.keygen` made in retired slots Tessera owns (labelled with their certificate's CN, `ssh:COMMENT`).
    /// Passkey keys have no certificate and are never listed. Read once per insertion (and after a key generation).
    func publicKeys() async throws(TesseraError) -> [TokenKey] {
        if let keys = cache.withLock({ $0.certificateKeys }) { return keys }
        let owned = try await slots.slots(tokenId: id).filter { $0.state == .used }
        let objects = try await session.run { app throws(TesseraError) -> [(UInt8, [UInt8], [UInt8]?)] in
            var found: [(UInt8, [UInt8], [UInt8]?)] = []
            for slot in Self.sshCertificateSlots {
                guard let tag = PIV.Object.certificate(slot: slot), let content = try await app.getData(tag) else {
                    continue
                }
                found.append((slot, content, nil))
            }
            for record in owned {
                guard let slot = UInt8(exactly: record.slot), let handle = record.keyHandle,
                    let tag = PIV.Object.certificate(slot: slot), let content = try await app.getData(tag)
                else { continue }
                found.append((slot, content, Array(handle)))
            }
            return found
        }
        var keys: [TokenKey] = []
        for (slot, content, handle) in objects {
            guard let der = (try? TLV.parseAll(content, options: .card))?.first(tag: 0x70)?.value,
                let certificate = try? Certificate(derEncoded: der),
                let value = TokenKey.Value(certificate: der), Self.rsaAlgorithm(value) != nil || value.isP256
            else {
                let slotName = String(slot, radix: 16)
                logger.debug(
                    "PIV card \(id): slot \(slotName) holds no P-256 or RSA-1024/2048 certificate; not offered to SSH")
                continue
            }
            if let handle {
                let cn = certificate.subject.flatMap { $0 }.first { $0.type == .RDNAttributeType.commonName }
                guard value.isP256, let label = cn.flatMap({ String($0.value) }), Self.isSSHLabel(label) else {
                    continue
                }
                keys.append(TokenKey(handle: handle, label: label, value: value))
            } else {
                keys.append(
                    TokenKey(
                        handle: Self.certificateHandle(slot: slot),
                        label: "PIV \(String(slot, radix: 16)) \(certificate.subject)", value: value,
                        needsPIN: slot != PIV.Slot.cardAuthentication))
            }
        }
        cache.withLock { $0.certificateKeys = keys }
        return keys
    }

    /// The PIV algorithm of an RSA key the card can sign with (RSA-1024 or RSA-2048); nil for other keys.
    static func rsaAlgorithm(_ value: TokenKey.Value) -> PIV.Algorithm? {
        guard case .rsa(let modulus, _) = value else { return nil }
        switch modulus.count {
        case 256: return .rsa2048
        case 128: return .rsa1024
        default: return nil
        }
    }

    /// RSA PKCS#1 v1.5 with the key of slot 9A or 9E: the host hashes and pads (EMSA-PKCS1-v1_5 with the
    /// DigestInfo), the card's GENERAL AUTHENTICATE (algorithm 07 or 06) applies the private key. Uses the PIN
    /// state the card session has (`ssh-add -s`); PIN_REQUIRED when the card wants the PIN.
    func signRSA(handle: [UInt8], message: [UInt8], hash: RSASignatureHash) async throws(TesseraError) -> [UInt8] {
        guard let slot = Self.certificateSlot(handle: handle),
            let key = try await publicKeys().first(where: { $0.handle == handle }),
            let algorithm = Self.rsaAlgorithm(key.value), case .rsa(let modulus, _) = key.value
        else {
            throw TesseraError(.passkeyNotFound, "no RSA key with this handle on PIV card \(id)")
        }
        let signatureHash: SignatureHash =
            switch hash {
            case .sha1: .sha1
            case .sha256: .sha256
            case .sha512: .sha512
            }
        let block = try Signatures.pkcs1v15Block(
            digest: try Signatures.digest(signatureHash, message), hash: signatureHash, length: modulus.count)
        return try await run { app throws(TesseraError) in
            try await app.signRSA(slot: slot, algorithm: algorithm, block: block)
        }
    }

    /// VERIFY under the PIN rules (one try at most); the card keeps the PIN verified in this connection.
    func login(pin: PINAttempt) async throws(TesseraError) {
        try await run(pin: pin) { _ throws(TesseraError) in }
    }

    /// Makes the card forget the verified PIN (VERIFY P1=FF).
    func logout() async {
        _ = try? await session.run { app throws(TesseraError) in try await app.resetPINStatus() }
        cache.withLock { $0.pinStatus = nil }
    }

    /// Destroys the key by generating a fresh one over it (PIV has no delete), clears the slot's certificate
    /// object if there is one, and records the slot as Tessera's free slot.
    func deleteKey(handle: [UInt8], pin: PINAttempt?) async throws(TesseraError) {
        let key = try requireManagementKey()
        guard let record = try await slots.slot(tokenId: id, keyHandle: handle), let slot = UInt8(exactly: record.slot)
        else {
            throw TesseraError(.passkeyNotFound, "no key with this handle on PIV card \(id)")
        }
        try await run(pin: pin) { app throws(TesseraError) in
            try await app.authenticate(managementKey: key)
            _ = try await app.generateP256(slot: slot)
            if let certTag = PIV.Object.certificate(slot: slot), try await app.getData(certTag) != nil {
                try await app.putData(certTag, content: [])
            }
        }
        try await slots.save(PIVSlotRecord(tokenId: id, slot: Int(slot), state: .free, keyHandle: nil))
        cache.withLock {
            $0.slotByHandle[handle] = nil; $0.certificateKeys = nil
        }
    }
}
