import APDU
import Crypto
import CryptoPrimitives
import FoundationEssentials
import PIV
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// A PIV card (NIST SP 800-73-4) emulated in process, for tests and the lab (`tessera lab emulate-piv`).
///
/// Implements SELECT, GET DATA / PUT DATA (with command chaining and GET RESPONSE), VERIFY (incl. the empty
/// status query), CHANGE REFERENCE DATA, RESET RETRY COUNTER, GENERAL AUTHENTICATE (management-key witness /
/// challenge with 3DES or AES, ECC P-256 and RSA-1024/2048 signing), GENERATE ASYMMETRIC KEY PAIR (P-256) and the Yubico
/// GET SERIAL / GET METADATA extensions. PIN policy: every slot but 9E needs the PIN verified in the card session.
/// With a state file, every change is saved, so a restart is a card re-insertion.
public actor EmulatedPIVCard: VirtualCard {
    /// The ATR: T=1, historical bytes with card capabilities (chaining, extended Lc/Le) and "PIV" in them.
    public static let defaultATR: [UInt8] = {
        let historical: [UInt8] = [0x80, 0x73, 0xC0, 0x21, 0xC0, 0x56, 0x54, 0x45, 0x53, 0x53, 0x50, 0x49, 0x56]
        var atr: [UInt8] = [0x3B, 0x80 | UInt8(historical.count), 0x80, 0x01] + historical
        atr.append(atr.dropFirst().reduce(0, ^))
        return atr
    }()

    public private(set) var state: PIVCardState
    private let stateFile: String?
    private let atrBytes: [UInt8]

    // Volatile (card session) state.
    private var selected = false
    private var pinVerified = false
    private var managementAuthenticated = false
    /// Witness (plain) of a running mutual authentication, or the challenge of an external authentication.
    private var pendingWitness: [UInt8]?
    private var pendingChallenge: [UInt8]?
    private var outgoing: [UInt8] = []
    private var chained: (header: [UInt8], data: [UInt8])?

    // Test instrumentation.
    /// Every command APDU received, in order.
    public private(set) var commands: [[UInt8]] = []
    private var delays: [UInt8: Duration] = [:]

    /// A card with `state`; with `stateFile`, changes are saved there.
    public init(state: PIVCardState, stateFile: String? = nil, atr: [UInt8] = EmulatedPIVCard.defaultATR) {
        self.state = state
        self.stateFile = stateFile
        self.atrBytes = atr
    }

    /// Loads the card from `stateFile`, or creates a factory-new one with `serial` there.
    public static func open(stateFile: String, serial: UInt32 = 1) throws(TesseraError) -> EmulatedPIVCard {
        if let state = try PIVCardState.load(stateFile) {
            return EmulatedPIVCard(state: state, stateFile: stateFile)
        }
        let state = PIVCardState.factoryNew(serial: serial)
        try state.save(stateFile)
        return EmulatedPIVCard(state: state, stateFile: stateFile)
    }

    public var atr: [UInt8] { atrBytes }
    public func powerOn() { resetSession() }
    public func powerOff() { resetSession() }
    public func reset() { resetSession() }

    private func resetSession() {
        selected = false
        pinVerified = false
        managementAuthenticated = false
        pendingWitness = nil
        pendingChallenge = nil
        outgoing = []
        chained = nil
    }

    /// Makes the card answer commands with instruction `ins` only after `delay` (nil removes it), so a test can
    /// pull the card in the middle of an operation.
    public func setDelay(_ delay: Duration?, forInstruction ins: UInt8) { delays[ins] = delay }

    /// Forgets the recorded commands.
    public func clearCommands() { commands = [] }

    /// The slots holding a key.
    public var keySlots: [UInt8] { state.keys.keys.compactMap { UInt8($0, radix: 16) }.sorted() }

    /// The public key (uncompressed point) in `slot`, if any.
    public func publicKey(slot: UInt8) -> [UInt8]? {
        guard let k = state.keys[PIVCardState.key(slot: slot)], let d = Hex.decode(k.privateKey),
            let key = try? P256.Signing.PrivateKey(rawRepresentation: d)
        else { return nil }
        return Array(key.publicKey.x963Representation)
    }

    // MARK: APDU processing

    public func process(_ command: [UInt8]) async -> [UInt8] {
        if commands.count >= 100_000 { commands.removeFirst(50_000) }  // a long lab session stays bounded
        commands.append(command)
        if command.count >= 2, let delay = delays[command[1]] { try? await Task.sleep(for: delay) }
        return handle(command).encoded
    }

    private func handle(_ raw: [UInt8]) -> ResponseAPDU {
        guard var c = try? CommandAPDU(parsing: raw) else { return ResponseAPDU(sw: .wrongLength) }
        if c.ins == PIV.INS.getResponse { return nextChunk(c.ne ?? 256) }
        outgoing = []
        // Command chaining (CLA bit 5): collect the pieces, answer 9000 until the last one.
        let header = [c.cla & ~0x10, c.ins, c.p1, c.p2]
        if c.cla & 0x10 != 0 {
            if let prior = chained, prior.header == header {
                chained = (header, prior.data + c.data)
            } else {
                chained = (header, c.data)
            }
            return ResponseAPDU(sw: .success)
        }
        if let prior = chained {
            chained = nil
            guard prior.header == header else { return ResponseAPDU(sw: StatusWord(0x6883)) }
            c.data = prior.data + c.data
        }
        guard c.cla & 0xEF == 0x00 else { return ResponseAPDU(sw: .claNotSupported) }
        let response: ResponseAPDU
        switch c.ins {
        case PIV.INS.select: response = select(c)
        case _ where !selected: response = ResponseAPDU(sw: .insNotSupported)
        case PIV.INS.getData: response = getData(c)
        case PIV.INS.putData: response = putData(c)
        case PIV.INS.verify: response = verify(c)
        case PIV.INS.changeReferenceData: response = changeReference(c)
        case PIV.INS.resetRetryCounter: response = resetRetryCounter(c)
        case PIV.INS.generalAuthenticate: response = generalAuthenticate(c)
        case PIV.INS.generateAsymmetricKeyPair: response = generate(c)
        case PIV.INS.yubicoGetSerial:
            let s = state.serial
            response = ResponseAPDU(
                data: [UInt8(s >> 24), UInt8((s >> 16) & 0xFF), UInt8((s >> 8) & 0xFF), UInt8(s & 0xFF)],
                sw: .success)
        case PIV.INS.yubicoGetMetadata: response = metadata(c)
        default: response = ResponseAPDU(sw: .insNotSupported)
        }
        return chunked(response, ne: c.ne ?? 0, extended: c.isExtended)
    }

    /// Short-Le answers longer than Ne go out in pieces with 61xx (GET RESPONSE).
    private func chunked(_ r: ResponseAPDU, ne: Int, extended: Bool) -> ResponseAPDU {
        guard r.sw.isSuccess, !extended else { return r }
        let limit = ne == 0 ? 256 : min(ne, 256)
        guard r.data.count > limit else { return r }
        outgoing = Array(r.data[limit...])
        return ResponseAPDU(data: Array(r.data[..<limit]), sw: Self.more(outgoing.count))
    }

    private func nextChunk(_ ne: Int) -> ResponseAPDU {
        guard !outgoing.isEmpty else { return ResponseAPDU(sw: .conditionsNotSatisfied) }
        let n = min(ne, outgoing.count)
        let piece = Array(outgoing[..<n])
        outgoing.removeFirst(n)
        return ResponseAPDU(data: piece, sw: outgoing.isEmpty ? .success : Self.more(outgoing.count))
    }

    private static func more(_ remaining: Int) -> StatusWord {
        StatusWord(sw1: 0x61, sw2: remaining >= 256 ? 0 : UInt8(remaining))
    }

    private func select(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0x04, !c.data.isEmpty, c.data.count <= PIV.aid.count,
            Array(PIV.aid.prefix(c.data.count)) == c.data, c.data.count >= PIV.rid.count
        else {
            selected = false
            return ResponseAPDU(sw: .fileNotFound)
        }
        selected = true
        // Application property template (Part 2 §3.1.1): PIX (4F) and coexistent tag allocation authority (79).
        let algorithms =
            [0x03, 0x08, 0x0A, 0x0C, 0x11].map { TLV(tag: 0x80, value: [$0]) } + [TLV(tag: 0x06, value: [0x00])]
        let apt = TLV(
            tag: 0x61,
            children: [
                TLV(tag: 0x4F, value: Array(PIV.aid[5...])),
                TLV(tag: 0x79, children: [TLV(tag: 0x4F, value: PIV.rid)]),
                TLV(tag: 0x50, value: Array("Tessera emulated PIV".utf8)),
                TLV(tag: 0xAC, children: algorithms),
            ])
        return ResponseAPDU(data: apt.encoded, sw: .success)
    }

    private func getData(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0x3F, c.p2 == 0xFF, let list = try? TLV.parseAll(c.data, options: .card),
            let t = list.first(tag: 0x5C),
            (1...3).contains(t.value.count)
        else { return ResponseAPDU(sw: .incorrectData) }
        let tag = t.value.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard let hex = state.objects[PIVCardState.key(tag)], let content = Hex.decode(hex) else {
            return ResponseAPDU(sw: .fileNotFound)
        }
        if tag == PIV.Object.discovery {
            return ResponseAPDU(data: TLV.encode(tag: 0x7E, value: content), sw: .success)
        }
        // Printed information and other PIN-protected objects are not emulated; everything else is free-read.
        return ResponseAPDU(data: TLV.encode(tag: 0x53, value: content), sw: .success)
    }

    private func putData(_ c: CommandAPDU) -> ResponseAPDU {
        guard managementAuthenticated else { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        guard c.p1 == 0x3F, c.p2 == 0xFF, let items = try? TLV.parseAll(c.data, options: .card),
            let t = items.first(tag: 0x5C),
            (1...3).contains(t.value.count), let body = items.first(tag: 0x53)
        else {
            return ResponseAPDU(sw: .incorrectData)
        }
        let tag = t.value.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard tag != PIV.Object.discovery else { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        if body.value.isEmpty {
            state.objects[PIVCardState.key(tag)] = nil
        } else {
            state.objects[PIVCardState.key(tag)] = Hex.encode(body.value)
        }
        save()
        return ResponseAPDU(sw: .success)
    }

    // MARK: PIN and PUK

    private func pinMatches(_ data: [UInt8], _ secret: String) -> Bool {
        (try? PIV.paddedPIN(secret)) == data
    }

    private func verify(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0x00 || c.p1 == 0xFF else { return ResponseAPDU(sw: .wrongP1P2) }
        guard c.p2 == 0x80 else { return ResponseAPDU(sw: .referenceNotFound) }
        if c.p1 == 0xFF {  // reset the security status of the PIN
            pinVerified = false
            return ResponseAPDU(sw: .success)
        }
        if c.data.isEmpty {
            if pinVerified { return ResponseAPDU(sw: .success) }
            return ResponseAPDU(sw: state.pinRetries == 0 ? .authenticationBlocked : Self.retries(state.pinRetries))
        }
        guard c.data.count == 8 else { return ResponseAPDU(sw: .wrongLength) }
        guard state.pinRetries > 0 else { return ResponseAPDU(sw: .authenticationBlocked) }
        if pinMatches(c.data, state.pin) {
            state.pinRetries = state.pinMaxRetries
            pinVerified = true
            save()
            return ResponseAPDU(sw: .success)
        }
        state.pinRetries -= 1
        pinVerified = false
        save()
        return ResponseAPDU(sw: Self.retries(state.pinRetries))
    }

    private static func retries(_ n: Int) -> StatusWord { StatusWord(0x63C0 | UInt16(min(n, 15))) }

    private func changeReference(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0x00, c.p2 == 0x80 || c.p2 == 0x81 else { return ResponseAPDU(sw: .wrongP1P2) }
        guard c.data.count == 16 else { return ResponseAPDU(sw: .wrongLength) }
        let isPIN = c.p2 == 0x80
        let old = Array(c.data[..<8]), new = Array(c.data[8...])
        let retries = isPIN ? state.pinRetries : state.pukRetries
        guard retries > 0 else { return ResponseAPDU(sw: .authenticationBlocked) }
        guard pinMatches(old, isPIN ? state.pin : state.puk) else {
            if isPIN { state.pinRetries -= 1; pinVerified = false } else { state.pukRetries -= 1 }
            save()
            return ResponseAPDU(sw: Self.retries(isPIN ? state.pinRetries : state.pukRetries))
        }
        guard let text = Self.unpad(new) else { return ResponseAPDU(sw: .incorrectData) }
        if isPIN {
            state.pin = text; state.pinRetries = state.pinMaxRetries; pinVerified = true
        } else {
            state.puk = text; state.pukRetries = state.pukMaxRetries
        }
        save()
        return ResponseAPDU(sw: .success)
    }

    /// RESET RETRY COUNTER: PUK (8) + new PIN (8) unblocks the PIN.
    private func resetRetryCounter(_ c: CommandAPDU) -> ResponseAPDU {
        guard c.p1 == 0x00, c.p2 == 0x80 else { return ResponseAPDU(sw: .wrongP1P2) }
        guard c.data.count == 16 else { return ResponseAPDU(sw: .wrongLength) }
        guard state.pukRetries > 0 else { return ResponseAPDU(sw: .authenticationBlocked) }
        guard pinMatches(Array(c.data[..<8]), state.puk) else {
            state.pukRetries -= 1
            save()
            return ResponseAPDU(sw: Self.retries(state.pukRetries))
        }
        guard let text = Self.unpad(Array(c.data[8...])) else { return ResponseAPDU(sw: .incorrectData) }
        state.pin = text
        state.pinRetries = state.pinMaxRetries
        state.pukRetries = state.pukMaxRetries
        save()
        return ResponseAPDU(sw: .success)
    }

    private static func unpad(_ bytes: [UInt8]) -> String? {
        let core = bytes.prefix { $0 != 0xFF }
        guard (6...8).contains(core.count), bytes.dropFirst(core.count).allSatisfy({ $0 == 0xFF }),
            core.allSatisfy({ $0 >= 0x20 && $0 < 0x7F })
        else { return nil }
        return String(decoding: core, as: UTF8.self)
    }

    // MARK: GENERAL AUTHENTICATE

    private var managementKey: PIVManagementKey? {
        guard let alg = PIV.Algorithm(rawValue: state.managementAlgorithm), let key = Hex.decode(state.managementKey)
        else {
            return nil
        }
        return try? PIVManagementKey(algorithm: alg, key: key)
    }

    private func generalAuthenticate(_ c: CommandAPDU) -> ResponseAPDU {
        guard let outer = (try? TLV.parseAll(c.data, options: .card))?.first(tag: 0x7C),
            let items = try? TLV.parseAll(outer.value, options: .card)
        else {
            return ResponseAPDU(sw: .incorrectData)
        }
        if c.p2 == PIV.Slot.cardManagement { return authenticateManagement(c.p1, items) }
        return sign(c.p1, slot: c.p2, items)
    }

    private func authenticateManagement(_ algorithm: UInt8, _ items: [TLV]) -> ResponseAPDU {
        guard let key = managementKey, algorithm == state.managementAlgorithm else {
            pendingWitness = nil
            return ResponseAPDU(sw: .incorrectData)
        }
        let witness = items.first(tag: 0x80), challenge = items.first(tag: 0x81), response = items.first(tag: 0x82)
        do {
            if let witness, witness.value.isEmpty, challenge == nil {
                // Mutual authentication, step 1: a fresh witness, encrypted.
                let plain = SecureRandom.bytes(key.blockSize)
                pendingWitness = plain
                managementAuthenticated = false
                let encrypted = TLV(tag: 0x80, value: try key.encryptBlock(plain))
                return ResponseAPDU(data: TLV(tag: 0x7C, children: [encrypted]).encoded, sw: .success)
            }
            if let witness, let challenge, !witness.value.isEmpty {
                // Step 2: the host decrypted the witness and challenges the card.
                defer { pendingWitness = nil }
                guard let expected = pendingWitness, expected == witness.value, challenge.value.count == key.blockSize
                else {
                    managementAuthenticated = false
                    return ResponseAPDU(sw: .securityStatusNotSatisfied)
                }
                managementAuthenticated = true
                let proof = TLV(tag: 0x82, value: try key.encryptBlock(challenge.value))
                return ResponseAPDU(data: TLV(tag: 0x7C, children: [proof]).encoded, sw: .success)
            }
            if let challenge, challenge.value.isEmpty {
                // External authentication, step 1: a challenge for the host to encrypt.
                let plain = SecureRandom.bytes(key.blockSize)
                pendingChallenge = plain
                managementAuthenticated = false
                return ResponseAPDU(
                    data: TLV(tag: 0x7C, children: [TLV(tag: 0x81, value: plain)]).encoded, sw: .success)
            }
            if let response, !response.value.isEmpty {
                defer { pendingChallenge = nil }
                guard let plain = pendingChallenge, response.value == (try key.encryptBlock(plain)) else {
                    managementAuthenticated = false
                    return ResponseAPDU(sw: .securityStatusNotSatisfied)
                }
                managementAuthenticated = true
                return ResponseAPDU(sw: .success)
            }
        } catch {
            return ResponseAPDU(sw: .unknown)
        }
        return ResponseAPDU(sw: .incorrectData)
    }

    /// ECC P-256: ECDSA over the digest, DER. RSA-1024/2048: the raw private operation on the block (the host pads).
    private func sign(_ algorithm: UInt8, slot: UInt8, _ items: [TLV]) -> ResponseAPDU {
        guard let stored = state.keys[PIVCardState.key(slot: slot)] else { return ResponseAPDU(sw: .referenceNotFound) }
        let rsa = [PIV.Algorithm.rsa1024.rawValue, PIV.Algorithm.rsa2048.rawValue]
        guard algorithm == stored.algorithm, algorithm == PIV.Algorithm.eccP256.rawValue || rsa.contains(algorithm)
        else {
            return ResponseAPDU(sw: .incorrectData)
        }
        guard let request = items.first(tag: 0x82), request.value.isEmpty, let input = items.first(tag: 0x81)?.value
        else {
            return ResponseAPDU(sw: .incorrectData)
        }
        if slot != PIV.Slot.cardAuthentication && !pinVerified { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        guard let d = Hex.decode(stored.privateKey) else { return ResponseAPDU(sw: .incorrectData) }
        let signature: [UInt8]
        if rsa.contains(algorithm) {
            guard let s = try? Signatures.rsaRawSign(input, privateKey: d) else {
                return ResponseAPDU(sw: .incorrectData)
            }
            signature = s
        } else {
            guard input.count == 32, let key = try? P256.Signing.PrivateKey(rawRepresentation: d),
                let s = try? key.signature(for: PrehashedDigest(bytes: input))
            else {
                return ResponseAPDU(sw: .incorrectData)
            }
            signature = Array(s.derRepresentation)
        }
        return ResponseAPDU(
            data: TLV(tag: 0x7C, children: [TLV(tag: 0x82, value: signature)]).encoded, sw: .success)
    }

    // MARK: keys

    private func generate(_ c: CommandAPDU) -> ResponseAPDU {
        guard managementAuthenticated else { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        guard c.p1 == 0x00, PIV.Object.certificate(slot: c.p2) != nil else { return ResponseAPDU(sw: .wrongP1P2) }
        guard let alg = (try? TLV.find([0xAC, 0x80], in: c.data, options: .card))?.value, alg.count == 1 else {
            return ResponseAPDU(sw: .incorrectData)
        }
        guard alg[0] == PIV.Algorithm.eccP256.rawValue else { return ResponseAPDU(sw: .wrongP1P2) }
        let key = P256.Signing.PrivateKey()
        state.keys[PIVCardState.key(slot: c.p2)] = .init(
            algorithm: alg[0], privateKey: Hex.encode(key.rawRepresentation))
        save()
        let point = Array(key.publicKey.x963Representation)
        return ResponseAPDU(data: TLV(tag: 0x7F49, children: [TLV(tag: 0x86, value: point)]).encoded, sw: .success)
    }

    /// Yubico GET METADATA subset: algorithm (01), policy (02: PIN once, touch never), origin (03: generated), public key (04).
    private func metadata(_ c: CommandAPDU) -> ResponseAPDU {
        if c.p2 == PIV.Slot.cardManagement {
            return ResponseAPDU(
                data: TLV.encode(tag: 0x01, value: [state.managementAlgorithm])
                    + TLV.encode(tag: 0x02, value: [0x00, 0x01]), sw: .success)
        }
        guard PIV.Object.certificate(slot: c.p2) != nil else { return ResponseAPDU(sw: .wrongP1P2) }
        guard let stored = state.keys[PIVCardState.key(slot: c.p2)] else { return ResponseAPDU(sw: .referenceNotFound) }
        var data =
            TLV.encode(tag: 0x01, value: [stored.algorithm]) + TLV.encode(tag: 0x02, value: [0x02, 0x01])
            + TLV.encode(tag: 0x03, value: [0x01])
        if let point = publicKey(slot: c.p2) {
            data += TLV.encode(tag: 0x04, value: TLV.encode(tag: 0x86, value: point))
        }
        return ResponseAPDU(data: data, sw: .success)
    }

    // MARK: helpers

    private func save() {
        guard let stateFile else { return }
        try? state.save(stateFile)
    }
}

/// A digest computed elsewhere (the PIV host sends the hash, the card signs it as is).
struct PrehashedDigest: Digest {
    static var byteCount: Int { 32 }
    let bytes: [UInt8]

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    func makeIterator() -> Array<UInt8>.Iterator { bytes.makeIterator() }
    var description: String { "PrehashedDigest(\(Hex.encode(bytes)))" }
}
