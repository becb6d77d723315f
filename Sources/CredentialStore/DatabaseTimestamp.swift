import Foundation
import GRDB

/// A `Date` as GRDB stores it: the text "yyyy-MM-dd HH:mm:ss.SSS" in UTC (milliseconds rounded), written and read
/// without Foundation's `DateFormatter` and `Calendar`. GRDB's own `Date` coding goes through those, and their first
/// use brings in ICU (4.5 MB of tesserad's resident memory from its first write on). The text is the same as GRDB's
/// to the byte, so rows written either way read the same and compare the same in SQL; anything else in a date column
/// (dates before 1583, other text forms, numbers) is written and read by GRDB's coding as before. Records with dates
/// adopt `TimestampColumns`; a date bound into SQL is wrapped in this type (a bare `Date` writes the same text, through
/// ICU).
struct DatabaseTimestamp: DatabaseValueConvertible {
    let date: Date

    init(_ date: Date) { self.date = date }

    var databaseValue: DatabaseValue {
        Self.text(date).map { $0.databaseValue } ?? date.databaseValue
    }

    static func fromDatabaseValue(_ dbValue: DatabaseValue) -> DatabaseTimestamp? {
        if case .string(let s) = dbValue.storage, let date = date(s) { return DatabaseTimestamp(date) }
        return Date.fromDatabaseValue(dbValue).map(DatabaseTimestamp.init)
    }

    /// The column strategies of the records that hold dates.
    static let encoding = DatabaseDateEncodingStrategy.custom { DatabaseTimestamp($0) }
    static let decoding = DatabaseDateDecodingStrategy.custom { DatabaseTimestamp.fromDatabaseValue($0)?.date }

    private static let secondsFrom1970ToReference = 978_307_200.0
    private static let msPerDay: Int64 = 86_400_000

    /// GRDB's text for `date`; nil before 1583 (DateFormatter's calendar is Julian before October 1582) and after
    /// 9999.
    static func text(_ date: Date) -> String? {
        // Milliseconds since 1970, rounded half up as DateFormatter writes them.
        let ms = ((date.timeIntervalSinceReferenceDate + secondsFrom1970ToReference) * 1000 + 0.5).rounded(.down)
        guard ms.isFinite, abs(ms) < 4e14 else { return nil }
        let total = Int64(ms)
        let days = total >= 0 ? total / msPerDay : (total - msPerDay + 1) / msPerDay
        let inDay = total - days * msPerDay
        let (y, m, d) = civil(daysSince1970: days)
        guard (1583...9999).contains(y) else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(23)
        func put(_ v: Int64, _ width: Int) {
            var digits = [UInt8](repeating: UInt8(ascii: "0"), count: width)
            var n = v
            for i in stride(from: width - 1, through: 0, by: -1) {
                digits[i] = UInt8(ascii: "0") + UInt8(n % 10)
                n /= 10
            }
            out += digits
        }
        put(y, 4); out.append(UInt8(ascii: "-")); put(m, 2); out.append(UInt8(ascii: "-")); put(d, 2)
        out.append(UInt8(ascii: " "))
        put(inDay / 3_600_000, 2); out.append(UInt8(ascii: ":")); put(inDay / 60_000 % 60, 2)
        out.append(UInt8(ascii: ":")); put(inDay / 1000 % 60, 2); out.append(UInt8(ascii: "."))
        put(inDay % 1000, 3)
        return String(decoding: out, as: UTF8.self)
    }

    /// The instant of a "yyyy-MM-dd HH:mm:ss.SSS" text from 1583 on; nil for any other form.
    static func date(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 23, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: " "),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), b[19] == UInt8(ascii: ".")
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var n: Int64 = 0
            for i in range {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b[i]) else { return nil }
                n = n * 10 + Int64(b[i] - UInt8(ascii: "0"))
            }
            return n
        }
        guard let y = number(0..<4), let m = number(5..<7), let d = number(8..<10), let h = number(11..<13),
            let mi = number(14..<16), let s = number(17..<19), let ms = number(20..<23),
            y >= 1583, (1...12).contains(m), (1...daysIn(month: m, year: y)).contains(d), h < 24, mi < 60, s < 60
        else { return nil }
        let seconds = days(year: y, month: m, day: d) * 86_400 + h * 3600 + mi * 60 + s
        return Date(
            timeIntervalSinceReferenceDate: Double(seconds) - secondsFrom1970ToReference + Double(ms) / 1000)
    }

    private static func daysIn(month m: Int64, year y: Int64) -> Int64 {
        switch m {
        case 2: (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    private static func days(year: Int64, month m: Int64, day d: Int64) -> Int64 {
        let y = m <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's civil_from_days).
    private static func civil(daysSince1970 z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

/// A record whose `Date` columns are coded as `DatabaseTimestamp` (GRDB's text, without ICU).
public protocol TimestampColumns: EncodableRecord, FetchableRecord {}

extension TimestampColumns {
    public static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy {
        DatabaseTimestamp.encoding
    }
    public static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        DatabaseTimestamp.decoding
    }
}
