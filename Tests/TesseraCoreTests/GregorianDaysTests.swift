import Testing

@testable import TesseraCore

@Suite struct GregorianDaysTests {
    @Test func knownDays() {
        #expect(GregorianDays.since1970(year: 1970, month: 1, day: 1) == 0)
        #expect(GregorianDays.since1970(year: 2000, month: 3, day: 1) == 11_017)
        #expect(GregorianDays.since1970(year: 1969, month: 12, day: 31) == -1)
        #expect(GregorianDays.since1970(year: 1583, month: 1, day: 1) == -141_349)
        #expect(GregorianDays.date(since1970: 19_688) == (2023, 11, 27))
    }

    /// Every day from 1583 to 2400 maps to the next calendar date, and back.
    @Test func consecutiveDaysRoundTrip() {
        var (y, m, d) = (1583, 1, 1)
        for n in GregorianDays.since1970(
            year: 1583, month: 1, day: 1)...GregorianDays.since1970(
                year: 2400, month: 12, day: 31)
        {
            #expect(GregorianDays.date(since1970: n) == (y, m, d))
            #expect(GregorianDays.since1970(year: y, month: m, day: d) == n)
            if d < GregorianDays.daysIn(month: m, year: y) {
                d += 1
            } else if m < 12 {
                (m, d) = (m + 1, 1)
            } else {
                (y, m, d) = (y + 1, 1, 1)
            }
        }
    }

    @Test func monthLengths() {
        #expect(GregorianDays.daysIn(month: 2, year: 2000) == 29)
        #expect(GregorianDays.daysIn(month: 2, year: 1900) == 28)
        #expect(GregorianDays.daysIn(month: 2, year: 2024) == 29)
        #expect(GregorianDays.daysIn(month: 4, year: 2023) == 30)
        #expect(GregorianDays.daysIn(month: 12, year: 2023) == 31)
    }
}
