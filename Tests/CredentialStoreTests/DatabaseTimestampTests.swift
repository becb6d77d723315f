import FoundationEssentials
import TesseraTestSupport
import Testing

@testable import CredentialStore

/// `DatabaseTimestamp` must write and read exactly what GRDB's own `Date` coding did (Foundation's DateFormatter and
/// Calendar), so that rows written before and after compare the same in SQL. GRDB's coding is the oracle, as it
/// recorded it in `Fixtures/grdb-timestamps.tsv` (Fixtures/README.md) before it left.
@Suite struct DatabaseTimestampTests {
    /// One line of the oracle: the instant or number given to GRDB, the text it wrote, the `Date` it read back.
    struct Line {
        var kind: Substring
        var input: Double?
        var text: String
        var read: Date?
    }

    static let oracle: [Line] = {
        let path = String(#filePath.prefix(upTo: #filePath.lastIndex(of: "/")!)) + "/Fixtures/grdb-timestamps.tsv"
        let data = FileManager.default.contents(atPath: path) ?? Data()
        func double(_ field: Substring) -> Double? { UInt64(field, radix: 16).map { Double(bitPattern: $0) } }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map { line in
            let f = line.split(separator: "\t", omittingEmptySubsequences: false)
            return Line(
                kind: f[0], input: f[0] == "integer" ? Double(f[1]) : double(f[1]), text: String(f[2]),
                read: double(f[3]).map { Date(timeIntervalSinceReferenceDate: $0) })
        }
    }()

    static var instants: [Line] { oracle.filter { $0.kind == "instant" } }

    /// From 1583 to 9999 GRDB's text is ours; before (DateFormatter's calendar is Julian until October 1582) ours is
    /// the proleptic Gregorian date.
    static func gregorian(_ t: Double) -> Bool { t >= -12_212_553_600 && t < 253_402_300_800 }

    @Test func theOracleIsThere() {
        #expect(Self.instants.count == 2514)
        #expect(Self.instants.filter { Self.gregorian($0.input!) }.count == 2513)
    }

    @Test func writesGRDBsText() {
        for line in Self.instants {
            let t = line.input!
            let ours = DatabaseTimestamp.text(Date(timeIntervalSince1970: t))
            if Self.gregorian(t) {
                #expect(ours == line.text, "\(t)")
            } else {
                #expect(ours == "0001-01-01 00:00:00.000" && line.text != ours, "\(t)")
            }
        }
    }

    /// Text GRDB wrote reads to the `Date` nearest to its instant (the decimal number of seconds since the
    /// reference date, as `strtod` rounds it), which is GRDB's own reading or one unit in the last place beside it:
    /// Foundation's `Calendar` reads "2000-12-31 08:59:18.967" to -54041.032999999996, one below the nearest
    /// -54041.033. Both read back to the same text.
    @Test func readsTheNearestDateToWhatGRDBWrote() throws {
        for line in Self.instants where Self.gregorian(line.input!) {
            let ours = try #require(DatabaseTimestamp.date(line.text), "\(line.text)")
            let grdb = try #require(line.read)
            #expect(ours == Self.nearest(grdb), "\(line.text)")
            let a = ours.timeIntervalSinceReferenceDate, b = grdb.timeIntervalSinceReferenceDate
            #expect(a == b || a.nextUp == b || a.nextDown == b, "\(line.text)")
            #expect(DatabaseTimestamp.text(ours) == line.text, "\(line.text)")
        }
    }

    /// The one GRDB/Foundation disagreement seen in CI (a fresh clone's `make test`).
    @Test func readsTheCIFailureToTheNearestDate() throws {
        let text = "2000-12-31 08:59:18.967"
        let date = try #require(DatabaseTimestamp.date(text))
        #expect(date.timeIntervalSinceReferenceDate == -54041.033)
        #expect(DatabaseTimestamp.text(date) == text)
    }

    /// The `Date` nearest to the whole number of milliseconds GRDB's reading `date` is within a unit in the last place
    /// of, as Swift's decimal parser (strtod) rounds "seconds.mmm": an oracle that shares no arithmetic with
    /// `CivilTime`.
    static func nearest(_ date: Date) -> Date? {
        let total = Int((date.timeIntervalSinceReferenceDate * 1000).rounded())
        let magnitude = abs(total)
        let ms = String(magnitude % 1000)
        let decimal =
            "\(total < 0 ? "-" : "")\(magnitude / 1000).\(String(repeating: "0", count: 3 - ms.count))\(ms)"
        return Double(decimal).map { Date(timeIntervalSinceReferenceDate: $0) }
    }

    /// The other forms SQLite's date functions write read as GRDB read them; what is no date reads as none (GRDB
    /// read "2026-02-29" as March 1st).
    @Test func otherFormsReadAsGRDBReadThem() {
        let others = Self.oracle.filter { $0.kind == "text" }
        #expect(others.count == 9)
        for line in others {
            if line.text == "2026-02-29 00:00:00.000" {
                #expect(DatabaseTimestamp.date(line.text) == nil && line.read != nil)
            } else {
                #expect(DatabaseTimestamp.date(line.text) == line.read, "\(line.text)")
            }
        }
        for text in ["2026-13-01 00:00:00.000", "2026-11-27 24:00:00.000", "2026-11-27 10:11:12.", "2026-11-27 1"] {
            #expect(DatabaseTimestamp.date(text) == nil, "\(text)")
        }
    }

    /// A number in a date column is seconds since 1970, as GRDB read it.
    @Test func numbersReadAsGRDBReadThem() async throws {
        let db = try TesseraDatabase(path: Scratch.directory("timestamps") + "/tessera.sqlite")
        let numbers = Self.oracle.filter { $0.kind == "number" || $0.kind == "integer" }
        #expect(numbers.count == 4)
        for line in numbers {
            let value = line.input!
            let argument: any SQLArgument = line.kind == "integer" ? Int64(value) : value
            nonisolated(unsafe) let arguments = [argument]
            let read = try await db.read { c in try c.value("SELECT ?", arguments, as: Date.self) }
            #expect(read == line.read, "\(value)")
        }
    }
}
