import FoundationEssentials
import TesseraCore

/// A `Date` as the store keeps it: the text "yyyy-MM-dd HH:mm:ss.SSS" in UTC (milliseconds rounded half up), as
/// GRDB wrote dates before (byte for byte from 1583 on: `Fixtures/grdb-timestamps.tsv`), so rows written by either
/// read the same and compare the same in SQL. Written and read with `CivilTime`'s integer arithmetic, never ICU.
enum DatabaseTimestamp {
    /// The text of `date`, in the proleptic Gregorian calendar; dates before year 1 or after 9999 are clamped to the
    /// first and last millisecond of those years.
    static func text(_ date: Date) -> String {
        // Milliseconds since 1970, rounded half up as GRDB's DateFormatter wrote them.
        let ms = (date.timeIntervalSince1970 * 1000 + 0.5).rounded(.down)
        let first = -62_135_596_800_000.0, last = 253_402_300_799_999.0
        let clamped = ms.isNaN ? first : min(max(ms, first), last)
        let c = CivilTime(millisecondsSince1970: Int(clamped))
        return String(decoding: c.text(separator: UInt8(ascii: " "), milliseconds: true), as: UTF8.self)
    }

    /// The instant of a date column's text: "yyyy-MM-dd HH:mm:ss.SSS" as written, or one of the other forms SQLite's
    /// date functions and GRDB read ("yyyy-MM-dd", then " " or "T" and "HH:mm", ":ss", a fraction of a second of
    /// which milliseconds count, a final "Z"). Nil for anything else and for a date or time that does not exist.
    static func date(_ text: String) -> Date? { date(utf8: Array(text.utf8)) }

    /// `date(_:)` of the text's UTF-8 bytes.
    static func date(utf8 b: [UInt8]) -> Date? {
        if b.count == 23, b[19] == UInt8(ascii: "."), let c = CivilTime.leading(b, separators: [UInt8(ascii: " ")]),
            let ms = CivilTime.digits(b, 20..<23)
        {
            return CivilTime(millisecondsSince1970: c.millisecondsSince1970 + ms).date
        }
        return otherForm(b)
    }

    private static func otherForm(_ b: [UInt8]) -> Date? {
        var b = b
        if b.last == UInt8(ascii: "Z") { b.removeLast() }
        guard b.count >= 10, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"),
            let year = CivilTime.digits(b, 0..<4), let month = CivilTime.digits(b, 5..<7),
            let day = CivilTime.digits(b, 8..<10)
        else { return nil }
        var hour = 0, minute = 0, second = 0, ms = 0
        if b.count > 10 {
            guard b.count >= 16, b[10] == UInt8(ascii: " ") || b[10] == UInt8(ascii: "T"), b[13] == UInt8(ascii: ":"),
                let h = CivilTime.digits(b, 11..<13), let m = CivilTime.digits(b, 14..<16)
            else { return nil }
            (hour, minute) = (h, m)
            if b.count > 16 {
                guard b.count >= 19, b[16] == UInt8(ascii: ":"), let s = CivilTime.digits(b, 17..<19) else {
                    return nil
                }
                second = s
                if b.count > 19 {
                    guard b[19] == UInt8(ascii: "."), b.count > 20, CivilTime.digits(b, 20..<b.count) != nil else {
                        return nil
                    }
                    for i in 20..<23 { ms = ms * 10 + (i < b.count ? Int(b[i] - UInt8(ascii: "0")) : 0) }
                }
            }
        }
        guard let c = CivilTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        else { return nil }
        return CivilTime(millisecondsSince1970: c.millisecondsSince1970 + ms).date
    }
}
