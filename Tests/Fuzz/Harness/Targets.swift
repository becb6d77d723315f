import APDU
import CBOR
import CTAP2
import CTAPHID
import Crypto
import Enrollment
import FaceMatching
import FoundationEssentials
import ICAO
import MRZ
import NIOCore
import NIOEmbedded
import PN532Emulator
import SSHAgent
import TesseraCore
import X509Support

@testable import RPC
@testable import VPCD

#if canImport(Glibc)
    import Glibc
#endif

/// JSON-RPC over the socket: the NDJSON frame decoder (fed in two chunks, so its incremental scan runs),
/// then per frame the JSON reader, the request envelope and the `Params` accessors handlers use. Selectors
/// from 0x80 take the bytes as one frame. The decoder runs channel-free (`nextFrame`/`lastFrame`, what
/// `decode`/`decodeLast` call) except for selectors 0x70–0x7F, which go through a real NIO pipeline: an
/// `EmbeddedChannel` per input cost about half of each execution.
enum JSONRPCTarget {
    static let maxFrameBytes = 4096

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        if selector >= 0x80 { return request(bytes) }
        let split = bytes.isEmpty ? 0 : Int(selector) % (bytes.count + 1)
        if selector < 0x70 {
            var decoder = LineFrameDecoder(maxFrameBytes: maxFrameBytes)
            var buffer = ByteBuffer()
            var frames: [ByteBuffer] = []
            do {
                for chunk in [bytes[..<split], bytes[split...]] where !chunk.isEmpty {
                    buffer.writeBytes(chunk)
                    while let frame = try decoder.nextFrame(&buffer) { frames.append(frame) }
                }
                if let frame = decoder.lastFrame(&buffer) { frames.append(frame) }
            } catch {}
            for frame in frames { request(Array(frame.readableBytesView)) }
            return
        }
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrameBytes)))
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
            if let children = try? object.children(options: options) {
                walk(children, options: options, depth: depth + 1)
            }
        }
    }
}

/// Response and command APDUs and secure-messaging unwrap with fixed keys (selector: cipher << 2 | mode). Modes
/// 0, 1 and 3 take the bytes as a protected response or command as received; mode 2 takes a status word and the
/// data objects before DO'8E' and appends a correct MAC, so decryption and unpadding run on arbitrary ciphertext.
enum SecureMessagingTarget {
    static let ciphers: [SessionCipher] = [.tripleDES, .aes128, .aes192, .aes256]

    static func session(_ cipher: SessionCipher) -> SecureMessagingSession {
        let key = { (seed: UInt8) in (0..<cipher.keyLength).map { UInt8(truncatingIfNeeded: Int($0) &* 7 &+ Int(seed)) }
        }
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
            guard bytes.count >= 2, let objects = try? TLV.parseAll(Array(bytes.dropFirst(2)), options: []) else {
                return
            }
            let macInput = objects.filter { $0.tag != 0x8E }.flatMap(\.encoded)
            guard
                let cc = try? SecureMessagingSession.mac(
                    key: sm.macKey, cipher: sm.cipher,
                    data: incremented(sm.ssc) + macInput)
            else { return }
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
            if let infos = try? SecurityInfos(encoded: dg14.securityInfos) {
                _ = ChipAuthentication.candidates(in: infos)
            }
        default: break
        }
    }
}

/// EF.SOD: CMS SignedData, the LDS security object, the document signer certificate and its path to a fixed
/// CSCA (the trust anchor of the seed passport in the corpus), plus certificate, master-list (signed under that
/// CSCA), CRL and EF.CardSecurity parsing.
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
            _ =
                PassiveAuthentication.verify(
                    sod: bytes, dataGroups: [1: FixedTrust.dg1], trustStore: trustStore,
                    options: options
                ).json
        case 1:
            _ = try? ParsedCertificate(pemOrDER: bytes)
        case 2:
            _ = try? CSCATrustStore.masterListCertificates(bytes, trustedSigners: trustStore.certificates)
        default:
            if let crl = try? CertificateRevocationList(der: bytes) { _ = crl.isStale(at: options.referenceDate) }
            _ = CardSecurity.verify(bytes, trustStore: trustStore, options: options).json
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

/// Activation tokens, lifecycle commands and recovery tokens: the compact JWS as received (selector even), or
/// header and claims signed with the fixed issuer key (odd), so the claims checks past the signature run on
/// arbitrary JSON.
enum ActivationTokenTarget {
    static let signingKey = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0x11, count: 32))
    static let verifier = ActivationTokenVerifier(
        issuers: [IssuerKey(issuer: "https://backend.example", keyId: "k1", publicKey: signingKey.publicKey)],
        stationId: "kiosk-1")
    static let commands = LifecycleCommandVerifier(issuers: verifier.issuers, stationId: "kiosk-1")
    static let recovery = RecoveryTokenVerifier(issuers: verifier.issuers, stationId: "kiosk-1")
    static let now = Date(timeIntervalSince1970: 1_790_000_000)

    static func verifyAll(_ compact: String) {
        _ = try? verifier.verify(compact, now: now)
        _ = try? commands.verify(compact, now: now)
        _ = try? recovery.verify(compact, now: now)
    }

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        if selector & 1 == 0 {
            verifyAll(String(decoding: bytes, as: UTF8.self))
            return
        }
        // Header and payload separated by the first 0x00 byte.
        let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let header = Base64URL.encode(Array(parts[0]))
        let payload = Base64URL.encode(parts.count > 1 ? Array(parts[1]) : [])
        let signingInput = header + "." + payload
        guard let signature = try? signingKey.signature(for: Array(signingInput.utf8)) else { return }
        verifyAll(signingInput + "." + Base64URL.encode(Array(signature.rawRepresentation)))
    }
}

/// The `enrollment` section of the daemon configuration (workflows, steps, issuers, notifier).
enum WorkflowTarget {
    static func run(_ input: [UInt8]) {
        // `publicKeyFile` reads a path the operator names; a fuzzer naming /dev/zero would only test the file system.
        guard !input.isEmpty, !String(decoding: input, as: UTF8.self).contains("publicKeyFile"),
            let json = try? JSONValue.parse(input)
        else { return }
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
/// Channel-free (`VPCDFrameDecoder.nextFrame`, what `decode` calls) except for selectors 0x70–0x7F (a real NIO
/// pipeline; see `JSONRPCTarget`).
enum VPCDTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let split = bytes.isEmpty ? 0 : Int(selector) % (bytes.count + 1)
        if selector < 0x70 {
            var buffer = ByteBuffer()
            for chunk in [bytes[..<split], bytes[split...]] where !chunk.isEmpty {
                buffer.writeBytes(chunk)
                while let frame = VPCDFrameDecoder.nextFrame(&buffer) {
                    if frame.count > 1 { _ = try? CommandAPDU(parsing: frame) }
                }
            }
            return
        }
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(VPCDFrameDecoder()))
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

/// SSH agent messages (the frame body after its length, as the agent socket hands it over), key blobs, signature
/// blobs, and `session-bind@openssh.com` contents through the host key signature check.
enum SSHAgentTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        switch selector % 4 {
        case 0: _ = try? AgentRequest.parse(bytes)
        case 1: _ = try? SSHPublicKey(blob: bytes)
        case 2: _ = try? SSHSignature.parse(bytes)
        default:
            guard let bind = try? SessionBind(bytes) else { return }
            _ = HostKeySignature.isValid(bind.signature, hostKey: bind.hostKey, over: bind.sessionID)
        }
    }
}

/// CTAPHID reports from two clients into one device (channel ids from a counter), the clock advancing with the
/// input, dispatched CBOR requests answered at once.
enum CTAPHIDTarget {
    static func run(_ input: [UInt8]) {
        final class Counter: @unchecked Sendable { var next: UInt32 = 1 }
        let counter = Counter()
        var device = CTAPHIDDevice {
            defer { counter.next &+= 1 }; return counter.next
        }
        var now = ContinuousClock.now
        var offset = 0
        while offset < input.count {
            let control = input[offset]
            offset += 1
            let report = Array(input[offset..<min(offset + CTAPHID.reportSize, input.count)])
            offset += report.count
            now = now + .milliseconds(Int(control & 0x3F) * 20)
            for action in device.receive(report, from: UInt64(control >> 7), now: now) {
                if case .dispatch(_, let channel, let payload) = action {
                    _ = device.finish(channel: channel, response: payload)
                }
            }
            if control & 0x40 != 0 { _ = device.disconnected(UInt64(control >> 7)) }
            _ = device.expire(now: now)
        }
        _ = UHID.parse(input)
    }
}

/// CTAP2 requests as the authenticator parses them: command byte ‖ CBOR, decoded with the authenticator's limits,
/// then the makeCredential and getAssertion parameter parsers.
enum CTAP2Target {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        guard let map = try? CBORValue(decoding: bytes, options: CBORDecodingOptions(maxDepth: 8, maxItems: 4096))
        else { return }
        switch selector % 5 {
        case 0: _ = try? MakeCredentialRequest(map)
        case 1: _ = try? GetAssertionRequest(map)
        case 2: _ = try? ClientPINRequest(map)
        case 3: _ = try? PINKeyAgreement().sharedSecret(with: map, protocol: .two)
        default: _ = try? CredentialManagementRequest(map).credentialId()
        }
    }
}

/// ECDSA signatures from tokens and cards (DER, strict or lenient per the selector, for P-256/384/521 or a
/// length-only group). What decodes must re-encode to minimal DER that decodes strictly to the same `r ‖ s`.
enum ECDSATarget {
    static let groups: [ECDSASignature.Group] = [.p256, .p384, .p521, .init(componentLength: 32)]

    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        let group = groups[Int(selector >> 1) % groups.count]
        let strictness: ECDSASignature.Strictness = selector & 1 == 0 ? .strict : .lenient
        guard let raw = try? ECDSASignature.rawFromDER(bytes, group: group, strictness: strictness) else { return }
        guard let der = try? ECDSASignature.derFromRaw(raw, group: group),
            (try? ECDSASignature.rawFromDER(der, group: group)) == raw
        else {
            fatalError("ECDSA signature does not round-trip: \(Hex.encode(bytes))")
        }
        if strictness == .strict, der != bytes { fatalError("strict DER accepted a non-canonical encoding") }
    }
}

/// The face matcher's answer (a configured program's stdout) and the `faceMatching` config section.
enum FaceMatchTarget {
    static func run(_ input: [UInt8]) {
        if let answer = FaceMatchAnswer(output: input) {
            guard FaceMatchAnswer(output: answer.json.serialized())?.decision == answer.decision else {
                fatalError("a face matcher answer does not round-trip: \(Hex.encode(input))")
            }
        }
        if let json = try? JSONValue.parse(input) {
            _ = try? FaceMatcherConfiguration(json: json, defaultCommand: nil)
            _ = try? FaceImage(json: json, field: "image")
        }
        _ = FaceImage.decodeBase64(String(decoding: input, as: UTF8.self))
    }
}
