import FoundationEssentials
import TesseraCore
import Testing
import WebAuthn

/// The members of collectedClientData as an independent reader (FoundationEssentials' JSONDecoder) sees them.
private struct ClientDataMembers: Decodable {
    let keys: [String]
    let type: String
    let challenge: String
    let origin: String
    let crossOrigin: Bool?
    let topOrigin: String?

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        keys = c.allKeys.map(\.stringValue)
        type = try c.decode(String.self, forKey: Key("type"))
        challenge = try c.decode(String.self, forKey: Key("challenge"))
        origin = try c.decode(String.self, forKey: Key("origin"))
        crossOrigin = try c.decodeIfPresent(Bool.self, forKey: Key("crossOrigin"))
        topOrigin = try c.decodeIfPresent(String.self, forKey: Key("topOrigin"))
    }

    private struct Key: CodingKey {
        let stringValue: String
        init(_ name: String) { stringValue = name }
        init(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }
}

private func jsonObject(_ bytes: [UInt8]) throws -> ClientDataMembers {
    try JSONDecoder().decode(ClientDataMembers.self, from: Data(bytes))
}

@Suite struct ClientDataJSON {
    @Test func exactSerializationForASimpleCase() throws {
        let data = CollectedClientData(type: .create, challenge: Array(0...15), origin: "https://example.com")
        // base64url(00 01 … 0f) without padding, computed with Python's base64 module.
        let expected =
            #"{"type":"webauthn.create","challenge":"AAECAwQFBgcICQoLDA0ODw","origin":"https://example.com","crossOrigin":false}"#
        #expect(String(decoding: data.json, as: UTF8.self) == expected)
    }

    @Test func parsesAsJSONWithExactlyTheExpectedMembers() throws {
        let challenge: [UInt8] = Array(repeating: 0xFB, count: 33)
        let data = CollectedClientData(type: .get, challenge: challenge, origin: "https://login.example.com:8443")
        let object = try jsonObject(data.json)
        #expect(Set(object.keys) == ["type", "challenge", "origin", "crossOrigin"])
        #expect(object.type == "webauthn.get")
        #expect(object.origin == "https://login.example.com:8443")
        #expect(object.crossOrigin == false)
        let encodedChallenge = object.challenge
        #expect(!encodedChallenge.contains("=") && !encodedChallenge.contains("+") && !encodedChallenge.contains("/"))
        var padded = encodedChallenge.replacing("-", with: "+").replacing("_", with: "/")
        padded += String(repeating: "=", count: (4 - padded.count % 4) % 4)
        #expect(Data(base64Encoded: padded).map(Array.init) == challenge)
    }

    @Test func memberOrderIsTypeChallengeOriginCrossOrigin() throws {
        let text = String(decoding: CollectedClientData(type: .get, challenge: [1], origin: "o").json, as: UTF8.self)
        let positions = ["\"type\"", "\"challenge\"", "\"origin\"", "\"crossOrigin\""].map {
            text.firstRange(of: $0)!.lowerBound
        }
        #expect(positions == positions.sorted())
        #expect(text.hasPrefix(#"{"type":"#))
    }

    @Test func crossOriginAndTopOrigin() throws {
        let data = CollectedClientData(
            type: .get, challenge: [0xFF], origin: "https://a.example",
            crossOrigin: true, topOrigin: "https://b.example")
        #expect(
            String(decoding: data.json, as: UTF8.self)
                == #"{"type":"webauthn.get","challenge":"_w","origin":"https://a.example","crossOrigin":true,"topOrigin":"https://b.example"}"#
        )
        let object = try jsonObject(data.json)
        #expect(object.crossOrigin == true)
        #expect(object.topOrigin == "https://b.example")
    }

    @Test func ccdToStringEscaping() throws {
        // WebAuthn §5.8.1.2 CCDToString: escape only ", \ and code points below U+0020 (as \u00xx, lower-case hex).
        let origin = "a\"b\\c\u{01}d\ne\u{1F}f\u{7F}g/h\u{E9}i\u{1F600}"
        let data = CollectedClientData(type: .get, challenge: [], origin: origin)
        let expectedOrigin = #""a\"b\\c\u0001d\u000ae\u001ff"# + "\u{7F}g/h\u{E9}i\u{1F600}\""
        let text = String(decoding: data.json, as: UTF8.self)
        #expect(
            text == #"{"type":"webauthn.get","challenge":"","origin":"# + expectedOrigin + #","crossOrigin":false}"#)
        #expect(try jsonObject(data.json).origin == origin)
    }

    @Test func hashIsSHA256OfTheJSON() {
        let data = CollectedClientData(type: .create, challenge: Array(0...15), origin: "https://example.com")
        #expect(data.hash.count == 32)
        #expect(
            data.hash != CollectedClientData(type: .get, challenge: Array(0...15), origin: "https://example.com").hash)
    }
}
