import Foundation
import GRDB
import TesseraCore

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

    /// GRDB's text for `date`; nil before 1583 (DateFormatter's calendar is Julian before October 1582) and after
    /// 9999.
    static func text(_ date: Date) -> String? {
        // Milliseconds since 1970, rounded half up as DateFormatter writes them.
        let ms = ((date.timeIntervalSinceReferenceDate + secondsFrom1970ToReference) * 1000 + 0.5).rounded(.down)
        guard ms.isFinite, abs(ms) < 4e14 else { return nil }
        let c = CivilTime(millisecondsSince1970: Int(ms))
        guard (1583...9999).contains(c.year) else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(23)
        for (value, width, separator) in [
            (c.year, 4, "-"), (c.month, 2, "-"), (c.day, 2, " "), (c.hour, 2, ":"), (c.minute, 2, ":"),
            (c.second, 2, "."), (c.millisecond, 3, ""),
        ] {
            CivilTime.appendDigits(value, width: width, to: &out)
            out += Array(separator.utf8)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The instant of a "yyyy-MM-dd HH:mm:ss.SSS" text from 1583 on; nil for any other form.
    static func date(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 23, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: " "),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), b[19] == UInt8(ascii: ".")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? { CivilTime.digits(b, range) }
        guard let y = number(0..<4), y >= 1583, let m = number(5..<7), let d = number(8..<10),
            let h = number(11..<13), let mi = number(14..<16), let s = number(17..<19), let ms = number(20..<23),
            let c = CivilTime(year: y, month: m, day: d, hour: h, minute: mi, second: s, millisecond: ms)
        else { return nil }
        return c.date
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
