import CredentialStore
@_spi(Testing) import DoorList
import FoundationEssentials
import ICAO
import PIV
import TesseraCore
import TesseraTestSupport
import Testing
import X509Support

@testable import AccessControl

/// The door list's rules (TUF's): a door applies a list signed by the publisher, above the number it has, before
/// its expiry, and stops deciding with it past the freeze bound; the badge CA's CRL follows the same rules.
struct DoorListTests {
    static func list(number: UInt64, issuedAt: Date, validity: Double = 3600) -> DoorList {
        DoorList(
            number: number, issuedAt: issuedAt, expiresAt: issuedAt + validity,
            badges: [
                .init(
                    id: "NEdfQmFkZ2U", holder: "alice", keySHA256: String(repeating: "ab", count: 32), state: "active"),
                .init(
                    id: "NEdfQmFkZ2f", holder: "bob", keySHA256: String(repeating: "cd", count: 32), state: "suspended"),
            ],
            doors: ["lobby": .init(readers: ["Reader 0"], allow: ["alice", "bob"], grantCommand: ["/bin/true"])])
    }

    @Test func aSignedNewerUnexpiredListIsAppliedAndIndexed() async throws {
        let pki = try await BadgePKI.make()
        let publisher = try pki.authority.parsedCertificate()
        let signed = try await pki.authority.sign(Self.list(number: 7, issuedAt: pki.now))
        let index = try SignedDoorList.accept(signed, publisher: publisher, current: 6, now: pki.now).get()
        let list = Self.list(number: 7, issuedAt: index.list.issuedAt)
        // The door reads the content without copying it per nesting level: the signature detached from it.
        let (detached, content) = try #require(SignedDoorList.detachContent(signed))
        #expect(content == (try list.encoded()) && detached.count < 2000)
        #expect(abs(index.list.issuedAt.timeIntervalSince(pki.now)) < 1)
        #expect(index.list.number == 7 && index.list.doors == list.doors && index.list.badges.isEmpty)
        #expect(index.badge("NEdfQmFkZ2f") == list.badges[1])
        #expect(index.badge("NEdfQmFkZ2U") == list.badges[0])
        #expect(index.badge("NEdfQmFkZ2V") == nil)
        #expect(index.badgeCount == 2)
        // The plain index of the same list answers the same.
        #expect(DoorListIndex(list).badge("NEdfQmFkZ2f") == list.badges[1])
        let doors = try RegistryFollower.doorTable(list.doors)
        #expect(doors.door(ofReader: "Reader 0")?.name == "lobby")
        #expect(doors.door(ofReader: "Reader 0")?.admits(holder: "bob", badgeId: nil) == true)
        #expect(doors.door(ofReader: "Reader 0")?.grantCommand == ["/bin/true"])
        #expect(index.badgeCount == 2)
    }

    @Test func aTamperedForeignOlderExpiredOrMalformedListIsRefused() async throws {
        let pki = try await BadgePKI.make()
        let publisher = try pki.authority.parsedCertificate()
        let signed = try await pki.authority.sign(Self.list(number: 7, issuedAt: pki.now))
        // One byte of the JSON changed ("alice" → "alicf"): the message digest no longer matches.
        var tampered = signed
        let at = try #require(findBytes(Array("alice".utf8), in: tampered))
        tampered[at + 4] ^= 0x03
        #expect(
            SignedDoorList.accept(tampered, publisher: publisher, current: nil, now: pki.now).map(\.list.number)
                == .failure(.signature))
        let foreign = try await pki.stranger.sign(Self.list(number: 8, issuedAt: pki.now))
        #expect(
            SignedDoorList.accept(foreign, publisher: publisher, current: nil, now: pki.now).map(\.list.number)
                == .failure(.signature))
        #expect(
            SignedDoorList.accept(signed, publisher: publisher, current: 7, now: pki.now).map(\.list.number)
                == .failure(.notNewer))
        #expect(
            SignedDoorList.accept(signed, publisher: publisher, current: 9, now: pki.now).map(\.list.number)
                == .failure(.notNewer))
        #expect(
            SignedDoorList.accept(signed, publisher: publisher, current: 6, now: pki.now + 3600).map(\.list.number)
                == .failure(.expired))
        #expect(
            SignedDoorList.accept(Array(signed.prefix(100)), publisher: publisher, current: nil, now: pki.now)
                .map(\.list.number) == .failure(.malformed))
        // Signed by the publisher, but another format.
        var future = Self.list(number: 8, issuedAt: pki.now)
        future.format = 2
        let unknown = try await pki.authority.sign(future)
        #expect(
            SignedDoorList.accept(unknown, publisher: publisher, current: nil, now: pki.now).map(\.list.number)
                == .failure(.malformed))
    }

    /// The door reads the list's JSON straight into its index (`JSONPullReader`): every badge is found as the office
    /// wrote it (escaped and non-ASCII holders, holders shared by many badges, auth keys, a FASC-N id, an id that is
    /// not base64url, a repeated id whose last entry counts), and the header reads as Foundation's decoder reads it.
    @Test func aListIsReadStraightIntoTheIndex() throws {
        var g = SeededRandom(stream: "DoorListIndex")
        func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) } }
        let issued = Date(timeIntervalSince1970: 1_800_000_000)
        let states = ["active", "suspended", "deactivated", "replaced"]
        let holders = ["Zoë \"Z\" Ångström", "back\\slash/", "line\nbreak 😀"] + (0..<3000).map { "holder-\($0)" }
        var badges = (0..<10_000).map { i in
            DoorList.Badge(
                id: Base64URL.encode([0x34] + bytes(16)), holder: holders.randomElement(using: &g)!,
                keySHA256: Hex.encode(bytes(32)), authKeySHA256: i % 3 == 0 ? Hex.encode(bytes(32)) : nil,
                state: states.randomElement(using: &g)!)
        }
        badges.append(.init(id: Base64URL.encode([0x30] + bytes(25)), holder: "fascn", keySHA256: "-", state: "active"))
        badges.append(.init(id: "not an id!", holder: "other", keySHA256: Hex.encode(bytes(32)), state: "active"))
        var repeated = badges[5]
        repeated.state = "replaced"
        repeated.holder = "the last one"
        badges.append(repeated)
        let list = DoorList(
            number: 9, issuedAt: issued, expiresAt: issued + 600, badges: badges,
            doors: [
                "lobby": .init(readers: ["Reader 0"], allow: ["holder-1"], grantCommand: ["/bin/true", "é"]),
                "vault": .init(readers: ["Reader 1", "Reader 2"], allow: [], mode: "auth"),
            ])
        let json = try list.encoded()
        let index = try DoorListIndex.decode(json)
        #expect(index.badgeCount == badges.count)
        let expected = badges.enumerated().filter { $0.offset != 5 }.map(\.element)
        let wrong = expected.filter { index.badge($0.id) != $0 }
        #expect(wrong.isEmpty, "\(wrong.prefix(3)) \(SeededRandom.reproduce)")
        #expect(index.badge(Base64URL.encode([0x34] + bytes(16))) == nil)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var reference = try decoder.decode(DoorList.self, from: Data(json))
        reference.badges = []
        #expect(index.list == reference)
        // The plain index of the same list answers the same.
        let plain = DoorListIndex(list)
        #expect(expected.allSatisfy { plain.badge($0.id) == $0 })
    }

    /// Anything that is not a door list of this format is MALFORMED_DATA, and a member the door does not know is
    /// skipped (a later office may add one).
    @Test func aMalformedListIsRefusedWithTheByteItBrokeAt() throws {
        let key = String(repeating: "ab", count: 32)
        let badge = #"{"holder":"a","id":"NEdfQmFkZ2U","keySHA256":"\#(key)","state":"active"}"#
        let rest =
            #""doors":{"d":{"allow":["a"],"readers":["R"]}},"expiresAt":"2027-01-15T08:00:00Z","format":1,"#
            + #""issuedAt":"2027-01-15T07:00:00Z","number":3"#
        let good = #"{"badges":[\#(badge)],\#(rest)}"#
        let index = try DoorListIndex.decode(Array(good.utf8))
        #expect(index.list.number == 3 && index.badge("NEdfQmFkZ2U")?.holder == "a")
        let extended =
            #"{"later":{"x":[1,{"y":null}]},"badges":[{"more":[true],"#
            + badge.dropFirst() + #"],\#(rest)}"#
        #expect(try DoorListIndex.decode(Array(extended.utf8)).badge("NEdfQmFkZ2U")?.state == "active")
        let bad: [(String, String)] = [
            (String(good.dropLast()), "expected"),
            (String(good.prefix(40)), "expected"),
            (good + "x", "the end of the document"),
            (good.replacing(#""format":1"#, with: #""format":2"#), "format 2"),
            (good.replacing(#""number":3"#, with: #""number":-3"#), "a whole number"),
            (good.replacing(#""number":3"#, with: #""number":"3""#), "a number"),
            (good.replacing(#""id":"NEdfQmFkZ2U","#, with: ""), "badge 0 lacks"),
            (good.replacing("2027-01-15T08:00:00Z", with: "tomorrow"), "expiresAt is not a date"),
            (good.replacing(#""readers":["R"]"#, with: #""readers":"R""#), "an array"),
            (good.replacing(#""number":3"#, with: #""number":3,"badges":[]"#), "badges appears twice"),
            (good.replacing(#""format":1,"#, with: ""), "a door list has"),
            (good.replacing(#""holder":"a""#, with: #""holder":"\u00""#), "four hex digits"),
        ]
        for (text, expected) in bad {
            do {
                _ = try DoorListIndex.decode(Array(text.utf8))
                Issue.record("decoded: \(text)")
            } catch {
                #expect(error.code == .malformedData && error.message.contains(expected), "\(text): \(error.message)")
            }
        }
    }

    @Test func aListPastItsFreezeBoundOrExpiryIsStale() {
        let issued = Date(timeIntervalSince1970: 1_800_000_000)
        let list = Self.list(number: 1, issuedAt: issued, validity: 600)
        #expect(!list.isStale(at: issued + 30, maxAge: 60))
        #expect(list.isStale(at: issued + 61, maxAge: 60))
        #expect(list.isStale(at: issued + 600, maxAge: 10_000))
        #expect(list.age(at: issued - 5) == 0)
    }

    @Test func theFollowerKeepsItsListWhenOfferedABadOne() async throws {
        let pki = try await BadgePKI.make()
        let follower = RegistryFollower(publisher: try pki.authority.parsedCertificate(), maxAge: 60)
        #expect(await follower.view(at: pki.now).stale)
        let first = try await pki.authority.sign(Self.list(number: 3, issuedAt: pki.now))
        #expect(await follower.offerList(first, now: pki.now) == .success(3))
        let foreign = try await pki.stranger.sign(Self.list(number: 4, issuedAt: pki.now))
        #expect(await follower.offerList(foreign, now: pki.now) == .failure(.signature))
        let older = try await pki.authority.sign(Self.list(number: 2, issuedAt: pki.now))
        #expect(await follower.offerList(older, now: pki.now) == .failure(.notNewer))
        let view = await follower.view(at: pki.now + 10)
        #expect(view.stamp.number == 3 && !view.stale)
        #expect(await follower.view(at: pki.now + 61).stale)
    }

    @Test func theCRLListsEachNonActiveBadgeWithItsReasonAndFollowsItsNumber() async throws {
        let pki = try await BadgePKI.make()
        let anchors = [try pki.authority.parsedCertificate()]
        let entries: [BadgeCRL.Entry] = [
            .init(serialNumber: [0x11], revokedAt: pki.now - 60, reason: .certificateHold),
            .init(serialNumber: [0x22], revokedAt: pki.now - 60, reason: .superseded),
        ]
        let crl = try await pki.authority.crl(
            entries: entries, thisUpdate: pki.now, nextUpdate: pki.now + 600, number: 5)
        #expect(BadgeCRL.number(of: crl) == 5)
        let (parsed, number) = try BadgeCRL.accept(crl, anchors: anchors, current: 4, now: pki.now).get()
        #expect(number == 5 && parsed.revokedSerialNumbers == [[0x11], [0x22]])
        #expect(BadgeCRL.accept(crl, anchors: anchors, current: 5, now: pki.now).map(\.1) == .failure(.notNewer))
        #expect(BadgeCRL.accept(crl, anchors: anchors, current: nil, now: pki.now + 601).map(\.1) == .failure(.expired))
        let foreign = try await pki.stranger.crl(entries: [], thisUpdate: pki.now, nextUpdate: pki.now + 600, number: 9)
        #expect(BadgeCRL.accept(foreign, anchors: anchors, current: nil, now: pki.now).map(\.1) == .failure(.signature))
    }
}

func findBytes(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
    guard haystack.count >= needle.count else { return nil }
    return (0...(haystack.count - needle.count)).first { Array(haystack[$0..<$0 + needle.count]) == needle }
}

/// The decision at a door that follows a list, from a real card through pcscd + vpcd.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FollowedDecisionTests {
    @Test func thePinnedKeyTheDoorRuleAndTheFreezeBoundDecide() async throws {
        let pki = try await BadgePKI.make()
        let door = try await Door()
        defer { door.stop() }
        let (card, issued) = try await pki.card(serial: 3701)
        let certificate = try ParsedCertificate(der: issued.cardAuthCertificate)
        let id = try #require(issued.identifiers.badgeId)
        let (link, pcsc) = try await door.present(card)
        let reading = await BadgeCheck(trust: try pki.trust()).run(transport: pcsc)
        await pcsc.disconnect()
        await door.remove(link)
        #expect(reading.reasons.isEmpty)

        func list(key: String, authKey: String? = nil, state: String = "active", allow: [String] = ["alice"])
            -> DoorList
        {
            DoorList(
                number: 4, issuedAt: pki.now, expiresAt: pki.now + 600,
                badges: [.init(id: id, holder: "alice", keySHA256: key, authKeySHA256: authKey, state: state)],
                doors: ["lobby": .init(readers: [door.reader], allow: allow, grantCommand: ["/bin/open-lobby"])])
        }
        func decide(
            _ list: DoorList, at now: Date, maxAge: Double = 60, slot: UInt8 = PIV.Slot.cardAuthentication
        ) throws -> AccessDecision {
            let view = try RegistryView.make(list, now: now, maxAge: maxAge)
            return AccessDoor.followed(
                reading, view: view, door: view.doors.door(ofReader: door.reader), reader: door.reader,
                slot: slot, apdus: 4, elapsed: .zero)
        }
        let pinned = DoorList.keySHA256(certificate)
        let granted = try decide(list(key: pinned), at: pki.now + 5)
        #expect(granted.decision == .granted && granted.holder == "alice" && granted.door == "lobby")
        #expect(granted.registry == .init(number: 4, age: 5))
        // Another certificate with this card's UUID and FASC-N (another key) is not the pinned badge.
        let other = String(repeating: "0", count: 64)
        #expect(try decide(list(key: other), at: pki.now).reasons == [.badgeKeyMismatch])
        // An `auth` check proves the 9A key: it must be the 9A pin, and a badge without one has no such key.
        let auth = PIV.Slot.authentication
        #expect(try decide(list(key: pinned), at: pki.now, slot: auth).reasons == [.badgeKeyMismatch])
        #expect(try decide(list(key: other, authKey: pinned), at: pki.now, slot: auth).reasons.isEmpty)
        #expect(try decide(list(key: pinned, state: "suspended"), at: pki.now).reasons == [.badgeSuspended])
        #expect(try decide(list(key: pinned, allow: ["bob"]), at: pki.now).reasons == [.doorNotAllowed])
        // Past the freeze bound every badge is denied, with the list's number and age.
        let stale = try decide(list(key: pinned), at: pki.now + 61)
        #expect(stale.decision == .denied && stale.reasons == [.registryStale])
        #expect(stale.registry?.age == 61)
    }
}

enum RegistryView {
    static func make(_ list: DoorList, now: Date, maxAge: Double) throws -> RegistryFollower.View {
        RegistryFollower.View(
            index: DoorListIndex(list), doors: try RegistryFollower.doorTable(list.doors), crl: nil,
            stale: list.isStale(at: now, maxAge: maxAge),
            stamp: .init(number: list.number, age: list.age(at: now)))
    }
}

/// The office's publication from a real credential store, read back by the door's rules and by openssl.
struct BadgePublisherTests {
    @Test func eachLifecycleStateReachesTheListAndTheCRLWithItsReason() async throws {
        let pki = try await BadgePKI.make()
        let store = CredentialStore(
            database: try TesseraDatabase(path: Scratch.directory("publisher") + "/tessera.sqlite"))
        let registry = BadgeRegistry(store: store)
        var ids: [String: [UInt8]] = [:]
        var serials: [String: [UInt8]] = [:]
        for (n, holder) in ["alice", "bob", "carol", "dave"].enumerated() {
            let (_, issued) = try await pki.card(serial: 3710 + UInt32(n), holder: holder)
            _ = try await registry.register(
                identifiers: issued.identifiers, holder: holder, certificate: issued.cardAuthCertificate,
                keys: issued.publicKeys, owner: 0, actor: "uid:0", replace: false)
            let id = try #require(issued.identifiers.idBytes)
            ids[holder] = id
            serials[holder] = try ParsedCertificate(der: issued.cardAuthCertificate).serialNumber
        }
        _ = try await store.transition(ids: [ids["bob"]!], to: .suspended, actor: "uid:0", reason: nil)
        _ = try await store.transition(ids: [ids["carol"]!], to: .deactivated, actor: "uid:0", reason: nil)
        _ = try await store.transition(ids: [ids["dave"]!], to: .replaced, actor: "uid:0", reason: nil)
        // A suspended and then resumed badge leaves the CRL.
        _ = try await store.transition(ids: [ids["alice"]!], to: .suspended, actor: "uid:0", reason: nil)
        _ = try await store.transition(ids: [ids["alice"]!], to: .active, actor: "uid:0", reason: nil)
        let publisher = BadgePublisher(
            registry: registry, signer: pki.authority, certificateAuthority: pki.authority,
            doors: ["lobby": .init(readers: ["Reader 0"], allow: ["alice"])], validity: 600)
        var cache: BadgePublisher.CertificateFacts.Cache = [:]
        let publication = try await publisher.publish(number: 12, now: pki.now, cache: &cache)
        #expect(publication.badges == 4 && publication.revoked == 3)

        let index = try SignedDoorList.accept(
            publication.signedList, publisher: try pki.authority.parsedCertificate(), current: 11, now: pki.now
        ).get()
        #expect(index.list.number == 12 && abs(index.list.expiresAt.timeIntervalSince(pki.now + 600)) < 1)
        let states = ["alice", "bob", "carol", "dave"].map { index.badge(Base64URL.encode(ids[$0]!))?.state }
        #expect(states == ["active", "suspended", "deactivated", "replaced"])
        #expect(BadgeCRL.number(of: publication.crl) == 12)

        // openssl, as any PACS, reads the CRL: each certificate with its reason, alice's not at all.
        let file = Scratch.directory("publisher-crl") + "/badges.crl"
        try Data(publication.crl).write(to: URL(fileURLWithPath: file))
        let text = try await Subprocess.run("openssl", ["crl", "-inform", "DER", "-in", file, "-noout", "-text"])
            .stdoutText
        func entry(_ holder: String) -> String? {
            // openssl prints the INTEGER's value: without the sign byte.
            let serial = Hex.encode(Array(serials[holder]!.drop { $0 == 0 })).uppercased()
            guard let at = text.firstRange(of: "Serial Number: " + serial) else { return nil }
            return String(text[at.upperBound...].prefix(200))
        }
        #expect(entry("bob")?.contains("Certificate Hold") == true, "\(text)")
        #expect(entry("carol")?.contains("Cessation Of Operation") == true, "\(text)")
        #expect(entry("dave")?.contains("Superseded") == true, "\(text)")
        #expect(entry("alice") == nil, "\(text)")
        #expect(text.contains("X509v3 CRL Number") && text.contains("12"))
    }
}
