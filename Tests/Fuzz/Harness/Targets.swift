import APDU
import CBOR
import Crypto
import Enrollment
import Foundation
import ICAO
import MRZ
import NIOCore
import NIOEmbedded
import PN532Emulator
import SSHAgent
@testable import RPC
import TesseraCore
@testable import VPCD

/// JSON-RPC over the socket: the NDJSON frame decoder (fed in two chunks, so its incremental scan runs),
/// then per frame the JSON reader, the request envelope and the `Params` accessors handlers use. Selectors
/// from 0x80 take the bytes as one frame (the NIO pipeline costs most of an execution).
enum JSONRPCTarget {
    static let maxFrameBytes = 4096

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        if selector >= 0x80 { return request(bytes) }
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrameBytes)))
        let split = bytes.isEmpty ? 0 : Int(selector) % (bytes.count + 1)
        for chunk in [bytes[..<split], bytes[split...]] where !chunk.isEmpty {
            do { try channel.writeInbound(channel.allocator.buffer(bytes: chunk)) } catch { break }
        }
        var frames: [ByteBuffer] = []
        while let frame = try? channel.readInbound(as: ByteBuffer.self) { frames.append(frame) }
        _ = try? channel.finish()  // runs decodeLast: a final frame without its newline
        while let frame = try? channel.readInbound(as: ByteBuffer.self) { frames.append(frame) }
        for frame in frames { request(Array(frame.readableBytesView)) }
    }

    static func request(_ frame: [UInt8]) {
        guard let json = try? JSONValue.parse(frame) else { return }
        _ = json.serialized()
        guard let request = try? RPCWire.parseRequest(json), let params = try? Params(request.params) else { return }
        for key in params.value.keys {
            _ = try? params.string(key)
            _ = try? params.bytes(key)
            _ = try? params.optionalInt(key)
            _ = try? params.optionalBool(key)
            _ = try? params.object(key)
        }
        _ = RPCWire.decodeError(json)
    }
}

/// CBOR (WebAuthn clients): strict and lenient decoding, and a re-encode of what decodes.
enum CBORTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let options: CBORDecodingOptions = selector & 1 == 0 ? .strict : .lenient
        if let value = try? CBORValue(decoding: bytes, options: options) { _ = try? value.encoded() }
    }
}

/// BER-TLV: every option set, then the children of each constructed object, recursively.
enum TLVTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let options = TLV.ParseOptions(rawValue: Int(selector & 3))
        if let objects = try? TLV.parseAll(bytes, options: options) { walk(objects, options: options, depth: 0) }
        _ = try? TLV.parse(bytes, allowTrailing: selector & 4 != 0, options: options)
    }

    static func walk(_ objects: [TLV], options: TLV.ParseOptions, depth: Int) {
        guard depth < 64 else { return }
        for object in objects where object.isConstructed {
            if let children = try? object.children(options: options) { walk(children, options: options, depth: depth + 1) }
        }
    }
}

/// Response and command APDUs and secure-messaging unwrap with fixed keys (selector: cipher << 2 | mode). Modes
/// 0, 1 and 3 take the bytes as a protected response or command as received; mode 2 takes a status word and the
/// data objects before DO'8E' and appends a correct MAC, so decryption and unpadding run on arbitrary ciphertext.
enum SecureMessagingTarget {
    static let ciphers: [SessionCipher] = [.tripleDES, .aes128, .aes192, .aes256]

    static func session(_ cipher: SessionCipher) -> SecureMessagingSession {
        let key = { (seed: UInt8) in (0..<cipher.keyLength).map { UInt8(truncatingIfNeeded: Int($0) &* 7 &+ Int(seed)) } }
        return try! SecureMessagingSession(cipher: cipher, encryptionKey: key(1), macKey: key(2))
    }

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        var sm = session(ciphers[Int(selector >> 2) % ciphers.count])
        switch selector & 3 {
        case 0:
            guard let response = try? ResponseAPDU(parsing: bytes) else { return }
            _ = try? sm.unprotectResponse(response)
        case 1:
            guard let command = try? CommandAPDU(parsing: bytes) else { return }
            _ = try? command.encoded()
            _ = try? sm.unprotectCommand(command)
        case 2:
            // Response data objects followed by a valid DO'8E' under SSC + 1.
            guard bytes.count >= 2, let objects = try? TLV.parseAll(Array(bytes.dropFirst(2)), options: []) else { return }
            let macInput = objects.filter { $0.tag != 0x8E }.flatMap(\.encoded)
            guard let cc = try? SecureMessagingSession.mac(key: sm.macKey, cipher: sm.cipher,
                                                           data: incremented(sm.ssc) + macInput) else { return }
            let data = macInput + TLV(tag: 0x8E, value: cc).encoded
            _ = try? sm.unprotectResponse(ResponseAPDU(data: data, sw: StatusWord(sw1: bytes[0], sw2: bytes[1])))
        default:
            guard let command = try? CommandAPDU(parsing: bytes) else { return }
            _ = try? sm.unprotectCommand(command)
        }
    }

    static func incremented(_ ssc: [UInt8]) -> [UInt8] {
        var out = ssc
        var i = out.count - 1
        while i >= 0 { out[i] &+= 1; if out[i] != 0 { break }; i -= 1 }
        return out
    }
}

/// Every LDS file parser: the selector picks EF.COM, DG1…DG16, EF.SOD or EF.CardAccess (SecurityInfos).
enum LDSTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let index = Int(selector) % (LDSFile.all.count + 1)
        guard index < LDSFile.all.count else {
            _ = try? SecurityInfos(encoded: bytes)
            return
        }
        guard let group = try? LDSDataGroup.parse(LDSFile.all[index], bytes) else { return }
        switch group {
        case .dg1(let dg1): _ = try? dg1.parsedMRZ()
        case .dg14(let dg14):
            // Chip Authentication reads its keys (EC points, DH INTEGERs in SubjectPublicKeyInfo) from DG14.
            if let infos = try? SecurityInfos(encoded: dg14.securityInfos) { _ = ChipAuthentication.candidates(in: infos) }
        default: break
        }
    }
}

/// EF.SOD: CMS SignedData, the LDS security object, the document signer certificate and its path to a fixed
/// CSCA (the trust anchor of the seed passport in the corpus), plus certificate, master-list (signed under that
/// CSCA) and CRL parsing.
enum PassiveAuthenticationTarget {
    static let trustStore: CSCATrustStore = {
        var store = CSCATrustStore()
        store.add(try! ParsedCertificate(der: FixedTrust.cscaDER))
        return store
    }()
    static let options = PassiveAuthentication.Options(referenceDate: Date(timeIntervalSince1970: 1_800_000_000))

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        switch selector % 4 {
        case 0:
            _ = PassiveAuthentication.verify(sod: bytes, dataGroups: [1: FixedTrust.dg1], trustStore: trustStore,
                                             options: options).json
        case 1:
            _ = try? ParsedCertificate(pemOrDER: bytes)
        case 2:
            _ = try? CSCATrustStore.masterListCertificates(bytes, trustedSigners: trustStore.certificates)
        default:
            if let crl = try? CertificateRevocationList(der: bytes) { _ = crl.isStale(at: options.referenceDate) }
        }
    }
}

/// MRZ text (OCR and DG1): TD1, TD2, TD3 and MRV layouts, check digits, names, dates, access keys.
enum MRZTarget {
    static func run(_ input: [UInt8]) {
        guard let mrz = try? MRZ.parse(String(decoding: input, as: UTF8.self)) else { return }
        _ = mrz.lines
    }
}

/// Activation tokens: the compact JWS as received (selector even), or header and claims signed with the fixed
/// issuer key (odd), so the claims checks past the signature run on arbitrary JSON.
enum ActivationTokenTarget {
    static let signingKey = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0x11, count: 32))
    static let verifier = ActivationTokenVerifier(
        issuers: [IssuerKey(issuer: "https://backend.example", keyId: "k1", publicKey: signingKey.publicKey)],
        stationId: "kiosk-1")
    static let now = Date(timeIntervalSince1970: 1_790_000_000)

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        if selector & 1 == 0 {
            _ = try? verifier.verify(String(decoding: bytes, as: UTF8.self), now: now)
            return
        }
        // Header and payload separated by the first 0x00 byte.
        let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let header = Base64URL.encode(Array(parts[0]))
        let payload = Base64URL.encode(parts.count > 1 ? Array(parts[1]) : [])
        let signingInput = header + "." + payload
        guard let signature = try? signingKey.signature(for: Array(signingInput.utf8)) else { return }
        _ = try? verifier.verify(signingInput + "." + Base64URL.encode(Array(signature.rawRepresentation)), now: now)
    }
}

/// The `enrollment` section of the daemon configuration (workflows, steps, issuers, notifier).
enum WorkflowTarget {
    static func run(_ input: [UInt8]) {
        // `publicKeyFile` reads a path the operator names; a fuzzer naming /dev/zero would only test the file system.
        guard !input.isEmpty, !String(decoding: input, as: UTF8.self).contains("publicKeyFile"),
              let json = try? JSONValue.parse(input) else { return }
        _ = try? EnrollmentConfiguration(json: json, baseDirectory: "/nonexistent")
    }
}

/// PN532 host frames, fed in two chunks to the incremental parser.
enum PN532Target {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        var parser = PN532Frame.Parser()
        let split = bytes.isEmpty ? 0 : Int(selector) % (bytes.count + 1)
        _ = parser.feed(Array(bytes[..<split]))
        _ = parser.feed(Array(bytes[split...]))
    }
}

/// vpcd link frames (length-prefixed, fed in two chunks), and each APDU frame as the emulated card parses it.
enum VPCDTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(VPCDFrameDecoder()))
        let split = bytes.isEmpty ? 0 : Int(selector) % (bytes.count + 1)
        for chunk in [bytes[..<split], bytes[split...]] where !chunk.isEmpty {
            do { try channel.writeInbound(channel.allocator.buffer(bytes: chunk)) } catch { break }
        }
        var frames: [[UInt8]] = []
        while let frame = try? channel.readInbound(as: [UInt8].self) { frames.append(frame) }
        _ = try? channel.finish()
        while let frame = try? channel.readInbound(as: [UInt8].self) { frames.append(frame) }
        for frame in frames where frame.count > 1 { _ = try? CommandAPDU(parsing: frame) }
    }
}

/// SSH agent messages (the frame body after its length, as the agent socket hands it over), key blobs and
/// signature blobs.
enum SSHAgentTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        switch selector % 3 {
        case 0: _ = try? AgentRequest.parse(bytes)
        case 1: _ = try? SSHPublicKey(blob: bytes)
        default: _ = try? SSHSignature.parse(bytes)
        }
    }
}
