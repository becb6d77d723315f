import APDU
import CryptoPrimitives
import TesseraCore

/// Basic Access Control (Doc 9303 Part 11 §4.3): side-neutral computations and the reader-side protocol.
public enum BAC {
    /// SSC = last 4 bytes of RND.IC ‖ last 4 bytes of RND.IFD (§9.8.6.3).
    public static func initialSSC(rndIC: [UInt8], rndIFD: [UInt8]) -> [UInt8] {
        Array(rndIC.suffix(4)) + Array(rndIFD.suffix(4))
    }

    /// Cryptogram E ‖ M over a 32-byte plaintext: E = 3DES-CBC(K_enc, plain), M = retail MAC(K_mac, E).
    /// Reader: plain = RND.IFD ‖ RND.IC ‖ K.IFD; chip: plain = RND.IC ‖ RND.IFD ‖ K.IC.
    public static func cryptogram(plain: [UInt8], encryptionKey: [UInt8], macKey: [UInt8]) throws(TesseraError)
        -> [UInt8]
    {
        guard plain.count == 32 else { throw TesseraError(.cryptoError, "BAC plaintext must be 32 bytes") }
        let e = try TripleDESCipher.encryptCBC(key: encryptionKey, data: plain)
        return e + (try RetailMAC.mac(key: macKey, data: e))
    }

    /// Verifies M and decrypts E of a 40-byte cryptogram; throws ACCESS_DENIED when the MAC does not verify.
    public static func openCryptogram(_ data: [UInt8], encryptionKey: [UInt8], macKey: [UInt8]) throws(TesseraError)
        -> [UInt8]
    {
        guard data.count == 40 else {
            throw TesseraError(.accessDenied, "BAC cryptogram must be 40 bytes, got \(data.count)")
        }
        let e = Array(data[0..<32]), m = Array(data[32..<40])
        guard try RetailMAC.mac(key: macKey, data: e) == m else {
            throw TesseraError(.accessDenied, "BAC cryptogram MAC does not verify (wrong MRZ?)")
        }
        return try TripleDESCipher.decryptCBC(key: encryptionKey, data: e)
    }

    /// Session from the two key halves and the nonces: K_seed = K.IFD ⊕ K.IC, 3DES keys, SSC from the nonces.
    public static func session(kIFD: [UInt8], kIC: [UInt8], rndIC: [UInt8], rndIFD: [UInt8]) throws(TesseraError)
        -> SecureMessagingSession
    {
        guard kIFD.count == 16, kIC.count == 16 else {
            throw TesseraError(.cryptoError, "BAC key material must be 16 bytes")
        }
        let seed = zip(kIFD, kIC).map { $0 ^ $1 }
        let keys = AccessKeyDerivation.sessionKeys(seed, cipher: .tripleDES)
        return try SecureMessagingSession(
            cipher: .tripleDES, encryptionKey: keys.encryption, macKey: keys.mac,
            ssc: initialSSC(rndIC: rndIC, rndIFD: rndIFD))
    }

    /// Runs BAC over `transport` (GET CHALLENGE, EXTERNAL AUTHENTICATE) and returns the SM session.
    /// `rndIFD`/`kIFD` are random when nil (fixed values are for tests). A rejected authentication
    /// (6300, 6982, …) or a wrong chip cryptogram throws ACCESS_DENIED.
    public static func perform(
        transport: any APDUTransport, mrzInformation: String,
        rndIFD: [UInt8]? = nil, kIFD: [UInt8]? = nil
    ) async throws(TesseraError) -> SecureMessagingSession {
        let keys = AccessKeyDerivation.bacKeys(mrzInformation: mrzInformation)
        let challenge = try await transport.send(CommandAPDU(ins: 0x84, p1: 0, p2: 0, ne: 8))
        guard challenge.sw.isSuccess, challenge.data.count == 8 else {
            throw TesseraError(
                .cardError, "GET CHALLENGE failed (\(challenge.sw))", details: ["sw": .string(challenge.sw.description)]
            )
        }
        let rndIC = challenge.data
        let rndA = orRandom(rndIFD, 8)
        let kA = orRandom(kIFD, 16)
        let data = try cryptogram(plain: rndA + rndIC + kA, encryptionKey: keys.encryption, macKey: keys.mac)
        let response = try await transport.send(CommandAPDU(ins: 0x82, p1: 0, p2: 0, data: data, ne: 40))
        guard response.sw.isSuccess else {
            throw TesseraError(
                .accessDenied, "chip rejected BAC authentication (\(response.sw)); check the MRZ data",
                details: ["sw": .string(response.sw.description)])
        }
        let r = try openCryptogram(response.data, encryptionKey: keys.encryption, macKey: keys.mac)
        guard Array(r[0..<8]) == rndIC, Array(r[8..<16]) == rndA else {
            throw TesseraError(.accessDenied, "BAC chip response does not match the nonces")
        }
        return try session(kIFD: kA, kIC: Array(r[16..<32]), rndIC: rndIC, rndIFD: rndA)
    }
}

/// Chip side of BAC for emulated documents: answers GET CHALLENGE and EXTERNAL AUTHENTICATE.
public struct BACChipResponder: Sendable {
    private let keys: (encryption: [UInt8], mac: [UInt8])
    private var rndIC: [UInt8]?
    private let fixedKIC: [UInt8]?

    /// `kIC` is random when nil (a fixed value is for tests).
    public init(mrzInformation: String, kIC: [UInt8]? = nil) {
        keys = AccessKeyDerivation.bacKeys(mrzInformation: mrzInformation)
        fixedKIC = kIC
    }

    /// GET CHALLENGE: a fresh 8-byte RND.IC (or `fixed`, for tests), remembered for the next step.
    public mutating func challenge(fixed: [UInt8]? = nil) throws(TesseraError) -> [UInt8] {
        let r = orRandom(fixed, 8)
        rndIC = r
        return r
    }

    /// EXTERNAL AUTHENTICATE: verifies the terminal's cryptogram and returns the chip cryptogram and the
    /// SM session. Throws ACCESS_DENIED (answer 6300) on a wrong MAC or nonce, CARD_ERROR without a
    /// prior challenge (answer 6985). The challenge is consumed either way.
    public mutating func externalAuthenticate(_ commandData: [UInt8]) throws(TesseraError) -> (
        response: [UInt8], session: SecureMessagingSession
    ) {
        guard let rnd = rndIC else { throw TesseraError(.cardError, "EXTERNAL AUTHENTICATE without GET CHALLENGE") }
        rndIC = nil
        let s = try BAC.openCryptogram(commandData, encryptionKey: keys.encryption, macKey: keys.mac)
        guard Array(s[8..<16]) == rnd else { throw TesseraError(.accessDenied, "RND.IC mismatch") }
        let rndIFD = Array(s[0..<8]), kIFD = Array(s[16..<32])
        let kIC = orRandom(fixedKIC, 16)
        let response = try BAC.cryptogram(plain: rnd + rndIFD + kIC, encryptionKey: keys.encryption, macKey: keys.mac)
        return (response, try BAC.session(kIFD: kIFD, kIC: kIC, rndIC: rnd, rndIFD: rndIFD))
    }
}

/// `fixed` when given (tests), otherwise `count` secure random bytes.
func orRandom(_ fixed: [UInt8]?, _ count: Int) -> [UInt8] {
    fixed ?? SecureRandom.bytes(count)
}
