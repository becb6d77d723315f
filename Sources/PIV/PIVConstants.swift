import APDU
import TesseraCore

/// Constants of the PIV Card Application (NIST SP 800-73-4 Part 1 §2–3, Part 2 §3; SP 800-78-4 Table 6-2).
public enum PIV {
    /// The PIV Card Application AID (SP 800-73-4 Part 1 §2.2): NIST RID A0 00 00 03 08 + PIX 00 00 10 00 01 00.
    public static let aid: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08, 0x00, 0x00, 0x10, 0x00, 0x01, 0x00]
    /// The NIST RID, the registered part of the AID.
    public static let rid: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08]

    /// Key references of PINs (Part 2 Table 7-ish "Key Reference Values").
    public enum PINReference: UInt8, Sendable {
        case globalPIN = 0x00
        case applicationPIN = 0x80
        case puk = 0x81
    }

    /// Cryptographic algorithm identifiers (SP 800-78-4 Table 6-2).
    public enum Algorithm: UInt8, Sendable, Codable {
        case tripleDES = 0x03
        case rsa1024 = 0x06
        case rsa2048 = 0x07
        case aes128 = 0x08
        case aes192 = 0x0A
        case aes256 = 0x0C
        case eccP256 = 0x11
        case eccP384 = 0x14

        /// Block size of a symmetric algorithm (witness/challenge length); nil for asymmetric ones.
        public var blockSize: Int? {
            switch self {
            case .tripleDES: 8
            case .aes128, .aes192, .aes256: 16
            default: nil
            }
        }

        /// Key length of a symmetric algorithm.
        public var keyLength: Int? {
            switch self {
            case .tripleDES, .aes192: 24
            case .aes128: 16
            case .aes256: 32
            default: nil
            }
        }
    }

    /// Key references of the asymmetric slots and the card management key (Part 1 §3.1, Table 4b).
    public enum Slot {
        public static let authentication: UInt8 = 0x9A
        public static let cardManagement: UInt8 = 0x9B
        public static let signature: UInt8 = 0x9C
        public static let keyManagement: UInt8 = 0x9D
        public static let cardAuthentication: UInt8 = 0x9E
        /// Retired key management keys 82…95 (twenty slots).
        public static let retired: ClosedRange<UInt8> = 0x82...0x95
    }

    /// Data object tags for GET DATA / PUT DATA (Part 1 Table 3).
    public enum Object {
        public static let cardCapabilityContainer: UInt32 = 0x5FC107
        public static let chuid: UInt32 = 0x5FC102
        public static let discovery: UInt32 = 0x7E
        public static let keyHistory: UInt32 = 0x5FC10C
        public static let printedInformation: UInt32 = 0x5FC109

        /// The certificate object of an asymmetric slot (9A, 9C, 9D, 9E, 82…95); nil for other references.
        public static func certificate(slot: UInt8) -> UInt32? {
            switch slot {
            case 0x9A: 0x5FC105
            case 0x9C: 0x5FC10A
            case 0x9D: 0x5FC10B
            case 0x9E: 0x5FC101
            case Slot.retired: 0x5FC10D + UInt32(slot - 0x82)
            default: nil
            }
        }
    }

    /// Instructions (Part 2 §3).
    public enum INS {
        public static let select = CommandAPDU.Instruction.select
        public static let getData: UInt8 = 0xCB
        public static let putData: UInt8 = 0xDB
        public static let verify: UInt8 = 0x20
        public static let changeReferenceData: UInt8 = 0x24
        public static let resetRetryCounter: UInt8 = 0x2C
        public static let generalAuthenticate: UInt8 = 0x87
        public static let generateAsymmetricKeyPair: UInt8 = 0x47
        public static let getResponse = CommandAPDU.Instruction.getResponse
        /// Yubico extensions (also answered by Tessera's emulator): serial number and slot metadata.
        public static let yubicoGetSerial: UInt8 = 0xF8
        public static let yubicoGetMetadata: UInt8 = 0xF7
    }

    /// The well-known factory management key 01 02 … 08 repeated three times (3DES / AES-192).
    public static let defaultManagementKey: [UInt8] = Array(
        repeating: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
        count: 3
    ).flatMap { $0 }

    /// A PIN as VERIFY / CHANGE REFERENCE DATA carry it: 6–8 ASCII characters padded with FF to 8 bytes (Part 2 §2.4.3).
    public static func paddedPIN(_ pin: String) throws(TesseraError) -> [UInt8] {
        let bytes = Array(pin.utf8)
        guard (6...8).contains(bytes.count), bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw TesseraError.invalidInput("a PIV PIN is 6 to 8 printable ASCII characters")
        }
        return bytes + [UInt8](repeating: 0xFF, count: 8 - bytes.count)
    }
}
