import TesseraCore
import Testing

@testable import Enrollment

/// Runs `body` and returns the TesseraError it must throw (records an issue when it does not).
func thrownError<T>(
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws(TesseraError) -> T
) -> TesseraError? {
    do {
        let value = try body()
        Issue.record("expected a TesseraError, got \(value)", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

/// Asserts that `body` throws a TesseraError with `code` and returns it.
@discardableResult
func expectError<T>(
    _ code: TesseraError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws(TesseraError) -> T
) -> TesseraError? {
    guard let e = thrownError(sourceLocation: sourceLocation, body) else { return nil }
    #expect(e.code == code, "\(e)", sourceLocation: sourceLocation)
    return e
}

/// ICAO Doc 9303 specimens, as in Tests/MRZTests/Support.swift.
enum Specimen {
    /// Doc 9303 Part 4 (TD3 / MRP), Appendix A: the ERIKSSON passport.
    static let td3 = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"
    /// Doc 9303 Part 5 (TD1), Appendix A.
    static let td1 = "I<UTOD231458907<<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<"
    /// Doc 9303 Part 6 (TD2), Appendix A.
    static let td2 = "I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<\nD231458907UTO7408122F1204159<<<<<<<6"
    /// Doc 9303 Part 11 Appendix D.2: TD1 with the 12-character document number D23145890734.
    static let td1Extended =
        "I<UTOD23145890<7349<<<<<<<<<<<\n3407127M9507122UTO<<<<<<<<<<<2\nSTEVENSON<<PETER<JOHN<<<<<<<<<"
}
