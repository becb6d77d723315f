import FoundationEssentials

/// A UTC date and time of day to the millisecond (proleptic Gregorian calendar), converted to and from `Date` with
/// integer arithmetic (`GregorianDays`). Foundation's `Calendar`, `DateFormatter` and `ISO8601DateFormatter` are ICU
/// in a static build, and their first use maps megabytes of ICU code and data into the daemon for good (10 MB for
/// an `ISO8601DateFormatter`); every date the daemon writes or reads as text goes through this type instead.
public struct CivilTime: Sendable, Hashable {
    public let year: Int
    public let month: Int
    public let day: Int
    public let hour: Int
    public let minute: Int
    public let second: Int
    public let millisecond: Int

    /// The first and last instants `init(_: Date)` represents: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    static let secondsRange = -62_135_596_800...253_402_300_799
    private static let secondsFrom1970ToReference = 978_307_200.0
    private static let millisecondsFrom1970ToReference = 978_307_200_000

    /// Nil unless every field is in range: year 0–9999, month 1–12, a day of that month, hour 0–23, minute and
    /// second 0–59 (no leap second), millisecond 0–999.
    public init?(
        year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0, millisecond: Int = 0
    ) {
        guard (0...9999).contains(year), (1...12).contains(month),
            (1...GregorianDays.daysIn(month: month, year: year)).contains(day), (0..<24).contains(hour),
            (0..<60).contains(minute), (0..<60).contains(second), (0..<1000).contains(millisecond)
        else { return nil }
        self.year = year; self.month = month; self.day = day
        self.hour = hour; self.minute = minute; self.second = second; self.millisecond = millisecond
    }

    /// The fields of the instant `total` milliseconds after 1970-01-01T00:00:00Z.
    public init(millisecondsSince1970 total: Int) {
        let msPerDay = 86_400_000
        let days = total >= 0 ? total / msPerDay : (total - msPerDay + 1) / msPerDay
        let inDay = total - days * msPerDay
        (year, month, day) = GregorianDays.date(since1970: days)
        hour = inDay / 3_600_000
        minute = inDay / 60_000 % 60
        second = inDay / 1000 % 60
        millisecond = inDay % 1000
    }

    /// The fields of `date` in UTC: its second, and the millisecond nearest to its fraction of that second (at most
    /// 999, so the second never rolls over). Dates before year 1 or after 9999 are clamped to those years' first and
    /// last instants.
    public init(_ date: Date) {
        let t = date.timeIntervalSince1970
        let whole = t.rounded(.down)
        if whole.isNaN || whole < Double(Self.secondsRange.lowerBound) {
            self.init(millisecondsSince1970: Self.secondsRange.lowerBound * 1000)
        } else if whole > Double(Self.secondsRange.upperBound) {
            self.init(millisecondsSince1970: Self.secondsRange.upperBound * 1000 + 999)
        } else {
            self.init(millisecondsSince1970: Int(whole) * 1000 + min(999, Int(((t - whole) * 1000).rounded())))
        }
    }

    /// Whole seconds since 1970-01-01T00:00:00Z, the milliseconds left out.
    public var secondsSince1970: Int {
        GregorianDays.since1970(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
    }

    public var millisecondsSince1970: Int { secondsSince1970 * 1000 + millisecond }

    /// The instant as the `Date` nearest to it: one rounding, of whole milliseconds since the reference date divided
    /// by 1000 (Foundation's `Calendar` can land one unit in the last place beside it).
    public var date: Date {
        Date(
            timeIntervalSinceReferenceDate: Double(millisecondsSince1970 - Self.millisecondsFrom1970ToReference) / 1000)
    }

    /// "YYYY-MM-DDTHH:MM:SSZ", RFC 3339 in UTC; with `milliseconds`, "YYYY-MM-DDTHH:MM:SS.sssZ".
    public func rfc3339(milliseconds: Bool = false) -> String {
        String(
            decoding: text(separator: UInt8(ascii: "T"), milliseconds: milliseconds) + [UInt8(ascii: "Z")],
            as: UTF8.self)
    }

    /// "YYYY-MM-DD", `separator`, "HH:MM:SS" and, with `milliseconds`, ".sss": the fields as text, no zone.
    public func text(separator: UInt8, milliseconds: Bool) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(24)
        Self.appendDigits(year, width: 4, to: &out); out.append(UInt8(ascii: "-"))
        Self.appendDigits(month, width: 2, to: &out); out.append(UInt8(ascii: "-"))
        Self.appendDigits(day, width: 2, to: &out); out.append(separator)
        Self.appendDigits(hour, width: 2, to: &out); out.append(UInt8(ascii: ":"))
        Self.appendDigits(minute, width: 2, to: &out); out.append(UInt8(ascii: ":"))
        Self.appendDigits(second, width: 2, to: &out)
        if milliseconds {
            out.append(UInt8(ascii: "."))
            Self.appendDigits(millisecond, width: 3, to: &out)
        }
        return out
    }

    /// The date and time of day in the first 19 bytes of `b`: "YYYY-MM-DD", one of `separators`, "HH:MM:SS".
    /// Nil unless digits and punctuation are in those places and name a real date and time.
    public static func leading(_ b: [UInt8], separators: [UInt8]) -> CivilTime? {
        guard b.count >= 19, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), separators.contains(b[10]),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"),
            let y = digits(b, 0..<4), let mo = digits(b, 5..<7), let d = digits(b, 8..<10), let h = digits(b, 11..<13),
            let mi = digits(b, 14..<16), let s = digits(b, 17..<19)
        else { return nil }
        return CivilTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s)
    }

    /// The instant of an RFC 3339 date-time (section 5.6): "YYYY-MM-DDTHH:MM:SS", an optional fraction of a second,
    /// then "Z" or an offset "±HH:MM"; "T" and "Z" in either case. Nil for anything else, for a date or time that does
    /// not exist, and for a leap second (":60").
    public static func instant(rfc3339 text: String) -> Date? {
        let b = Array(text.utf8)
        func at(_ i: Int, _ c: Character) -> Bool { i < b.count && b[i] == c.asciiValue! }
        guard let civil = leading(b, separators: [UInt8(ascii: "T"), UInt8(ascii: "t")]) else { return nil }
        var i = 19
        var fraction = 0.0
        if at(i, ".") {
            i += 1
            var scale = 0.1
            let start = i
            while i < b.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b[i]) {
                fraction += Double(b[i] - UInt8(ascii: "0")) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        var offset = 0
        if at(i, "Z") || at(i, "z") {
            i += 1
        } else if at(i, "+") || at(i, "-") {
            guard b.count >= i + 6, at(i + 3, ":"), let oh = digits(b, (i + 1)..<(i + 3)),
                let om = digits(b, (i + 4)..<(i + 6)), oh < 24, om < 60
            else { return nil }
            offset = (oh * 3600 + om * 60) * (at(i, "-") ? -1 : 1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let seconds = civil.secondsSince1970 - offset
        return Date(timeIntervalSinceReferenceDate: Double(seconds) - secondsFrom1970ToReference + fraction)
    }

    /// Appends `value` (0 ≤ value < 10^width) as `width` decimal digits, zero-padded.
    public static func appendDigits(_ value: Int, width: Int, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width))
        var n = value
        for i in stride(from: start + width - 1, through: start, by: -1) {
            out[i] = UInt8(ascii: "0") + UInt8(n % 10)
            n /= 10
        }
    }

    /// The decimal number in `bytes[range]`; nil unless the range is inside `bytes` and holds only ASCII digits.
    public static func digits(_ bytes: [UInt8], _ range: Range<Int>) -> Int? {
        guard range.upperBound <= bytes.count else { return nil }
        var n = 0
        for i in range {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) else { return nil }
            n = n * 10 + Int(bytes[i] - UInt8(ascii: "0"))
        }
        return n
    }
}

extension Date {
    /// UTC, whole seconds: "2026-11-22T03:25:42Z" — the form of every timestamp the socket API returns.
    public var iso8601Seconds: String { CivilTime(self).rfc3339() }

    /// The instant of an RFC 3339 date-time (`CivilTime.instant(rfc3339:)`); nil for any other text.
    public init?(rfc3339 text: String) {
        guard let date = CivilTime.instant(rfc3339: text) else { return nil }
        self = date
    }
}
