import TesseraRuntime
import Testing

@Suite struct FailpointTests {
    @Test func parsesKillAndPauseEntries() {
        #expect(Failpoint.parse("a.b") == ["a.b": .kill])
        #expect(
            Failpoint.parse("a,b=pause:/tmp/x y,c=pause:") == [
                "a": .kill, "b": .pause(directory: "/tmp/x y"),
            ])
        #expect(Failpoint.parse("d=explode,,e=pause:/p=q") == ["e": .pause(directory: "/p=q")])
        #expect(Failpoint.parse("").isEmpty)
    }

    /// Not armed in the test process: both return at once.
    @Test func unarmedPointsDoNothing() async {
        Failpoint.hit("never.armed")
        await Failpoint.reach("never.armed")
    }
}
