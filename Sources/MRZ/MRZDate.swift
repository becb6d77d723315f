import FoundationEssentials
import TesseraCore

/// A calendar date (proleptic Gregorian), as resolved from an MRZ `YYMMDD` field.
public struct MRZDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let year: Int
    public let month: Int
    public let day: Int

    /// Nil unless month is 1–12 and day exists in that month of that year.
    public init?(year: Int, month: Int, day: Int) {
        guard (1...12).contains(month), day >= 1, day <= GregorianDays.daysIn(month: month, year: year) else {
            return nil
        }
        self.year = year; self.month = month; self.day = day
    }

    /// Today's date in UTC.
    public static func today() -> MRZDate {
        let now = CivilTime(Date())
        return MRZDate(unchecked: now.year, now.month, now.day)
    }

    /// ISO 8601 `YYYY-MM-DD`.
    public var description: String {
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    public static func < (a: MRZDate, b: MRZDate) -> Bool {
        (a.year, a.month, a.day) < (b.year, b.month, b.day)
    }

    init(unchecked year: Int, _ month: Int, _ day: Int) { self.year = year; self.month = month; self.day = day }

    /// Splits "YYMMDD" into numbers when all six characters are ASCII digits.
    static func components(_ yymmdd: String) -> (yy: Int, mm: Int, dd: Int)? {
        let b = Array(yymmdd.utf8)
        guard b.count == 6, b.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        let v = b.map { Int($0 - 0x30) }
        return (v[0] * 10 + v[1], v[2] * 10 + v[3], v[4] * 10 + v[5])
    }

    /// Whether "YYMMDD" is six digits with month 01–12 and a day that exists in that month.
    /// 29 February is accepted only when YY is divisible by 4 (leap in both candidate centuries,
    /// or at least in 2000 for "00").
    static func isValidYYMMDD(_ yymmdd: String) -> Bool {
        guard let (yy, mm, dd) = components(yymmdd) else { return false }
        return MRZDate(year: yy % 4 == 0 ? 2000 + yy : 2001, month: mm, day: dd) != nil
    }
}

extension MRZ {
    /// Resolves a date-of-birth `YYMMDD` to a full date: 20YY when that is not after
    /// `reference`, otherwise 19YY (a birth date is never in the future). Nil when the field is
    /// not a real date (e.g. unknown parts printed as '<').
    public static func birthDate(_ yymmdd: String, relativeTo reference: MRZDate) -> MRZDate? {
        guard let (yy, mm, dd) = MRZDate.components(yymmdd) else { return nil }
        if let d = MRZDate(year: 2000 + yy, month: mm, day: dd), d <= reference { return d }
        return MRZDate(year: 1900 + yy, month: mm, day: dd)
    }

    /// Resolves a date-of-expiry `YYMMDD` to a full date: 20YY unless that is more than 50 years
    /// after `reference`, in which case 19YY (a long-expired document). Nil when not a real date.
    public static func expiryDate(_ yymmdd: String, relativeTo reference: MRZDate) -> MRZDate? {
        guard let (yy, mm, dd) = MRZDate.components(yymmdd) else { return nil }
        let limit = MRZDate(unchecked: reference.year + 50, reference.month, reference.day)
        if let d = MRZDate(year: 2000 + yy, month: mm, day: dd) {
            return d > limit ? MRZDate(year: 1900 + yy, month: mm, day: dd) : d
        }
        return MRZDate(year: 1900 + yy, month: mm, day: dd)
    }

    /// The holder's full date of birth (see `MRZ.birthDate(_:relativeTo:)` for the century rule).
    public func birthDate(relativeTo reference: MRZDate = .today()) -> MRZDate? {
        MRZ.birthDate(dateOfBirth, relativeTo: reference)
    }

    /// The full date of expiry (see `MRZ.expiryDate(_:relativeTo:)` for the century rule).
    public func expiryDate(relativeTo reference: MRZDate = .today()) -> MRZDate? {
        MRZ.expiryDate(dateOfExpiry, relativeTo: reference)
    }
}
