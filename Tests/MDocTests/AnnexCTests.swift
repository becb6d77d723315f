import CBOR
import Crypto
import FoundationEssentials
@_spi(Testing) import MDoc
import TesseraCore
import TesseraTestSupport
import Testing

/// ISO/IEC 18013-7 Annex C (Digital Credentials API, "org-iso-mdoc"): published vectors, a holder ↔ reader round
/// trip with a Tessera-issued mDL, refusals, and python `cryptography` HPKE + `cbor2` on the other side.
@Suite struct AnnexCTests {
    static let origin = "https://verifier.example"

    static func hex(_ text: String) -> [UInt8] { Hex.decode(text)! }

    // MARK: published vectors

    /// RFC 9180 Appendix A.3.1: DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, base mode — Annex C's
    /// ciphersuite. The recipient opens the first encryption (sequence 0, aad "Count-0").
    @Test func rfc9180A31OpensWithTheAnnexCCiphersuite() throws {
        let skRm = try P256.KeyAgreement.PrivateKey(
            rawRepresentation: Self.hex("f3ce7fdae57e1a310d87f1ebbde6f328be0a99cdbcadf4d6589cf29de4b8ffd2"))
        #expect(
            Array(skRm.publicKey.x963Representation)
                == Self.hex(
                    "04fe8c19ce0905191ebc298a9245792531f26f0cece2460639e8bc39cb7f706a826a779b4cf969b8a0e539c7f62fb3d30ad6aa8f80e30f1d128aafd68a2ce72ea0"
                ))
        let enc = Self.hex(
            "04a92719c6195d5085104f469a8b9814d5838ff72b60501e2c4466e5e67b325ac98536d7b61a1af4b78e5b7f951c0900be863c403ce65c9bfcb9382657222d18c4"
        )
        let ct = Self.hex("5ad590bb8baa577f8619db35a36311226a896e7342a6d836d8b7bcd2f20b6c7f9076ac232e3ab2523f39513434")
        let pt = try AnnexC.hpkeOpen(
            enc: enc, cipherText: ct, privateKey: skRm, info: Array("Ode on a Grecian Urn".utf8),
            aad: Array("Count-0".utf8))
        #expect(pt == Array("Beauty is truth, truth beauty".utf8))
        #expect(throws: TesseraError.self) {
            try AnnexC.hpkeOpen(
                enc: enc, cipherText: ct, privateKey: skRm, info: Array("Ode on a Grecian Urn".utf8), aad: [])
        }
    }

    /// ISO/IEC 18013-7 2nd edition Annex C reference request (W3C web-platform-tests
    /// digital-credentials/mdoc/valid-roundtrip.https.html, "Vectors provided by Martijn Haring (ISO/IEC JTC 1/SC
    /// 17/WG 10)"; docType org.iso.18013.5.1.mDL, family_name and document_number). The DeviceRequest parses; the
    /// EncryptionInfo we could retrieve is cut inside the y coordinate, so its first 92 bytes are compared with
    /// Tessera's encoding of the same nonce and x (either y of that x: the cut comes before it).
    @Test func theISOReferenceRequestParsesAndEncryptionInfoEncodesAlike() throws {
        let deviceRequest =
            "omd2ZXJzaW9uYzEuMGtkb2NSZXF1ZXN0c4GhbGl0ZW1zUmVxdWVzdNgYWFyiZ2RvY1R5cGV1b3JnLmlzby4xODAxMy41LjEubURMam5hbWVTcGFjZXOhcW9yZy5pc28uMTgwMTMuNS4xomtmYW1pbHlfbmFtZfRvZG9jdW1lbnRfbnVtYmVy9A"
        let request = try DeviceRequest(bytes: try #require(Base64URL.decode(deviceRequest)))
        #expect(request.version == "1.0")
        let doc = try #require(request.docRequests.first)
        #expect(doc.docType == MDL.docType)
        #expect(doc.readerAuth == nil)
        #expect(doc.nameSpaces.map(\.namespace) == [MDL.namespace])
        #expect(doc.nameSpaces[0].elements.map(\.identifier) == ["family_name", "document_number"])
        #expect(doc.nameSpaces[0].elements.map(\.intentToRetain) == [false, false])

        let publishedPrefix = Self.hex(
            "82656463617069a2656e6f6e636550b93051f726d8c8cc47939f3abec046b772726563697069656e745075626c69634b6579"
                + "a40102200121582060e3392385041f51403051f2415531cb56dd3f999c71687013aac6768bc8187e2258")
        let nonce = Array(publishedPrefix[15..<31])
        let x = Array(publishedPrefix[58..<90])
        let key = try P256.KeyAgreement.PublicKey(compressedRepresentation: [0x02] + x)
        let info = try AnnexCEncryptionInfo(nonce: nonce, recipientPublicKey: key)
        #expect(Array(info.bytes.prefix(publishedPrefix.count)) == publishedPrefix)
        #expect(info.bytes.count == publishedPrefix.count + 1 + 32)
        let parsed = try AnnexCEncryptionInfo(base64url: info.base64url)
        #expect(parsed == info)
        #expect(parsed.nonce == nonce)
        #expect(parsed.recipientPublicKey.x == x)
        // The same bytes, parsed as the holder receives them (the deviceRequest as published).
        let full = try AnnexCRequest(deviceRequest: deviceRequest, encryptionInfo: info.base64url)
        #expect(full.deviceRequest == request)
    }

    // MARK: round trip

    struct Reader {
        var key = P256.KeyAgreement.PrivateKey()
        var info: AnnexCEncryptionInfo
        var request: AnnexCRequest
        var transcript: SessionTranscript

        init(elements: [String], origin: String = AnnexCTests.origin) throws {
            info = try AnnexCEncryptionInfo(nonce: SecureRandom.bytes(16), recipientPublicKey: key.publicKey)
            transcript = SessionTranscript(dcapiEncryptionInfo: info.base64url, origin: origin)
            let doc = try DocRequest.make(
                docType: MDL.docType, elements: [MDL.namespace: elements], sessionTranscript: transcript)
            request = try AnnexCRequest(deviceRequest: DeviceRequest(docRequests: [doc]), encryptionInfo: info)
        }
    }

    @Test func theSessionTranscriptIsNullNullAndTheDcapiHandover() throws {
        let info = "gmVkY2FwaaJlbm9uY2VQ"
        let transcript = SessionTranscript(dcapiEncryptionInfo: info, origin: Self.origin)
        // dcapiInfo by hand: array(2), text(20) info, text(24) origin.
        let dcapiInfo: [UInt8] = [0x82, 0x74] + Array(info.utf8) + [0x78, 0x18] + Array(Self.origin.utf8)
        let hash = Array(SHA256.hash(data: dcapiInfo))
        #expect(transcript.encoded == [0x83, 0xF6, 0xF6, 0x82, 0x65] + Array("dcapi".utf8) + [0x58, 0x20] + hash)
    }

    @Test func aHolderSealsWhatTheReaderOpensAndVerifies() throws {
        let holder = try IssuanceTests.issue()
        let reader = try Reader(elements: ["family_name", "document_number", "portrait"])

        // Holder: the request as the Digital Credentials API hands it over, with the caller's origin.
        let received = try AnnexCRequest(json: reader.request.json)
        let transcript = try received.sessionTranscript(origin: Self.origin)
        #expect(transcript == reader.transcript)
        let wanted = Set(received.deviceRequest.docRequests[0].nameSpaces[0].elements.map(\.identifier))
        let response = try IssuanceTests.present(holder, transcript: transcript, keep: wanted)
        let sealed = try AnnexC.seal(
            deviceResponse: response.encoded, encryptionInfo: received.encryptionInfo, sessionTranscript: transcript)
        #expect(sealed.enc.count == 65)
        #expect(sealed.cipherText.count == response.encoded.count + 16)

        // Reader: the page's `{response}`.
        let got = try AnnexCEncryptedResponse(json: sealed.json)
        #expect(got == sealed)
        let plain = try AnnexC.open(got, recipientPrivateKey: reader.key, sessionTranscript: reader.transcript)
        #expect(plain == response.encoded)
        let result = MDocVerifier.verify(
            response: try DeviceResponse(bytes: plain), session: .init(transcript: reader.transcript),
            iacas: [holder.iaca], now: Date())[0]
        #expect(result.reasons == [])
        #expect(result.verdict == .authentic)
        #expect(Set(result.elements.map(\.identifier)) == wanted)
    }

    @Test func anotherOriginKeyOrTamperedCipherTextDoesNotDecrypt() throws {
        let reader = try Reader(elements: ["family_name"])
        let sealed = try AnnexC.seal(
            deviceResponse: [0xA0], encryptionInfo: reader.info, sessionTranscript: reader.transcript)
        #expect(
            try AnnexC.open(sealed, recipientPrivateKey: reader.key, sessionTranscript: reader.transcript) == [0xA0])
        let elsewhere = try reader.request.sessionTranscript(origin: "https://evil.example")
        var tampered = sealed.cipherText
        tampered[0] ^= 1
        let attempts: [(AnnexCEncryptedResponse, P256.KeyAgreement.PrivateKey, SessionTranscript)] = [
            (sealed, reader.key, elsewhere),
            (sealed, P256.KeyAgreement.PrivateKey(), reader.transcript),
            (AnnexCEncryptedResponse(enc: sealed.enc, cipherText: tampered), reader.key, reader.transcript),
        ]
        for (response, key, transcript) in attempts {
            let error = #expect(throws: TesseraError.self) {
                try AnnexC.open(response, recipientPrivateKey: key, sessionTranscript: transcript)
            }
            #expect(error?.code == .cryptoError)
        }
    }

    // MARK: refusals

    static func encodedInfo(_ value: CBORValue) -> String { Base64URL.encode(MDocCBOR.encode(value)) }

    /// `[tag, {pairs}]` with text keys.
    static func tagged(_ tag: String, _ pairs: [(String, CBORValue)]) -> CBORValue {
        .array([.textString(tag), .map(pairs.map { (key: CBORValue.textString($0.0), value: $0.1) })])
    }

    @Test func malformedRequestsNameTheirField() throws {
        let reader = try Reader(elements: ["family_name"])
        let good = reader.request
        let key = reader.info.recipientPublicKey
        let p384 = P384.KeyAgreement.PrivateKey().publicKey.x963Representation
        let offCurve = try MDocECKey(curve: 1, x: key.x, y: key.y.map { $0 ^ 0x01 })
        let nonce = CBORValue.byteString([UInt8](repeating: 7, count: 16))
        let cases: [(deviceRequest: String, encryptionInfo: String, field: String)] = [
            (good.deviceRequestBase64url, "not base64url!", "encryptionInfo"),
            (good.deviceRequestBase64url, Base64URL.encode([0xFF, 0x00]), "encryptionInfo"),
            (good.deviceRequestBase64url, Self.encodedInfo(.array([.textString("dcapi")])), "encryptionInfo"),
            (
                good.deviceRequestBase64url,
                Self.encodedInfo(Self.tagged("other", [("nonce", nonce), ("recipientPublicKey", key.value)])),
                "encryptionInfo"
            ),
            (
                good.deviceRequestBase64url,
                Self.encodedInfo(
                    Self.tagged("dcapi", [("nonce", .byteString([1, 2, 3])), ("recipientPublicKey", key.value)])),
                "encryptionInfo"
            ),
            (good.deviceRequestBase64url, Self.encodedInfo(Self.tagged("dcapi", [("nonce", nonce)])), "encryptionInfo"),
            (
                good.deviceRequestBase64url,
                Self.encodedInfo(
                    Self.tagged(
                        "dcapi",
                        [("nonce", nonce), ("recipientPublicKey", try MDocECKey(uncompressedPoint: Array(p384)).value)])
                ),
                "encryptionInfo"
            ),
            (
                good.deviceRequestBase64url,
                Self.encodedInfo(Self.tagged("dcapi", [("nonce", nonce), ("recipientPublicKey", offCurve.value)])),
                "encryptionInfo"
            ),
            ("", good.encryptionInfo.base64url, "deviceRequest"),
            (Base64URL.encode([0x18]), good.encryptionInfo.base64url, "deviceRequest"),
            (
                Base64URL.encode(DeviceRequest(docRequests: []).encoded), good.encryptionInfo.base64url,
                "deviceRequest"
            ),
        ]
        for c in cases {
            let error = #expect(throws: TesseraError.self) {
                try AnnexCRequest(deviceRequest: c.deviceRequest, encryptionInfo: c.encryptionInfo)
            }
            #expect(error?.code == .mdocRequestMalformed)
            #expect(error?.details["field"] == .string(c.field))
        }
        let notObject = #expect(throws: TesseraError.self) { try AnnexCRequest(json: .string("x")) }
        #expect(notObject?.code == .mdocRequestMalformed)
        let missing = #expect(throws: TesseraError.self) {
            try AnnexCRequest(json: .object(["deviceRequest": .string(good.deviceRequestBase64url)]))
        }
        #expect(missing?.details["field"] == .string("encryptionInfo"))

        for origin in [
            "", "verifier.example", "https://verifier.example/path", "https://", "HTTPS://verifier.example",
            "https://verifier.example?q", "https://verifier .example",
        ] {
            let error = #expect(throws: TesseraError.self) { try good.sessionTranscript(origin: origin) }
            #expect(error?.code == .mdocRequestMalformed)
            #expect(error?.details["field"] == .string("origin"))
        }
        for origin in ["https://verifier.example", "https://verifier.example:8443", "http://localhost:3000"] {
            _ = try good.sessionTranscript(origin: origin)
        }
    }

    @Test func malformedEncryptedResponsesAreRefused() throws {
        let enc = [0x04] + [UInt8](repeating: 1, count: 64)
        let tag = [UInt8](repeating: 2, count: 16)
        let cases: [CBORValue] = [
            .array([.textString("dcapi")]),
            Self.tagged("other", [("enc", .byteString(enc)), ("cipherText", .byteString(tag))]),
            Self.tagged("dcapi", [("enc", .byteString(Array(enc.prefix(33)))), ("cipherText", .byteString(tag))]),
            Self.tagged("dcapi", [("enc", .byteString(enc))]),
            Self.tagged("dcapi", [("enc", .byteString(enc)), ("cipherText", .byteString([1, 2]))]),
        ]
        for value in cases {
            let error = #expect(throws: TesseraError.self) {
                try AnnexCEncryptedResponse(bytes: MDocCBOR.encode(value))
            }
            #expect(error?.code == .mdocResponseMalformed)
        }
        let notCBOR = #expect(throws: TesseraError.self) { try AnnexCEncryptedResponse(bytes: [0x9F]) }
        #expect(notCBOR?.code == .mdocResponseMalformed)
        let noResponse = #expect(throws: TesseraError.self) {
            try AnnexCEncryptedResponse(json: .object(["Response": .string("gmVkY2FwaQ")]))
        }
        #expect(noResponse?.code == .mdocResponseMalformed)
        let good = AnnexCEncryptedResponse(enc: enc, cipherText: tag)
        #expect(try AnnexCEncryptedResponse(bytes: good.encoded) == good)
    }

    // MARK: python cryptography (OpenSSL HPKE) + cbor2 on the other side

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    static func python(_ arguments: [String]) async throws -> JSONValue {
        let python = repository.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            Issue.record("no \(python): run scripts/setup.sh (python cryptography with HPKE, cbor2)")
            throw TesseraError(.internalError, "no .venv")
        }
        let helper = repository.appendingPathComponent("Tests/e2e/annexc_hpke.py").path
        let result = try await Subprocess.run(python, [helper] + arguments)
        guard result.status == 0 else {
            Issue.record("annexc_hpke.py \(arguments.first ?? ""): \(result.output)")
            throw TesseraError(.internalError, "annexc_hpke.py failed")
        }
        return try JSONValue.parse(result.stdout)
    }

    @Test func pythonOpensWhatTesseraSealsAndTesseraOpensWhatPythonSeals() async throws {
        let holder = try IssuanceTests.issue()
        let deviceRequest = try DeviceRequest(docRequests: [
            DocRequest.make(
                docType: MDL.docType, elements: [MDL.namespace: ["family_name"]],
                sessionTranscript: SessionTranscript(encoded: [0xF6]))
        ])

        // python is the reader: its EncryptionInfo, Tessera seals, python opens.
        let pythonReader = try await Self.python(["reader"])
        guard case .string(let pythonKey)? = pythonReader["privateKey"],
            case .string(let pythonInfo)? = pythonReader["encryptionInfo"]
        else { throw TesseraError(.internalError, "reader output") }
        let request = try AnnexCRequest(
            deviceRequest: Base64URL.encode(deviceRequest.encoded), encryptionInfo: pythonInfo)
        let transcript = try request.sessionTranscript(origin: Self.origin)
        let response = try IssuanceTests.present(holder, transcript: transcript, keep: ["family_name"])
        let sealed = try AnnexC.seal(
            deviceResponse: response.encoded, encryptionInfo: request.encryptionInfo, sessionTranscript: transcript)
        guard case .string(let sealedText)? = sealed.json["response"] else { throw TesseraError(.internalError, "") }
        let opened = try await Self.python(["open", pythonKey, pythonInfo, Self.origin, sealedText])
        #expect(opened["deviceResponse"] == .string(Hex.encode(response.encoded)))
        // …and not for another origin.
        let python = Self.repository.appendingPathComponent(".venv/bin/python").path
        let elsewhere = try await Subprocess.run(
            python,
            [
                Self.repository.appendingPathComponent("Tests/e2e/annexc_hpke.py").path, "open", pythonKey, pythonInfo,
                "https://evil.example", sealedText,
            ])
        #expect(elsewhere.status != 0)

        // Tessera is the reader: python seals to Tessera's EncryptionInfo, Tessera opens and verifies.
        let reader = try Reader(elements: ["family_name"])
        let forReader = try IssuanceTests.present(holder, transcript: reader.transcript, keep: ["family_name"])
        let pythonSealed = try await Self.python([
            "seal", reader.info.base64url, Self.origin, Hex.encode(forReader.encoded),
        ])
        let plain = try AnnexC.open(
            try AnnexCEncryptedResponse(json: pythonSealed), recipientPrivateKey: reader.key,
            sessionTranscript: reader.transcript)
        #expect(plain == forReader.encoded)
        let result = MDocVerifier.verify(
            response: try DeviceResponse(bytes: plain), session: .init(transcript: reader.transcript),
            iacas: [holder.iaca], now: Date())[0]
        #expect(result.verdict == .authentic)
    }
}
