import APDU
import FoundationEssentials
import PIV
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// The persistent part of an emulated PIV card (the JSON `--state` file). Volatile state — PIN verified,
/// management key authenticated, the selected application — is lost on power-off, as on a real card.
public struct PIVCardState: Codable, Sendable, Equatable {
    /// An asymmetric key in a slot.
    public struct StoredKey: Codable, Sendable, Equatable {
        /// SP 800-78-4 algorithm identifier (0x11 = ECC P-256, 0x07 = RSA-2048, 0x06 = RSA-1024).
        public var algorithm: UInt8
        /// The private key (P-256: the 32-byte scalar; RSA: PKCS#8 or PKCS#1 DER), hex.
        public var privateKey: String

        public init(algorithm: UInt8, privateKey: String) { self.algorithm = algorithm; self.privateKey = privateKey }
    }

    public var serial: UInt32
    public var pin: String
    public var pinRetries: Int
    public var pinMaxRetries: Int
    public var puk: String
    public var pukRetries: Int
    public var pukMaxRetries: Int
    /// SP 800-78-4 algorithm of the management key (0x03 3DES, 0x08/0x0A/0x0C AES).
    public var managementAlgorithm: UInt8
    /// The management key, hex.
    public var managementKey: String
    /// Keys by slot, keyed by the slot in hex ("9a", "82", …).
    public var keys: [String: StoredKey]
    /// Data objects by tag in hex ("5fc102", …): the content inside tag 53.
    public var objects: [String: String]

    /// A factory-fresh card: PIN 123456, PUK 12345678, the default 3DES management key, a CHUID whose GUID derives
    /// from `serial`, and a discovery object. No keys.
    public static func factoryNew(serial: UInt32) -> PIVCardState {
        var s = PIVCardState(
            serial: serial, pin: "123456", pinRetries: 3, pinMaxRetries: 3, puk: "12345678",
            pukRetries: 3, pukMaxRetries: 3, managementAlgorithm: PIV.Algorithm.tripleDES.rawValue,
            managementKey: Hex.encode(PIV.defaultManagementKey), keys: [:], objects: [:])
        s.objects[Self.key(PIV.Object.chuid)] = Hex.encode(Self.chuid(serial: serial))
        s.objects[Self.key(PIV.Object.discovery)] = Hex.encode(Self.discovery())
        return s
    }

    static func key(_ tag: UInt32) -> String { String(tag, radix: 16) }
    static func key(slot: UInt8) -> String { String(slot, radix: 16) }

    /// CHUID (SP 800-73-4 Part 1 §3.1.2): FASC-N (tag 30), GUID (34), expiration (35), empty signature (3E), LRC (FE).
    static func chuid(serial: UInt32) -> [UInt8] {
        // A FASC-N of agency code 9999 (test cards, SP 800-73-4 / TIG SCEPACS), system 9999, credential = serial.
        let fascn: [UInt8] = [
            0xD4, 0xE7, 0x39, 0xDA, 0x73, 0x9C, 0xED, 0x39, 0xCE, 0x73, 0x9D, 0x83, 0x68,
            0x58, 0x21, 0x08, 0x42, 0x10, 0x84, 0x21, 0xC8, 0x42, 0x10, 0xC3, 0xEB,
        ]
        let s = [UInt8(serial >> 24), UInt8((serial >> 16) & 0xFF), UInt8((serial >> 8) & 0xFF), UInt8(serial & 0xFF)]
        let guid: [UInt8] = [0x54, 0x45, 0x53, 0x53, 0x45, 0x52, 0x41, 0x2D, 0x50, 0x49, 0x56, 0x2D] + s
        return TLV.encode(tag: 0x30, value: fascn) + TLV.encode(tag: 0x34, value: guid)
            + TLV.encode(tag: 0x35, value: Array("20991231".utf8)) + TLV.encode(tag: 0x3E, value: [])
            + TLV.encode(tag: 0xFE, value: [])
    }

    /// Discovery object (Part 1 §3.3.2): PIV AID (4F) and PIN usage policy 40 00 (application PIN only).
    static func discovery() -> [UInt8] {
        TLV.encode(tag: 0x4F, value: PIV.aid) + TLV.encode(tag: 0x5F2F, value: [0x40, 0x00])
    }

    /// Reads a state file; nil when it does not exist.
    public static func load(_ path: String) throws(TesseraError) -> PIVCardState? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        do {
            return try JSONDecoder().decode(PIVCardState.self, from: data)
        } catch {
            throw TesseraError(.malformedData, "PIV card state \(path) is invalid: \(error)")
        }
    }

    /// Writes the state atomically (0600).
    public func save(_ path: String) throws(TesseraError) {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let data = try encoder.encode(self)
            try data.write(to: URL(fileURLWithPath: path), options: .atomic)
            _ = chmod(path, 0o600)
        } catch {
            throw TesseraError(.storageError, "cannot write PIV card state \(path): \(error)")
        }
    }
}
