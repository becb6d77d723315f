import AccessControl
import TesseraCore
import Testing

/// The reader → door map and a door's allow list (docs/ACCESS.md, "Doors").
struct DoorTableTests {
    @Test func aReaderBelongsToAtMostOneDoor() throws {
        let a = DoorRule(name: "a", readers: ["R1"], allow: ["x"])
        let b = DoorRule(name: "b", readers: ["R2", "R1"], allow: ["y"])
        let error = #expect(throws: TesseraError.self) { try DoorTable([a, b]) }
        #expect(error?.message == "reader 'R1' is named by doors 'a' and 'b': a reader belongs to at most one door")
        #expect(throws: TesseraError.self) { try DoorTable([DoorRule(name: "c", readers: [], allow: [])]) }
        #expect(throws: TesseraError.self) { try DoorTable([DoorRule(name: "c", readers: ["R", "R"], allow: [])]) }
    }

    @Test func eachReaderAnswersWithItsOwnDoor() throws {
        let table = try DoorTable([
            DoorRule(name: "server-room", readers: ["R1"], allow: ["bob"], mode: .auth, grantCommand: ["relay", "1"]),
            DoorRule(name: "lobby", readers: ["R2", "R3"], allow: ["*"]),
        ])
        #expect(table.door(ofReader: "R1")?.name == "server-room")
        #expect(table.door(ofReader: "R3")?.name == "lobby")
        #expect(table.door(ofReader: "desk") == nil)
        #expect(table.readers == ["R1", "R2", "R3"])
        #expect(DoorTable().isEmpty && DoorTable().door(ofReader: "R1") == nil)
    }

    @Test func allowAdmitsListedHoldersAndBadgesOnly() {
        let door = DoorRule(name: "vault", readers: ["R"], allow: ["bob", "NAkBAgM"])
        #expect(door.admits(holder: "bob", badgeId: "x"))
        #expect(door.admits(holder: "alice", badgeId: "NAkBAgM"))
        #expect(!door.admits(holder: "alice", badgeId: "x"))
        #expect(!door.admits(holder: nil, badgeId: nil))
        let everyone = DoorRule(name: "lobby", readers: ["R"], allow: ["*"])
        #expect(everyone.admits(holder: "alice", badgeId: "x"))
        #expect(!everyone.admits(holder: nil, badgeId: "x"))  // "*" is every registered badge
        #expect(!DoorRule(name: "closed", readers: ["R"], allow: []).admits(holder: "bob", badgeId: "x"))
    }
}
