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

    /// GRDB's text for `date`; nil before 1583 (DateFormatter's calendar is Julian before October 1582) and after
    /// 9999.
    static func text(_ date: Date) -> String? {
        // Milliseconds since 1970, rounded half up as DateFormatter writes them.
        let ms = (date.timeIntervalSince1970 * 1000 + 0.5).rounded(.down)
        guard ms.isFinite, abs(ms) < 4e14 else { return nil }
        let c = CivilTime(millisecondsSince1970: Int(ms))
        guard (1583...9999).contains(c.year) else { return nil }
        return String(decoding: c.text(separator: UInt8(ascii: " "), milliseconds: true), as: UTF8.self)
    }

    /// The instant of a "yyyy-MM-dd HH:mm:ss.SSS" text from 1583 on; nil for any other form.
    static func date(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 23, b[19] == UInt8(ascii: "."), let c = CivilTime.leading(b, separators: [UInt8(ascii: " ")]),
            c.year >= 1583, let ms = CivilTime.digits(b, 20..<23)
        else { return nil }
        return CivilTime(millisecondsSince1970: c.millisecondsSince1970 + ms).date
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
