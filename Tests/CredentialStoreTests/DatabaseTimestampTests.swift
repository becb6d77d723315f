import Foundation
import GRDB
import TesseraTestSupport
import Testing

@testable import CredentialStore

/// `DatabaseTimestamp` must write and read exactly what GRDB's own `Date` coding does (Foundation's DateFormatter
/// and Calendar), so that rows written before and after compare the same in SQL; GRDB's coding is the oracle here.
@Suite struct DatabaseTimestampTests {
    static let instants: [Double] = {
        var out: [Double] = [
            0, -0.0005, -1, -86_400, 951_782_400, 951_868_799.9999, 1_700_000_000, 1_700_000_000.0005,
            1_700_000_000.9995, 1_700_000_000.123_456_789, 1_234_567_890.001, 4_102_444_799.999, 253_402_300_799.999,
            -62_135_596_800,
        ]
        var g = SeededRandom(stream: "DatabaseTimestampTests")
        for _ in 0..<2000 { out.append(Double.random(in: -2_000_000_000...5_000_000_000, using: &g)) }
        for _ in 0..<500 {
            out.append(
                Double(Int.random(in: 0...4_000_000_000, using: &g)) + 0.001
                    * Double.random(in: 0...999, using: &g).rounded())
        }
        return out
    }()

    /// From 1583 to 9999 the text is ours; before (DateFormatter's calendar is Julian until October 1582) GRDB's.
    static func ours(_ t: Double) -> Bool { t >= -12_212_553_600 && t < 253_402_300_800 }

    @Test func writesGRDBsText() {
        for t in Self.instants {
            let date = Date(timeIntervalSince1970: t)
            #expect(DatabaseTimestamp(date).databaseValue == date.databaseValue, "\(t) \(SeededRandom.reproduce)")
            #expect((DatabaseTimestamp.text(date) != nil) == Self.ours(t), "\(t) \(SeededRandom.reproduce)")
        }
    }

    /// Text GRDB wrote reads to the `Date` nearest to its instant (the decimal number of seconds since the
    /// reference date, as `strtod` rounds it), which is GRDB's own reading or one unit in the last place beside it:
    /// Foundation's `Calendar` reads "2000-12-31 08:59:18.967" to -54041.032999999996, one below the nearest
    /// -54041.033. Both read back to the same text.
    @Test func readsTheNearestDateToWhatGRDBWrote() throws {
        for t in Self.instants {
            let stored = Date(timeIntervalSince1970: t).databaseValue
            let text = try #require(String.fromDatabaseValue(stored))
            #expect((DatabaseTimestamp.date(text) != nil) == Self.ours(t), "\(text) \(SeededRandom.reproduce)")
            guard Self.ours(t), let ours = DatabaseTimestamp.fromDatabaseValue(stored)?.date,
                let grdb = Date.fromDatabaseValue(stored)
            else { continue }
            #expect(ours == Self.nearest(text), "\(text) \(SeededRandom.reproduce)")
            let a = ours.timeIntervalSinceReferenceDate, b = grdb.timeIntervalSinceReferenceDate
            #expect(a == b || a.nextUp == b || a.nextDown == b, "\(text) \(SeededRandom.reproduce)")
            #expect(DatabaseTimestamp(ours).databaseValue == stored, "\(text) \(SeededRandom.reproduce)")
        }
    }

    /// The one GRDB/Foundation disagreement seen in CI (a fresh clone's `make test`).
    @Test func readsTheCIFailureToTheNearestDate() throws {
        let text = "2000-12-31 08:59:18.967"
        let date = try #require(DatabaseTimestamp.date(text))
        #expect(date.timeIntervalSinceReferenceDate == -54041.033)
        #expect(DatabaseTimestamp(date).databaseValue == text.databaseValue)
    }

    /// The instant of a "yyyy-MM-dd HH:mm:ss.SSS" UTC text as Swift's decimal parser (strtod) rounds the seconds
    /// since the reference date: an oracle that shares no arithmetic with `CivilTime`.
    static func nearest(_ text: String) -> Date? {
        guard let whole = Date.fromDatabaseValue(String(text.prefix(19)).databaseValue) else { return nil }
        let seconds = Int(whole.timeIntervalSinceReferenceDate.rounded())
        guard let ms = Int(text.suffix(3)) else { return nil }
        let total = seconds * 1000 + ms
        let sign = total < 0 ? "-" : ""
        let magnitude = abs(total)
        let decimal =
            "\(sign)\(magnitude / 1000).\(String(repeating: "0", count: 3 - String(magnitude % 1000).count))\(magnitude % 1000)"
        return Double(decimal).map { Date(timeIntervalSinceReferenceDate: $0) }
    }

    @Test func otherFormsAreLeftToGRDB() {
        for text in ["2026-11-27", "2026-11-27 10:11", "2026-11-27T10:11:12.345Z", "2026-11-27 10:11:12", "x"] {
            #expect(DatabaseTimestamp.date(text) == nil)
            #expect(
                DatabaseTimestamp.fromDatabaseValue(text.databaseValue)?.date
                    == Date.fromDatabaseValue(text.databaseValue))
        }
        for text in ["2026-02-29 00:00:00.000", "2026-13-01 00:00:00.000", "2026-11-27 24:00:00.000"] {
            #expect(DatabaseTimestamp.date(text) == nil, "\(text)")
        }
        let number = DatabaseValue(value: 1_700_000_000.5)!
        #expect(DatabaseTimestamp.fromDatabaseValue(number)?.date == Date.fromDatabaseValue(number))
    }

    /// The records' Date columns go through DatabaseTimestamp (the witness GRDB calls, not just an overload).
    @Test func recordsUseIt() {
        func encoding<R: EncodableRecord>(_: R.Type) -> Bool {
            if case .custom = R.databaseDateEncodingStrategy(for: "createdAt") { return true }
            return false
        }
        func decoding<R: FetchableRecord>(_: R.Type) -> Bool {
            if case .custom = R.databaseDateDecodingStrategy(for: "createdAt") { return true }
            return false
        }
        #expect(encoding(CredentialRecord.self) && decoding(CredentialRecord.self))
        #expect(encoding(CredentialEvent.self) && decoding(CredentialEvent.self))
        #expect(encoding(MDocRegistrationRecord.self) && decoding(MDocRegistrationRecord.self))
        #expect(encoding(PIVSlotRecord.self) && decoding(PIVSlotRecord.self))
        #expect(encoding(RecoveryAttemptRow.self) && decoding(RecoveryAttemptRow.self))
        #expect(encoding(StepUpRow.self) && decoding(StepUpRow.self))
    }
}
