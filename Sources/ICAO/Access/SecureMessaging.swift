import APDU
import CryptoPrimitives
import TesseraCore

/// Secure-messaging keys and send sequence counter (Doc 9303 Part 11 §9.8), usable from both sides:
/// the reader protects commands and unprotects responses; an emulated chip unprotects commands and
/// protects responses. Each operation increments the SSC first, as §9.8 requires.
///
/// Unprotected responses: a chip answers SM errors with a plain status word and may also answer other
/// errors (e.g. 6A82) without SM data objects. `unprotectResponse` returns such a plain *error* status
/// unchanged and does not advance the SSC for it (only the command's increment counts); a plain 9000 or
/// any response lacking a valid DO'8E' is rejected with SECURE_MESSAGING_ERROR. A chip using these
/// functions must therefore likewise not increment its SSC when it answers with a plain status word.
public struct SecureMessagingSession: Sendable, Equatable {
    public let cipher: SessionCipher
    public let encryptionKey: [UInt8]
    public let macKey: [UInt8]
    /// Current send sequence counter (block-size bytes, big-endian).
    public private(set) var ssc: [UInt8]

    /// A session with the given keys; `ssc` defaults to zero (PACE, §9.8.6.3 / §9.8.7.3).
    public init(cipher: SessionCipher, encryptionKey: [UInt8], macKey: [UInt8], ssc: [UInt8]? = nil)
        throws(TesseraError)
    {
        guard encryptionKey.count == cipher.keyLength, macKey.count == cipher.keyLength else {
            throw TesseraError(.cryptoError, "session keys must be \(cipher.keyLength) bytes for \(cipher.rawValue)")
        }
        let counter = ssc ?? [UInt8](repeating: 0, count: cipher.blockSize)
        guard counter.count == cipher.blockSize else {
            throw TesseraError(.cryptoError, "SSC must be \(cipher.blockSize) bytes for \(cipher.rawValue)")
        }
        self.cipher = cipher; self.encryptionKey = encryptionKey; self.macKey = macKey; self.ssc = counter
    }

    mutating func incrementSSC() {
        var i = ssc.count - 1
        while i >= 0 {
            ssc[i] &+= 1
            if ssc[i] != 0 { break }
            i -= 1
        }
    }

    // MARK: Crypto building blocks

    private func iv() throws(TesseraError) -> [UInt8] {
        cipher == .tripleDES ? [UInt8](repeating: 0, count: 8) : try AESCipher.encryptECB(key: encryptionKey, data: ssc)
    }

    private func encrypt(_ plain: [UInt8]) throws(TesseraError) -> [UInt8] {
        let padded = ISO9797Padding.pad(plain, blockSize: cipher.blockSize)
        if cipher == .tripleDES { return try TripleDESCipher.encryptCBC(key: encryptionKey, data: padded) }
        return try AESCipher.encryptCBC(key: encryptionKey, iv: iv(), data: padded)
    }

    private func decrypt(_ encrypted: [UInt8]) throws(TesseraError) -> [UInt8] {
        guard !encrypted.isEmpty, encrypted.count % cipher.blockSize == 0 else {
            throw TesseraError(.secureMessagingError, "encrypted data object has a bad length")
        }
        let plain: [UInt8]
        do {
            plain =
                cipher == .tripleDES
                ? try TripleDESCipher.decryptCBC(key: encryptionKey, data: encrypted)
                : try AESCipher.decryptCBC(key: encryptionKey, iv: iv(), data: encrypted)
        } catch {
            throw TesseraError(.secureMessagingError, "decryption failed: \(error.message)")
        }
        guard let unpadded = ISO9797Padding.unpad(plain) else {
            throw TesseraError(.secureMessagingError, "bad padding in encrypted data object")
        }
        return unpadded
    }

    /// MAC over pad(SSC ‖ data) with the session MAC key (8 bytes).
    private func mac(_ data: [UInt8]) throws(TesseraError) -> [UInt8] {
        try SecureMessagingSession.mac(key: macKey, cipher: cipher, data: ssc + data)
    }

    /// The 8-byte MAC of ICAO SM and PACE tokens: retail MAC (3DES) or CMAC truncated to 8 bytes (AES),
    /// computed over `data` padded with method 2.
    public static func mac(key: [UInt8], cipher: SessionCipher, data: [UInt8]) throws(TesseraError) -> [UInt8] {
        let padded = ISO9797Padding.pad(data, blockSize: cipher.blockSize)
        if cipher == .tripleDES { return try RetailMAC.mac(key: key, data: padded, pad: false) }
        return Array(try CMAC.aes(key: key, data: padded).prefix(8))
    }

    private static func maskedHeader(_ cla: UInt8, _ ins: UInt8, _ p1: UInt8, _ p2: UInt8) -> [UInt8] {
        [smCLA(cla), ins, p1, p2]
    }

    /// CLA with the SM indication (ISO 7816-4 §5.4.1): b4b3 = 11 for first interindustry classes, b6 for further ones.
    static func smCLA(_ cla: UInt8) -> UInt8 {
        cla & 0x40 != 0 ? cla | 0x20 : (cla & 0xF3) | 0x0C
    }

    private static func leDataObject(_ ne: Int) -> [UInt8] {
        if ne <= 256 { return TLV.encode(tag: 0x97, value: [UInt8(ne & 0xFF)]) }
        let v = ne == 65536 ? 0 : ne
        return TLV.encode(tag: 0x97, value: [UInt8(v >> 8), UInt8(v & 0xFF)])
    }

    /// The data objects of a protected command or response; a malformed encoding is SECURE_MESSAGING_ERROR.
    private static func dataObjects(_ bytes: [UInt8]) throws(TesseraError) -> [TLV] {
        do throws(TesseraError) { return try TLV.parseAll(bytes, options: []) } catch {
            throw TesseraError(.secureMessagingError, error.message)
        }
    }

    // MARK: Reader side

    /// Reader side: wraps a plain command into DO'87'/'85', DO'97' and DO'8E' (§9.8.4). Uses extended
    /// length when the protected body exceeds 255 bytes or Ne exceeds 256.
    public mutating func protectCommand(_ command: CommandAPDU) throws(TesseraError) -> CommandAPDU {
        incrementSSC()
        let header = SecureMessagingSession.maskedHeader(command.cla, command.ins, command.p1, command.p2)
        var body: [UInt8] = []
        if !command.data.isEmpty {
            let encrypted = try encrypt(command.data)
            body +=
                command.ins & 1 == 1
                ? TLV.encode(tag: 0x85, value: encrypted)
                : TLV.encode(tag: 0x87, value: [0x01] + encrypted)
        }
        if let ne = command.ne { body += SecureMessagingSession.leDataObject(ne) }
        let cc = try mac(ISO9797Padding.pad(header, blockSize: cipher.blockSize) + body)
        body += TLV.encode(tag: 0x8E, value: cc)
        let extended = body.count > 255 || (command.ne ?? 0) > 256
        return CommandAPDU(
            cla: header[0], ins: command.ins, p1: command.p1, p2: command.p2, data: body,
            ne: extended ? 65536 : 256, forceExtended: extended)
    }

    /// Reader side: verifies DO'8E' over DO'87'/'85' and DO'99', decrypts, and returns the plain response
    /// with the status word from DO'99'. Plain error status words are returned unchanged (see the type notes).
    public mutating func unprotectResponse(_ response: ResponseAPDU) throws(TesseraError) -> ResponseAPDU {
        if response.data.isEmpty {
            if response.sw.isSuccess {
                throw TesseraError(.secureMessagingError, "unprotected 9000 response under secure messaging")
            }
            if response.sw == .smDataMissing || response.sw == .smDataObjectsIncorrect {
                throw TesseraError(
                    .secureMessagingError, "chip reported a secure-messaging error (\(response.sw))",
                    details: ["sw": .string(response.sw.description)])
            }
            return response
        }
        incrementSSC()
        let objects = try SecureMessagingSession.dataObjects(response.data)
        var macInput: [UInt8] = []
        var encrypted: [UInt8]?
        var status: [UInt8]?
        var cc: [UInt8]?
        for object in objects {
            switch object.tag {
            case 0x87:
                guard object.value.first == 0x01 else {
                    throw TesseraError(.secureMessagingError, "DO'87' without padding indicator 01")
                }
                encrypted = Array(object.value.dropFirst())
                macInput += object.encoded
            case 0x85:
                encrypted = object.value
                macInput += object.encoded
            case 0x99:
                status = object.value
                macInput += object.encoded
            case 0x8E:
                cc = object.value
            default:
                throw TesseraError(
                    .secureMessagingError, "unexpected data object \(String(object.tag, radix: 16)) in response")
            }
            if cc != nil && object.tag != 0x8E {
                throw TesseraError(.secureMessagingError, "data object after DO'8E'")
            }
        }
        guard let cc else { throw TesseraError(.secureMessagingError, "response without DO'8E' (MAC)") }
        guard let status, status.count == 2 else {
            throw TesseraError(.secureMessagingError, "response without DO'99'")
        }
        guard ConstantTime.equal(try mac(macInput), cc) else {
            throw TesseraError(.secureMessagingError, "response MAC does not verify")
        }
        let data = try encrypted.map { (e: [UInt8]) throws(TesseraError) -> [UInt8] in try decrypt(e) } ?? []
        return ResponseAPDU(data: data, sw: StatusWord(sw1: status[0], sw2: status[1]))
    }

    // MARK: Card side

    /// Card side: verifies and decrypts a protected command. Throws SECURE_MESSAGING_ERROR on a missing or
    /// wrong MAC or malformed data objects; the chip then answers 6987/6988 in plain and aborts SM.
    public mutating func unprotectCommand(_ command: CommandAPDU) throws(TesseraError) -> CommandAPDU {
        guard command.cla & 0x0C == 0x0C || (command.cla & 0x40 != 0 && command.cla & 0x20 != 0) else {
            throw TesseraError(.secureMessagingError, "command without SM indication in CLA")
        }
        incrementSSC()
        let objects = try SecureMessagingSession.dataObjects(command.data)
        var body: [UInt8] = []
        var encrypted: [UInt8]?
        var ne: Int?
        var cc: [UInt8]?
        for object in objects {
            guard cc == nil else { throw TesseraError(.secureMessagingError, "data object after DO'8E'") }
            switch object.tag {
            case 0x87:
                guard object.value.first == 0x01 else {
                    throw TesseraError(.secureMessagingError, "DO'87' without padding indicator 01")
                }
                encrypted = Array(object.value.dropFirst())
                body += object.encoded
            case 0x85:
                encrypted = object.value
                body += object.encoded
            case 0x97:
                switch object.value.count {
                case 1: ne = object.value[0] == 0 ? 256 : Int(object.value[0])
                case 2:
                    let v = Int(object.value[0]) << 8 | Int(object.value[1])
                    ne = v == 0 ? 65536 : v
                default: throw TesseraError(.secureMessagingError, "bad DO'97'")
                }
                body += object.encoded
            case 0x8E:
                cc = object.value
            default:
                throw TesseraError(
                    .secureMessagingError, "unexpected data object \(String(object.tag, radix: 16)) in command")
            }
        }
        guard let cc else { throw TesseraError(.secureMessagingError, "command without DO'8E' (MAC)") }
        let header = [command.cla, command.ins, command.p1, command.p2]
        guard
            ConstantTime.equal(
                try mac(ISO9797Padding.pad(header, blockSize: cipher.blockSize) + body), cc)
        else {
            throw TesseraError(.secureMessagingError, "command MAC does not verify")
        }
        let data = try encrypted.map { (e: [UInt8]) throws(TesseraError) -> [UInt8] in try decrypt(e) } ?? []
        let plainCLA = command.cla & 0x40 != 0 ? command.cla & ~0x20 : command.cla & 0xF3
        return CommandAPDU(
            cla: plainCLA, ins: command.ins, p1: command.p1, p2: command.p2, data: data, ne: ne,
            forceExtended: (ne ?? 0) > 256 || data.count > 255)
    }

    /// Card side: protects a response (DO'87' — or DO'85' for odd INS — DO'99', DO'8E').
    public mutating func protectResponse(_ response: ResponseAPDU, oddINS: Bool = false) throws(TesseraError)
        -> ResponseAPDU
    {
        incrementSSC()
        var body: [UInt8] = []
        if !response.data.isEmpty {
            let encrypted = try encrypt(response.data)
            body += oddINS ? TLV.encode(tag: 0x85, value: encrypted) : TLV.encode(tag: 0x87, value: [0x01] + encrypted)
        }
        body += TLV.encode(tag: 0x99, value: [response.sw.sw1, response.sw.sw2])
        body += TLV.encode(tag: 0x8E, value: try mac(body))
        return ResponseAPDU(data: body, sw: response.sw)
    }
}
