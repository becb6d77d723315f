import Ownership
import Testing

@Suite struct RequesterTests {
    @Test func ownersAndAdministratorsOnly() {
        let alice = Requester(uid: 1000, isAdmin: false)
        #expect(alice.owns(1000))
        #expect(!alice.owns(1001))
        #expect(!alice.owns(nil))
        let admin = Requester(uid: 0, isAdmin: true)
        #expect(admin.owns(1000) && admin.owns(nil))
        #expect(Requester.daemon.isAdmin && Requester.daemon.uid == Requester.daemonUID)
    }
}
