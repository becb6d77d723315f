import APDU
import CryptoPrimitives
import TesseraCore

/// The PIN state the card reports for an empty VERIFY (SP 800-73-4 Part 2 §3.2.1).
public enum PIVPINStatus: Sendable, Equatable {
    /// The PIN is verified in the current card session.
    case verified
    /// Not verified; this many tries remain.
    case notVerified(retriesLeft: Int)
    /// The retry counter is zero.
    case blocked
}

/// The identity of a PIV card from its CHUID (SP 800-73-4 Part 1 §3.1.2) or, failing that, a vendor serial.
public struct PIVCardIdentity: Sendable, Equatable {
    /// FASC-N (tag 30), when present.
    public var fascn: [UInt8]?
    /// Card UUID / GUID (tag 34), when present and not all zero.
    public var guid: [UInt8]?
    /// Vendor serial number (Yubico GET SERIAL), when the card answers it.
    public var serial: UInt32?

    public init(fascn: [UInt8]? = nil, guid: [UInt8]? = nil, serial: UInt32? = nil) {
        self.fascn = fascn; self.guid = guid; self.serial = serial
    }

    /// The bytes that identify the card: GUID, else FASC-N, else the serial; nil when the card offers none.
    public var identifyingBytes: [UInt8]? {
        if let guid { return [0x34] + guid }
        if let fascn { return [0x30] + fascn }
        if let serial {
            return [
                0x02, UInt8(serial >> 24), UInt8((serial >> 16) & 0xFF), UInt8((serial >> 8) & 0xFF),
                UInt8(serial & 0xFF),
            ]
        }
        return nil
    }

    /// Parses CHUID content (the value inside tag 53).
    public static func parseCHUID(_ content: [UInt8]) throws(TesseraError) -> PIVCardIdentity {
        let items = try TLV.parseAll(content, options: .card)
        var id = PIVCardIdentity()
        if let f = items.first(tag: 0x30), !f.value.isEmpty { id.fascn = f.value }
        if let g = items.first(tag: 0x34), g.value.contains(where: { $0 != 0 }) { id.guid = g.value }
        return id
    }
}

/// PIV Card Application commands over any APDU transport (SP 800-73-4 Part 2). No I/O of its own:
/// callers decide about connections and transactions. Every command maps the card's status words to
/// TesseraError: PIN_INVALID (data.retriesLeft), PIN_LOCKED, PIN_REQUIRED (6982), PASSKEY_NOT_FOUND
/// (6A88/6A82 for a key), CARD_ERROR (data.sw) for anything unexpected.
public struct PIVApplication: Sendable {
    public let transport: any APDUTransport
    /// Called with every command APDU sent (for counting in tests and benchmarks).
    public let onCommand: (@Sendable (CommandAPDU) -> Void)?

    public init(transport: any APDUTransport, onCommand: (@Sendable (CommandAPDU) -> Void)? = nil) {
        self.transport = transport
        self.onCommand = onCommand
    }

    func send(_ c: CommandAPDU) async throws(TesseraError) -> ResponseAPDU {
        onCommand?(c)
        // Long commands (certificates) use command chaining (ISO 7816-4 §5.1.1.1) in 255-byte pieces.
        if c.data.count > 255 && !transport.supportsExtendedLength {
            var offset = 0
            var last = ResponseAPDU(sw: .success)
            while offset < c.data.count {
                let end = min(offset + 255, c.data.count)
                let final = end == c.data.count
                let piece = CommandAPDU(
                    cla: final ? c.cla : c.cla | 0x10, ins: c.ins, p1: c.p1, p2: c.p2,
                    data: Array(c.data[offset..<end]), ne: final ? c.ne : nil)
                last = try await transport.send(piece)
                if !final && !last.sw.isSuccess { return last }
                offset = end
            }
            return last
        }
        return try await transport.send(c)
    }

    static func cardError(_ what: String, _ sw: StatusWord) -> TesseraError {
        TesseraError(.cardError, "\(what): card answered \(sw)", details: ["sw": .string(sw.description)])
    }

    // MARK: SELECT

    /// SELECT the PIV Card Application by AID; returns the application property template (tag 61) content.
    /// Throws UNSUPPORTED_PROTOCOL when the card has no PIV application.
    @discardableResult
    public func select() async throws(TesseraError) -> [UInt8] {
        let r = try await send(CommandAPDU.select(aid: PIV.aid, returning: .fci, ne: 256))
        switch r.sw {
        case .success:
            let items = (try? TLV.parseAll(r.data, options: .card)) ?? []
            return items.first(tag: 0x61)?.value ?? r.data
        case .fileNotFound, .insNotSupported, .claNotSupported, .wrongP1P2:
            throw TesseraError(.unsupportedProtocol, "no PIV application on this card (SELECT: \(r.sw))")
        default:
            throw Self.cardError("SELECT PIV", r.sw)
        }
    }

    // MARK: data objects

    /// GET DATA for one object; returns the content of its tag-53 (or 7E) wrapper, or nil when the object is absent.
    /// With an extended-length transport the whole object comes in one response (no GET RESPONSE chain); a card that
    /// answers 6700 to the extended Le is asked again with a short one.
    public func getData(_ tag: UInt32) async throws(TesseraError) -> [UInt8]? {
        let tagList = TLV.encode(tag: 0x5C, value: TLV.tagBytes(tag))
        let ne = transport.supportsExtendedLength ? 65536 : 256
        var r = try await send(CommandAPDU(ins: PIV.INS.getData, p1: 0x3F, p2: 0xFF, data: tagList, ne: ne))
        if r.sw == .wrongLength && ne > 256 {  // the extended-length hint was wrong: step down to short Le
            r = try await send(CommandAPDU(ins: PIV.INS.getData, p1: 0x3F, p2: 0xFF, data: tagList, ne: 256))
        }
        switch r.sw {
        case .success:
            guard let outer = try TLV.parseAll(r.data, options: .card).first else { return [] }
            return outer.value
        case .fileNotFound, .referenceNotFound:
            return nil
        case .securityStatusNotSatisfied:
            throw TesseraError(.pinRequired, "reading PIV object \(String(tag, radix: 16)) needs the PIN")
        default:
            throw Self.cardError("GET DATA \(String(tag, radix: 16))", r.sw)
        }
    }

    /// PUT DATA: replaces the object with `content` (wrapped in tag 53; the discovery object is not writable).
    /// Needs the management key to be authenticated first.
    public func putData(_ tag: UInt32, content: [UInt8]) async throws(TesseraError) {
        let data = TLV.encode(tag: 0x5C, value: TLV.tagBytes(tag)) + TLV.encode(tag: 0x53, value: content)
        let r = try await send(CommandAPDU(ins: PIV.INS.putData, p1: 0x3F, p2: 0xFF, data: data))
        guard r.sw.isSuccess else {
            if r.sw == .securityStatusNotSatisfied {
                throw TesseraError(.tokenError, "PUT DATA refused: the management key is not authenticated")
            }
            throw Self.cardError("PUT DATA \(String(tag, radix: 16))", r.sw)
        }
    }

    /// The card's identity from its CHUID, falling back to the Yubico serial (INS F8).
    public func identity() async throws(TesseraError) -> PIVCardIdentity {
        var id = PIVCardIdentity()
        if let chuid = try await getData(PIV.Object.chuid), !chuid.isEmpty {
            id = (try? PIVCardIdentity.parseCHUID(chuid)) ?? id
        }
        if id.guid == nil && id.fascn == nil { id.serial = try await serialNumber() }
        return id
    }

    /// Yubico GET SERIAL (00 F8 00 00); nil when the card does not answer it.
    public func serialNumber() async throws(TesseraError) -> UInt32? {
        let r = try await send(CommandAPDU(ins: PIV.INS.yubicoGetSerial, p1: 0, p2: 0, ne: 256))
        guard r.sw.isSuccess, r.data.count == 4 else { return nil }
        return r.data.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Yubico GET METADATA (INS F7) for a slot: true = a key is there, false = empty (6A88), nil = not supported.
    public func slotHasKey(_ slot: UInt8) async throws(TesseraError) -> Bool? {
        let r = try await send(CommandAPDU(ins: PIV.INS.yubicoGetMetadata, p1: 0, p2: slot, ne: 256))
        switch r.sw {
        case .success: return true
        case .referenceNotFound: return false
        default: return nil
        }
    }

    // MARK: PIN

    /// Empty VERIFY: asks for the PIN status without spending a try (Part 2 §3.2.1).
    public func pinStatus(_ reference: PIV.PINReference = .applicationPIN) async throws(TesseraError) -> PIVPINStatus {
        let r = try await send(CommandAPDU(ins: PIV.INS.verify, p1: 0x00, p2: reference.rawValue))
        if r.sw.isSuccess { return .verified }
        if let n = r.sw.retriesLeft { return n == 0 ? .blocked : .notVerified(retriesLeft: n) }
        if r.sw == .authenticationBlocked { return .blocked }
        throw Self.cardError("VERIFY (status)", r.sw)
    }

    /// VERIFY with the PIN: exactly one try (a wrong PIN costs one retry). PIN_INVALID with retriesLeft, PIN_LOCKED.
    public func verifyPIN(_ pin: String, reference: PIV.PINReference = .applicationPIN) async throws(TesseraError) {
        let r = try await send(
            CommandAPDU(ins: PIV.INS.verify, p1: 0x00, p2: reference.rawValue, data: PIV.paddedPIN(pin)))
        try Self.checkPINStatus(r.sw, what: "VERIFY")
    }

    /// VERIFY with P1 = FF: the card forgets that the PIN was verified (Part 2 §3.2.1; no try spent).
    public func resetPINStatus(_ reference: PIV.PINReference = .applicationPIN) async throws(TesseraError) {
        let r = try await send(CommandAPDU(ins: PIV.INS.verify, p1: 0xFF, p2: reference.rawValue))
        guard r.sw.isSuccess else { throw Self.cardError("VERIFY (reset)", r.sw) }
    }

    /// CHANGE REFERENCE DATA: replaces the PIN (or PUK) after checking the old one (one try).
    public func changePIN(old: String, new: String, reference: PIV.PINReference = .applicationPIN)
        async throws(TesseraError)
    {
        let data = try PIV.paddedPIN(old) + PIV.paddedPIN(new)
        let r = try await send(
            CommandAPDU(ins: PIV.INS.changeReferenceData, p1: 0x00, p2: reference.rawValue, data: data))
        try Self.checkPINStatus(r.sw, what: "CHANGE REFERENCE DATA")
    }

    static func checkPINStatus(_ sw: StatusWord, what: String) throws(TesseraError) {
        if sw.isSuccess { return }
        if let n = sw.retriesLeft {
            if n == 0 {
                throw TesseraError(.pinLocked, "wrong PIN; the PIN is now blocked", details: ["retriesLeft": 0])
            }
            throw TesseraError(.pinInvalid, "wrong PIN", details: ["retriesLeft": .number(Double(n))])
        }
        if sw == .authenticationBlocked {
            throw TesseraError(.pinLocked, "the PIN is blocked (unblock it with the PUK)")
        }
        if sw == .wrongLength || sw == .incorrectData {
            throw TesseraError.invalidInput("\(what): the card refused the PIN format (\(sw))")
        }
        throw cardError(what, sw)
    }

    // MARK: management key

    /// Mutual authentication with the card management key (9B) through GENERAL AUTHENTICATE (Part 2 §3.2.4,
    /// Appendix A.1): witness request 7C{80}, then 7C{80 decrypted witness, 81 challenge} → 7C{82 encrypted challenge}.
    /// Throws TOKEN_ERROR when the card rejects the key or its proof does not verify.
    public func authenticate(managementKey key: PIVManagementKey) async throws(TesseraError) {
        let alg = key.algorithm.rawValue
        let r1 = try await send(
            CommandAPDU(
                ins: PIV.INS.generalAuthenticate, p1: alg, p2: PIV.Slot.cardManagement,
                data: TLV.encode(tag: 0x7C, value: [0x80, 0x00]), ne: 256))
        guard r1.sw.isSuccess else {
            if r1.sw == .incorrectData || r1.sw == .wrongP1P2 || r1.sw == .referenceNotFound {
                throw TesseraError(.tokenError, "the card's management key is not \(key.algorithm) (\(r1.sw))")
            }
            throw Self.cardError("GENERAL AUTHENTICATE (witness)", r1.sw)
        }
        guard let witness = try TLV.find([0x7C, 0x80], in: r1.data, options: .card)?.value,
            witness.count == key.blockSize
        else {
            throw TesseraError(.malformedData, "GENERAL AUTHENTICATE: no witness in the card's answer")
        }
        let decrypted = try key.decryptBlock(witness)
        let challenge = SecureRandom.bytes(key.blockSize)
        let step2 = TLV(tag: 0x7C, children: [TLV(tag: 0x80, value: decrypted), TLV(tag: 0x81, value: challenge)])
            .encoded
        let r2 = try await send(
            CommandAPDU(
                ins: PIV.INS.generalAuthenticate, p1: alg, p2: PIV.Slot.cardManagement,
                data: step2, ne: 256))
        guard r2.sw.isSuccess else {
            if r2.sw == .securityStatusNotSatisfied || r2.sw == .incorrectData || r2.sw == .authenticationBlocked {
                throw TesseraError(.tokenError, "the card rejected the PIV management key")
            }
            throw Self.cardError("GENERAL AUTHENTICATE (mutual)", r2.sw)
        }
        guard let response = try TLV.find([0x7C, 0x82], in: r2.data, options: .card)?.value else {
            throw TesseraError(.malformedData, "GENERAL AUTHENTICATE: no challenge response from the card")
        }
        guard response == (try key.encryptBlock(challenge)) else {
            throw TesseraError(.tokenError, "the card failed to prove it knows the management key")
        }
    }

    // MARK: keys

    /// GENERATE ASYMMETRIC KEY PAIR (Part 2 §3.3.2) for ECC P-256 in `slot`; returns the uncompressed point (65 bytes).
    /// Needs the management key to be authenticated. Replaces whatever key the slot held.
    public func generateP256(slot: UInt8) async throws(TesseraError) -> [UInt8] {
        let template = TLV(tag: 0xAC, children: [TLV(tag: 0x80, value: [PIV.Algorithm.eccP256.rawValue])]).encoded
        let r = try await send(
            CommandAPDU(ins: PIV.INS.generateAsymmetricKeyPair, p1: 0x00, p2: slot, data: template, ne: 256))
        guard r.sw.isSuccess else {
            if r.sw == .securityStatusNotSatisfied {
                throw TesseraError(.tokenError, "GENERATE refused: the management key is not authenticated")
            }
            throw Self.cardError("GENERATE ASYMMETRIC KEY PAIR", r.sw)
        }
        guard let point = try TLV.find([0x7F49, 0x86], in: r.data, options: .card)?.value,
            point.count == 65, point[0] == 0x04
        else {
            throw TesseraError(.malformedData, "GENERATE: no P-256 point in the card's answer")
        }
        return point
    }

    /// GENERAL AUTHENTICATE with an ECC P-256 key (Part 2 §3.2.4, Appendix A.4): 7C{82 empty, 81 digest};
    /// returns the DER ECDSA signature. PIN_REQUIRED when the card wants the PIN first.
    public func signP256(slot: UInt8, digest: [UInt8]) async throws(TesseraError) -> [UInt8] {
        guard digest.count == 32 else { throw .invalidInput("a P-256 signature is over a 32-byte digest") }
        return try await sign(slot: slot, algorithm: .eccP256, challenge: digest)
    }

    /// GENERAL AUTHENTICATE with an RSA key (Part 2 §3.2.4, Appendix A.3): 7C{82 empty, 81 block}; the card applies
    /// its RSA private operation to `block` as it is, so the host pads (`Signatures.pkcs1v15Block`). `algorithm` is
    /// `.rsa2048` (a 256-byte block) or `.rsa1024` (128 bytes). Returns the signature (as long as the modulus).
    public func signRSA(slot: UInt8, algorithm: PIV.Algorithm, block: [UInt8]) async throws(TesseraError) -> [UInt8] {
        let size: Int
        switch algorithm {
        case .rsa2048: size = 256
        case .rsa1024: size = 128
        default: throw .invalidInput("\(algorithm) is not an RSA algorithm")
        }
        guard block.count == size else { throw .invalidInput("an \(algorithm) block is \(size) bytes") }
        return try await sign(slot: slot, algorithm: algorithm, challenge: block)
    }

    private func sign(slot: UInt8, algorithm: PIV.Algorithm, challenge: [UInt8]) async throws(TesseraError)
        -> [UInt8]
    {
        let template = TLV(tag: 0x7C, children: [TLV(tag: 0x82, value: []), TLV(tag: 0x81, value: challenge)])
            .encoded
        let r = try await send(
            CommandAPDU(
                ins: PIV.INS.generalAuthenticate, p1: algorithm.rawValue, p2: slot,
                data: template, ne: 256))
        switch r.sw {
        case .success:
            break
        case .securityStatusNotSatisfied:
            throw TesseraError(.pinRequired, "the card needs its PIN before it can sign")
        case .authenticationBlocked:
            throw TesseraError(.pinLocked, "the PIN is blocked")
        case .referenceNotFound, .fileNotFound, .incorrectData, .wrongP1P2:
            throw TesseraError(
                .passkeyNotFound, "no \(algorithm) key in PIV slot \(String(slot, radix: 16)) (\(r.sw))")
        default:
            throw Self.cardError("GENERAL AUTHENTICATE (sign)", r.sw)
        }
        guard let der = try TLV.find([0x7C, 0x82], in: r.data, options: .card)?.value, !der.isEmpty else {
            throw TesseraError(.malformedData, "GENERAL AUTHENTICATE: no signature in the card's answer")
        }
        return der
    }
}
