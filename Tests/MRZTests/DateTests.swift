import MRZ
import Testing

@Suite struct DateTests {
    let reference = MRZDate(year: 2025, month: 1, day: 1)!

    @Test func birthCentury() {
        #expect(MRZ.birthDate("740812", relativeTo: reference)?.description == "1974-08-12")
        #expect(MRZ.birthDate("200101", relativeTo: reference)?.description == "2020-01-01")
        // Today is not in the future; tomorrow is, so it must be 1925.
        #expect(MRZ.birthDate("250101", relativeTo: reference)?.description == "2025-01-01")
        #expect(MRZ.birthDate("250102", relativeTo: reference)?.description == "1925-01-02")
        #expect(MRZ.birthDate("991231", relativeTo: reference)?.description == "1999-12-31")
        #expect(MRZ.birthDate("000229", relativeTo: reference)?.description == "2000-02-29")
    }

    @Test func expiryCentury() {
        #expect(MRZ.expiryDate("120415", relativeTo: reference)?.description == "2012-04-15")
        #expect(MRZ.expiryDate("350101", relativeTo: reference)?.description == "2035-01-01")
        // Exactly 50 years ahead is still 20YY; one day more flips to 19YY.
        #expect(MRZ.expiryDate("750101", relativeTo: reference)?.description == "2075-01-01")
        #expect(MRZ.expiryDate("750102", relativeTo: reference)?.description == "1975-01-02")
        // Part 11 D.2 specimen: expiry 950712 is 1995.
        #expect(MRZ.expiryDate("950712", relativeTo: reference)?.description == "1995-07-12")
    }

    @Test func invalidOrUnknownDates() {
        #expect(MRZ.birthDate("74<<<<", relativeTo: reference) == nil)
        #expect(MRZ.birthDate("741312", relativeTo: reference) == nil)
        #expect(MRZ.birthDate("740231", relativeTo: reference) == nil)
        #expect(MRZ.birthDate("010229", relativeTo: reference) == nil)
        #expect(MRZ.expiryDate("12041", relativeTo: reference) == nil)
        #expect(MRZDate(year: 2023, month: 2, day: 29) == nil)
        #expect(MRZDate(year: 2024, month: 2, day: 29) != nil)
    }

    @Test func onParsedSpecimen() throws {
        let m = try MRZ(Specimen.td1Extended)
        #expect(m.birthDate(relativeTo: reference) == MRZDate(year: 1934, month: 7, day: 12))
        #expect(m.expiryDate(relativeTo: reference) == MRZDate(year: 1995, month: 7, day: 12))
        let t = try MRZ(Specimen.td3)
        #expect(t.birthDate(relativeTo: reference) == MRZDate(year: 1974, month: 8, day: 12))
        #expect(t.expiryDate(relativeTo: reference) == MRZDate(year: 2012, month: 4, day: 15))
    }

    @Test func unknownBirthDayIsAccepted() throws {
        // Part 3: unknown parts of the date of birth are fillers. "7408<<" → check digit: 7·7 + 4·3 + 0 + 8·7 = 117 → 7.
        // Composite over "D231458907" + "7408<<7" + "1204159<<<<<<<" = 6 (Python).
        let m = try MRZ("I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<\nD231458907UTO7408<<7F1204159<<<<<<<6")
        #expect(m.dateOfBirth == "7408<<")
        #expect(m.birthDate(relativeTo: reference) == nil)
    }

    @Test func todayIsPlausible() {
        let t = MRZDate.today()
        #expect(t.year >= 2024 && t.year < 2100)
    }
}
