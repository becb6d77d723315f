import Foundation
import GRDB
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
        var g = SystemRandomNumberGenerator()
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
            #expect(DatabaseTimestamp(date).databaseValue == date.databaseValue, "\(t)")
            #expect((DatabaseTimestamp.text(date) != nil) == Self.ours(t), "\(t)")
        }
    }

    @Test func readsWhatGRDBReads() {
        for t in Self.instants {
            let stored = Date(timeIntervalSince1970: t).databaseValue
            #expect(DatabaseTimestamp.fromDatabaseValue(stored)?.date == Date.fromDatabaseValue(stored), "\(stored)")
            #expect((DatabaseTimestamp.date(String.fromDatabaseValue(stored)!) != nil) == Self.ours(t), "\(stored)")
        }
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
