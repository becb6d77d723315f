import FoundationEssentials
import TesseraTestSupport
import Testing

@testable import TesseraCore

/// `CivilTime` against FoundationEssentials' Gregorian `Calendar` and `Date.ISO8601FormatStyle` (the oracles here;
/// the daemon does not use them) and RFC 3339's own examples.
@Suite struct TimestampsTests {
    static let utc: Calendar = {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = .gmt
        return c
    }()

    /// Fixed edge instants and random ones from 1600 to 9999, whole milliseconds.
    static let instants: [Int] = {
        var ms: [Int] = [
            0, -1, 1, 999, -999, -1000, 86_399_999, 86_400_000, -86_400_000, 951_782_400_000,  // 2000-02-29
            -2_208_988_800_000,  // 1900-01-01
            253_402_300_799_999,  // 9999-12-31T23:59:59.999
            1_796_000_000_123,
        ]
        var rng = SeededRandom(stream: "TimestampsTests.instants")
        for _ in 0..<3000 { ms.append(Int.random(in: -11_676_096_000_000...253_402_300_799_999, using: &rng)) }
        return ms
    }()

    @Test func fieldsMatchTheGregorianCalendar() {
        for ms in Self.instants {
            let c = CivilTime(millisecondsSince1970: ms)
            let date = Date(timeIntervalSince1970: Double(ms) / 1000)
            let f = Self.utc.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            #expect(
                [c.year, c.month, c.day, c.hour, c.minute, c.second]
                    == [f.year, f.month, f.day, f.hour, f.minute, f.second], "\(ms) \(SeededRandom.reproduce)")
            #expect(c.millisecond == ((ms % 1000) + 1000) % 1000)
            #expect(c.millisecondsSince1970 == ms)
            #expect(CivilTime(c.date) == c, "\(ms) \(SeededRandom.reproduce)")
        }
    }

    @Test func formatMatchesISO8601FormatStyle() {
        let formatter = Date.ISO8601FormatStyle()
        for ms in Self.instants {
            // Whole seconds: the formatter's own output for a date with a fraction depends on its rounding.
            let date = Date(timeIntervalSince1970: Double(ms.quotientAndRemainder(dividingBy: 1000).quotient))
            #expect(date.iso8601Seconds == formatter.format(date), "\(ms) \(SeededRandom.reproduce)")
        }
        // A fraction of a second is dropped, never rounded up.
        #expect(Date(timeIntervalSince1970: 59.9999).iso8601Seconds == "1970-01-01T00:00:59Z")
        #expect(Date(timeIntervalSince1970: -0.25).iso8601Seconds == "1969-12-31T23:59:59Z")
        #expect(CivilTime(Date(timeIntervalSince1970: 1.5)).rfc3339(milliseconds: true) == "1970-01-01T00:00:01.500Z")
    }

    @Test func parseMatchesISO8601FormatStyle() {
        let formatter = Date.ISO8601FormatStyle()
        let offsets = ["Z", "+00:00", "+05:30", "-08:00", "+23:59", "-23:59"]
        var rng = SeededRandom(stream: "TimestampsTests.parse")
        for ms in Self.instants.prefix(500) {
            let local = String(Date(timeIntervalSince1970: Double(ms / 1000)).iso8601Seconds.dropLast())
            let offset = offsets[Int.random(in: 0..<offsets.count, using: &rng)]
            let text = local + offset
            // The format style takes offsets up to ±18:00 (as TimeZone does); RFC 3339 allows ±23:59: those are
            // checked against the same local time read as UTC, moved by the offset.
            let expected =
                offset.hasSuffix("23:59")
                ? (try? formatter.parse(local + "Z"))?.addingTimeInterval(offset.hasPrefix("+") ? -86_340 : 86_340)
                : try? formatter.parse(text)
            #expect(expected != nil, "\(text)")
            #expect(Date(rfc3339: text) == expected, "\(text) \(SeededRandom.reproduce)")
        }
    }

    /// RFC 3339 section 5.8 (the leap second example is refused: no leap seconds here).
    @Test func rfc3339Examples() {
        let first = Date(rfc3339: "1985-04-12T23:20:50.52Z")?.timeIntervalSince1970 ?? 0
        #expect(abs(first - 482_196_050.52) < 1e-6)
        #expect(Date(rfc3339: "1996-12-19T16:39:57-08:00")?.timeIntervalSince1970 == 851_042_397)
        let early = Date(rfc3339: "1937-01-01T12:00:27.87+00:20")?.timeIntervalSince1970 ?? 0
        #expect(abs(early - -1_041_337_172.13) < 1e-6)  // 11:40:27.87 UTC
        #expect(Date(rfc3339: "1990-12-31T23:59:60Z") == nil)
        #expect(Date(rfc3339: "1996-12-19t16:39:57z")?.timeIntervalSince1970 == 851_013_597)
    }

    @Test func malformedTextIsRefused() {
        for text in [
            "", "2026-11-27", "2026-11-27T12:00:00", "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z",
            "2026-11-31T00:00:00Z", "2026-11-27T24:00:00Z", "2026-11-27T12:60:00Z", "2026-11-27 12:00:00Z",
            "2026-11-27T12:00:00.Z", "2026-11-27T12:00:00+24:00", "2026-11-27T12:00:00+0100", "2026-11-27T12:00:00ZZ",
            "+2026-11-27T12:00:00Z", "2026-1-27T12:00:00Z", "２０２６-11-27T12:00:00Z",
        ] {
            #expect(Date(rfc3339: text) == nil, "\(text)")
        }
        #expect(CivilTime(year: 2024, month: 2, day: 29) != nil)
        #expect(CivilTime(year: 2023, month: 2, day: 29) == nil)
        #expect(CivilTime(year: 2023, month: 1, day: 1, hour: 23, minute: 59, second: 60) == nil)
        #expect(CivilTime(year: 10_000, month: 1, day: 1) == nil)
    }

    /// Dates beyond the years 1–9999 are clamped, never trapped on.
    @Test func outOfRangeDatesAreClamped() {
        #expect(Date.distantFuture.iso8601Seconds == "4001-01-01T00:00:00Z")
        #expect(Date(timeIntervalSince1970: 1e15).iso8601Seconds == "9999-12-31T23:59:59Z")
        #expect(Date(timeIntervalSince1970: -1e15).iso8601Seconds == "0001-01-01T00:00:00Z")
        #expect(Date(timeIntervalSince1970: .infinity).iso8601Seconds == "9999-12-31T23:59:59Z")
        #expect(Date(timeIntervalSince1970: .nan).iso8601Seconds == "0001-01-01T00:00:00Z")
    }
}
