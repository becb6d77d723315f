import APDU
import CryptoPrimitives
import TesseraCore

/// What a PACE run established.
public struct PACEOutcome: Sendable {
    public let session: SecureMessagingSession
    public let algorithm: PACEAlgorithm
    /// PACE-CAM only: what to check against the chip authentication key in DG14 (`ChipAuthenticationMapping.verify`).
    public let chipAuthentication: PACEChipAuthenticationData?
    /// Chip quirks the reader worked around on the way (e.g. a refused domain parameter reference).
    public var workarounds: [String] = []
}

/// PACE v2 (Doc 9303 Part 11 §4.4), reader side: generic, integrated and chip authentication mapping.
public enum PACE {
    /// The mappings this implementation runs.
    public static let supportedMappings: Set<PACEMapping> = [.generic, .integrated, .chipAuthentication]

    /// Whether this implementation can run the PACEInfo (GM, IM or CAM, standardized domain parameters;
    /// IM on curves only where p ≡ 3 mod 4).
    public static func isSupported(_ info: PACEInfo) -> Bool {
        guard let alg = info.algorithm, supportedMappings.contains(alg.mapping), let id = info.parameterId,
            let domain = PACEDomain.standardized(id)
        else { return false }
        if alg.mapping == .integrated && !domain.supportsIntegratedMapping { return false }
        return domain.keyAgreement == alg.keyAgreement
    }

    /// Picks the preferred supported PACEInfo: ECDH before DH, then chip authentication mapping before generic
    /// mapping (CAM authenticates the chip at no extra cost once DG14 is read) before integrated mapping,
    /// then the strongest cipher.
    public static func preferred(_ infos: [PACEInfo]) -> PACEInfo? {
        func rank(_ i: PACEInfo) -> Int {
            guard let a = i.algorithm else { return 0 }
            let agreement = a.keyAgreement == .ecdh ? 20 : 0
            let mapping = [PACEMapping.chipAuthentication: 10, .generic: 5][a.mapping] ?? 0
            let cipher = [SessionCipher.tripleDES: 1, .aes128: 2, .aes192: 3, .aes256: 4][a.cipher] ?? 0
            return agreement + mapping + cipher
        }
        return infos.filter(isSupported).max { rank($0) < rank($1) }
    }

    /// Runs PACE over `transport` and returns the SM session (SSC = 0). A rejected password throws
    /// ACCESS_DENIED (details.retriesLeft when the chip says 63Cx); unsupported mappings or parameters
    /// throw UNSUPPORTED_PROTOCOL. The fixed private keys and the IM nonce t are for tests (random when nil).
    public static func perform(
        transport: any APDUTransport, password: AccessPassword, info: PACEInfo,
        mappingPrivateKey: [UInt8]? = nil, ephemeralPrivateKey: [UInt8]? = nil,
        terminalNonce: [UInt8]? = nil
    ) async throws(TesseraError) -> SecureMessagingSession {
        try await establish(
            transport: transport, password: password, info: info, mappingPrivateKey: mappingPrivateKey,
            ephemeralPrivateKey: ephemeralPrivateKey, terminalNonce: terminalNonce
        ).session
    }

    /// Runs PACE like `perform` and also returns, for PACE-CAM, the chip authentication data to verify
    /// against DG14. A missing or undecryptable A_IC does not fail PACE: it is reported in `chipAuthentication`.
    public static func establish(
        transport: any APDUTransport, password: AccessPassword, info: PACEInfo,
        mappingPrivateKey: [UInt8]? = nil, ephemeralPrivateKey: [UInt8]? = nil,
        terminalNonce: [UInt8]? = nil
    ) async throws(TesseraError) -> PACEOutcome {
        guard let alg = info.algorithm, supportedMappings.contains(alg.mapping) else {
            throw TesseraError(.unsupportedProtocol, "PACE \(info.protocolOID) is not supported")
        }
        guard let id = info.parameterId, let domain = PACEDomain.standardized(id),
            domain.keyAgreement == alg.keyAgreement
        else {
            throw TesseraError(
                .unsupportedProtocol,
                "PACE domain parameters \(info.parameterId.map(String.init) ?? "none") are not supported")
        }

        // MSE:Set AT
        var workarounds: [String] = []
        var setAT = try await transport.send(
            CommandAPDU(
                ins: 0x22, p1: 0xC1, p2: 0xA4,
                data: PACECrypto.setATData(algorithm: alg, password: password, parameterId: id)))
        if [0x6A80, 0x6A86, 0x6A88].contains(setAT.sw.value) {
            // Some chips refuse the domain parameter reference (DO'84') when their parameters are unambiguous.
            let retry = try await transport.send(
                CommandAPDU(
                    ins: 0x22, p1: 0xC1, p2: 0xA4,
                    data: PACECrypto.setATData(algorithm: alg, password: password, parameterId: nil)))
            if retry.sw.isSuccess || retry.sw.retriesLeft != nil {
                workarounds.append("MSE:Set AT refused the domain parameter reference (\(setAT.sw)); sent without it")
                setAT = retry
            }
        }
        if !setAT.sw.isSuccess {
            if let left = setAT.sw.retriesLeft, left > 0 {
                // 63Cx warning: the password is still usable (63C1: suspended, needs CAN first on some chips).
            } else {
                throw statusError(setAT.sw, step: "MSE:Set AT")
            }
        }

        // Step 1: encrypted nonce
        let z = try await generalAuthenticate(transport, [], responseTag: 0x80, step: "encrypted nonce")
        let kPi = AccessKeyDerivation.paceNonceKey(password, cipher: alg.cipher)
        let s = try PACECrypto.decryptNonce(z, key: kPi, cipher: alg.cipher)

        // Step 2: mapping
        let generator: [UInt8]
        var chipMapping: [UInt8] = []
        if alg.mapping == .integrated {
            // IM: the terminal's nonce t goes in clear; the chip answers with empty dynamic authentication data.
            let t = terminalNonce ?? SecureRandom.bytes(PACEIntegratedMapping.terminalNonceLength(alg.cipher))
            _ = try await generalAuthenticateObjects(
                transport, TLV.encode(tag: 0x81, value: t), responseTag: nil, step: "mapping")
            do {
                generator = try domain.integratedMapGenerator(chipNonce: s, terminalNonce: t, cipher: alg.cipher)
            } catch {
                throw TesseraError(.secureMessagingError, "PACE integrated mapping failed: \(error.message)")
            }
        } else {
            let mapping = try domain.keyPair(privateKey: mappingPrivateKey)
            chipMapping = try await generalAuthenticate(
                transport, TLV.encode(tag: 0x81, value: mapping.publicKey),
                responseTag: 0x82, step: "mapping")
            do {
                try domain.validate(publicKey: chipMapping)
                generator = try domain.mapGenerator(
                    nonce: s, privateKey: mapping.privateKey, peerPublicKey: chipMapping)
            } catch {
                throw TesseraError(.secureMessagingError, "PACE mapping failed: \(error.message)")
            }
        }

        // Step 3: key agreement on the mapped generator
        let ephemeral = try domain.keyPair(generator: generator, privateKey: ephemeralPrivateKey)
        let chipEphemeral = try await generalAuthenticate(
            transport, TLV.encode(tag: 0x83, value: ephemeral.publicKey),
            responseTag: 0x84, step: "key agreement")
        guard chipEphemeral != ephemeral.publicKey else {
            throw TesseraError(.secureMessagingError, "chip echoed the terminal's ephemeral public key")
        }
        let shared: [UInt8]
        do {
            try validateOnMappedDomain(domain, generator: generator, publicKey: chipEphemeral)
            shared = try domain.sharedSecret(privateKey: ephemeral.privateKey, peerPublicKey: chipEphemeral)
        } catch {
            throw TesseraError(.secureMessagingError, "PACE key agreement failed: \(error.message)")
        }
        let keys = AccessKeyDerivation.sessionKeys(shared, cipher: alg.cipher)

        // Step 4: mutual authentication
        let tPCD = try PACECrypto.authenticationToken(
            macKey: keys.mac, algorithm: alg, domain: domain, peerPublicKey: chipEphemeral)
        let final = try await generalAuthenticateObjects(
            transport, TLV.encode(tag: 0x85, value: tPCD), responseTag: 0x86,
            step: "mutual authentication", last: true)
        let expected = try PACECrypto.authenticationToken(
            macKey: keys.mac, algorithm: alg, domain: domain,
            peerPublicKey: ephemeral.publicKey)
        guard final.first(tag: 0x86)?.value == expected else {
            throw TesseraError(.accessDenied, "chip authentication token does not verify")
        }
        var chipAuthentication: PACEChipAuthenticationData?
        if alg.mapping == .chipAuthentication {
            // Step 4 of PACE-CAM also carries A_IC (tag 8A); it is checked once DG14 has been read.
            do throws(TesseraError) {
                guard let aIC = final.first(tag: 0x8A)?.value else {
                    throw TesseraError(.malformedData, "the chip sent no encrypted chip authentication data (tag 8A)")
                }
                chipAuthentication = PACEChipAuthenticationData(
                    domain: domain, chipMappingPublicKey: chipMapping,
                    chipAuthenticationData: try ChipAuthenticationMapping.decrypt(aIC, encryptionKey: keys.encryption))
            } catch {
                chipAuthentication = PACEChipAuthenticationData(
                    domain: domain, chipMappingPublicKey: chipMapping,
                    chipAuthenticationData: nil, problem: error.message)
            }
        }
        let session = try SecureMessagingSession(cipher: alg.cipher, encryptionKey: keys.encryption, macKey: keys.mac)
        return PACEOutcome(
            session: session, algorithm: alg, chipAuthentication: chipAuthentication, workarounds: workarounds)
    }

    /// DH public keys on the mapped generator still lie in the order-q subgroup; EC points are checked on the curve.
    private static func validateOnMappedDomain(_ domain: PACEDomain, generator: [UInt8], publicKey: [UInt8])
        throws(TesseraError)
    {
        try domain.validate(publicKey: publicKey)
    }

    static func statusError(_ sw: StatusWord, step: String) -> TesseraError {
        var details: [String: JSONValue] = ["sw": .string(sw.description)]
        if let left = sw.retriesLeft { details["retriesLeft"] = .number(Double(left)) }
        switch sw.value {
        case 0x6300, 0x63C0...0x63CF, 0x6982, 0x6983, 0x6984:
            return TesseraError(
                .accessDenied, "PACE \(step) rejected by the chip (\(sw)); check the MRZ data or CAN",
                details: details)
        case 0x6A80, 0x6A86, 0x6A88, 0x6D00:
            return TesseraError(
                .unsupportedProtocol, "PACE \(step) not supported by the chip (\(sw))", details: details)
        default:
            return TesseraError(.cardError, "PACE \(step) failed (\(sw))", details: details)
        }
    }

    /// GENERAL AUTHENTICATE with dynamic authentication data 7C; returns the value of `responseTag`.
    private static func generalAuthenticate(
        _ transport: any APDUTransport, _ content: [UInt8], responseTag: UInt32,
        step: String, last: Bool = false
    ) async throws(TesseraError) -> [UInt8] {
        let objects = try await generalAuthenticateObjects(
            transport, content, responseTag: responseTag, step: step, last: last)
        return objects.first(tag: responseTag)?.value ?? []
    }

    /// GENERAL AUTHENTICATE returning every data object inside the response's 7C (which must hold `responseTag`
    /// unless it is nil).
    private static func generalAuthenticateObjects(
        _ transport: any APDUTransport, _ content: [UInt8], responseTag: UInt32?,
        step: String, last: Bool = false
    ) async throws(TesseraError) -> [TLV] {
        let command = CommandAPDU(
            cla: last ? 0x00 : 0x10, ins: 0x86, p1: 0, p2: 0,
            data: TLV.encode(tag: 0x7C, value: content), ne: 256)
        let response = try await transport.send(command)
        guard response.sw.isSuccess else { throw statusError(response.sw, step: step) }
        let outer = try TLV.parseAll(response.data, options: [])
        guard outer.count == 1, outer[0].tag == 0x7C else {
            throw TesseraError(.malformedData, "PACE \(step): response is not dynamic authentication data")
        }
        let objects = try TLV.parseAll(outer[0].value, options: [])
        if let responseTag, objects.first(tag: responseTag) == nil {
            throw TesseraError(.malformedData, "PACE \(step): response lacks tag \(String(responseTag, radix: 16))")
        }
        return objects
    }
}

/// Chip side of PACE (generic, integrated and chip authentication mapping) for emulated documents. Feed it the MSE:Set AT
/// data, then each GENERAL AUTHENTICATE's command data; it returns the response data (7C …). After the fourth
/// step `session` holds the SM keys. A wrong terminal token throws ACCESS_DENIED (answer 6300).
public struct PACEChip: Sendable {
    public let algorithm: PACEAlgorithm
    public let domain: PACEDomain
    private let nonceKey: [UInt8]
    private var step = 0
    private var nonce: [UInt8] = []
    private var mappingKey: (privateKey: [UInt8], publicKey: [UInt8])?
    private var ephemeralKey: (privateKey: [UInt8], publicKey: [UInt8])?
    private var generator: [UInt8]?
    private var terminalEphemeral: [UInt8]?
    private var keys: (encryption: [UInt8], mac: [UInt8])?
    private let fixed: (nonce: [UInt8]?, mapping: [UInt8]?, ephemeral: [UInt8]?)
    private let chipAuthenticationKey: [UInt8]?
    /// The SM session once mutual authentication succeeded.
    public private(set) var session: SecureMessagingSession?

    /// Sets up from MSE:Set AT data and the chip's stored passwords. `chipAuthenticationKey` is the static
    /// chip authentication private key SK_IC (big-endian scalar on the PACE curve), required for PACE-CAM.
    /// Throws UNSUPPORTED_PROTOCOL for unknown OIDs or parameters (or CAM without a key) and ACCESS_DENIED
    /// when the referenced password is not available. The fixed values are for tests (random when nil).
    public init(
        setATData: [UInt8], mrzInformation: String?, can: String?, chipAuthenticationKey: [UInt8]? = nil,
        fixedNonce: [UInt8]? = nil, fixedMappingKey: [UInt8]? = nil, fixedEphemeralKey: [UInt8]? = nil
    ) throws(TesseraError) {
        let parsed = try PACECrypto.parseSetATData(setATData)
        guard let alg = PACEAlgorithm(oid: parsed.oid), PACE.supportedMappings.contains(alg.mapping),
            let id = parsed.parameterId, let domain = PACEDomain.standardized(id),
            domain.keyAgreement == alg.keyAgreement
        else {
            throw TesseraError(.unsupportedProtocol, "unsupported PACE parameters")
        }
        if alg.mapping == .integrated && !domain.supportsIntegratedMapping {
            throw TesseraError(.unsupportedProtocol, "integrated mapping is not available on \(domain)")
        }
        if alg.mapping == .chipAuthentication && chipAuthenticationKey == nil {
            throw TesseraError(.unsupportedProtocol, "PACE-CAM needs a chip authentication key")
        }
        let password: AccessPassword
        switch (parsed.passwordReference, mrzInformation, can) {
        case (1, .some(let m), _): password = .mrz(mrzInformation: m)
        case (2, _, .some(let c)): password = .can(c)
        default: throw TesseraError(.accessDenied, "password reference \(parsed.passwordReference) not available")
        }
        algorithm = alg
        self.domain = domain
        nonceKey = AccessKeyDerivation.paceNonceKey(password, cipher: alg.cipher)
        fixed = (fixedNonce, fixedMappingKey, fixedEphemeralKey)
        self.chipAuthenticationKey = alg.mapping == .chipAuthentication ? chipAuthenticationKey : nil
    }

    /// Whether mutual authentication has completed.
    public var isComplete: Bool { session != nil }

    /// Processes one GENERAL AUTHENTICATE command data field (7C …) and returns the response data field.
    public mutating func generalAuthenticate(_ commandData: [UInt8]) throws(TesseraError) -> [UInt8] {
        let outer = try TLV.parseAll(commandData, options: [])
        guard outer.count == 1, outer[0].tag == 0x7C else {
            throw TesseraError(.malformedData, "expected dynamic authentication data")
        }
        let inner = try TLV.parseAll(outer[0].value, options: [])
        func value(_ tag: UInt32) throws(TesseraError) -> [UInt8] {
            guard let v = inner.first(tag: tag)?.value else {
                throw TesseraError(.malformedData, "GENERAL AUTHENTICATE lacks tag \(String(tag, radix: 16))")
            }
            return v
        }
        switch step {
        case 0:
            let length =
                algorithm.mapping == .integrated
                ? PACEIntegratedMapping.chipNonceLength(algorithm.cipher) : algorithm.cipher.blockSize
            nonce = orRandom(fixed.nonce, length)
            let z = try PACECrypto.encryptNonce(nonce, key: nonceKey, cipher: algorithm.cipher)
            step = 1
            return TLV.encode(tag: 0x7C, value: TLV.encode(tag: 0x80, value: z))
        case 1 where algorithm.mapping == .integrated:
            generator = try domain.integratedMapGenerator(
                chipNonce: nonce, terminalNonce: try value(0x81), cipher: algorithm.cipher)
            mappingKey = ([], [])
            step = 2
            return TLV.encode(tag: 0x7C, value: [])
        case 1:
            let terminalMapping = try value(0x81)
            try domain.validate(publicKey: terminalMapping)
            let key = try domain.keyPair(privateKey: fixed.mapping)
            generator = try domain.mapGenerator(
                nonce: nonce, privateKey: key.privateKey, peerPublicKey: terminalMapping)
            mappingKey = key
            step = 2
            return TLV.encode(tag: 0x7C, value: TLV.encode(tag: 0x82, value: key.publicKey))
        case 2:
            let terminal = try value(0x83)
            try domain.validate(publicKey: terminal)
            let key = try domain.keyPair(generator: generator, privateKey: fixed.ephemeral)
            guard key.publicKey != terminal else { throw TesseraError(.accessDenied, "terminal reused the chip's key") }
            let shared = try domain.sharedSecret(privateKey: key.privateKey, peerPublicKey: terminal)
            keys = AccessKeyDerivation.sessionKeys(shared, cipher: algorithm.cipher)
            ephemeralKey = key
            terminalEphemeral = terminal
            step = 3
            return TLV.encode(tag: 0x7C, value: TLV.encode(tag: 0x84, value: key.publicKey))
        case 3:
            guard let keys, let ephemeralKey, let terminalEphemeral, let mappingKey else {
                throw TesseraError(.internalError, "PACE state")
            }
            let token = try value(0x85)
            let expected = try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: algorithm, domain: domain,
                peerPublicKey: ephemeralKey.publicKey)
            step = 4
            guard token == expected else {
                throw TesseraError(.accessDenied, "terminal authentication token does not verify")
            }
            let tPICC = try PACECrypto.authenticationToken(
                macKey: keys.mac, algorithm: algorithm, domain: domain,
                peerPublicKey: terminalEphemeral)
            var response = TLV.encode(tag: 0x86, value: tPICC)
            if let chipAuthenticationKey, case .ec(let curve) = domain {
                let caIC = try ChipAuthenticationMapping.chipAuthenticationData(
                    curve: curve, mappingPrivateKey: mappingKey.privateKey, staticPrivateKey: chipAuthenticationKey)
                response += TLV.encode(
                    tag: 0x8A, value: try ChipAuthenticationMapping.encrypt(caIC, encryptionKey: keys.encryption))
            }
            session = try SecureMessagingSession(
                cipher: algorithm.cipher, encryptionKey: keys.encryption, macKey: keys.mac)
            return TLV.encode(tag: 0x7C, value: response)
        default:
            throw TesseraError(.cardError, "PACE already finished")
        }
    }
}
