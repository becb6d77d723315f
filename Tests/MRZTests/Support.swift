import MRZ
import TesseraCore
import Testing

/// Parses `text` and returns the TesseraError it must throw (records an issue when it does not).
func parseError(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> TesseraError? {
    do {
        let parsed = try MRZ(text)
        Issue.record("expected MRZ_INVALID, parsed \(parsed.format) instead", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

/// Asserts that `text` fails with MRZ_INVALID at `field`, 1-based `line` and `column`.
func expectFailure(
    _ text: String, field: String, line: Int, column: Int, expected: String? = nil,
    found: String? = nil, sourceLocation: SourceLocation = #_sourceLocation
) {
    guard let e = parseError(text, sourceLocation: sourceLocation) else { return }
    #expect(e.code == .mrzInvalid, sourceLocation: sourceLocation)
    #expect(e.details["field"] == .string(field), "\(e.message)", sourceLocation: sourceLocation)
    #expect(e.details["line"] == .number(Double(line)), "\(e.message)", sourceLocation: sourceLocation)
    #expect(e.details["column"] == .number(Double(column)), "\(e.message)", sourceLocation: sourceLocation)
    if let expected { #expect(e.details["expected"] == .string(expected), sourceLocation: sourceLocation) }
    if let found { #expect(e.details["found"] == .string(found), sourceLocation: sourceLocation) }
}

/// Replaces the character at 1-based `column` of 1-based `line` of a multi-line MRZ.
func replacing(_ text: String, line: Int, column: Int, with c: Character) -> String {
    var lines = text.split(separator: "\n").map { Array($0) }
    lines[line - 1][column - 1] = c
    return lines.map { String($0) }.joined(separator: "\n")
}

/// ICAO Doc 9303 specimens (the "UTOPIA" examples printed in the Parts named below).
enum Specimen {
    /// Doc 9303 Part 4 (TD3 / MRP), Appendix A: the ERIKSSON passport.
    static let td3 = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"
    /// Doc 9303 Part 5 (TD1), Appendix A.
    static let td1 = "I<UTOD231458907<<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<"
    /// Doc 9303 Part 6 (TD2), Appendix A.
    static let td2 = "I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<\nD231458907UTO7408122F1204159<<<<<<<6"
    /// Doc 9303 Part 7 (MRV-A), Appendix A.
    static let mrvA = "V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL8988901C4XXX4009078F96121096ZE184226B<<<<<<"
    /// Doc 9303 Part 7 (MRV-B), Appendix A.
    static let mrvB = "V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<\nL8988901C4XXX4009078F9612109<<<<<<<<"
    /// Doc 9303 Part 11 Appendix D.2: TD1 with a 12-character document number D23145890734
    /// (position 15 is '<'; "7349" in the optional data = continuation "734" + check digit 9).
    static let td1Extended =
        "I<UTOD23145890<7349<<<<<<<<<<<\n3407127M9507122UTO<<<<<<<<<<<2\nSTEVENSON<<PETER<JOHN<<<<<<<<<"
    /// Doc 9303 Part 11 Appendix D.2: the same document number in a TD2.
    static let td2Extended = "I<UTOSTEVENSON<<PETER<JOHN<<<<<<<<<<\nD23145890<UTO3407127M95071227349<<<8"
    /// TD3 around the Doc 9303 Part 11 Appendix D BAC worked example, whose printed MRZ information is
    /// "L898902C<369080619406236" (8-character number L898902C). The remaining fields reuse the Part 4
    /// specimen; personal-number check 1 and composite 4 were computed with an independent Python script.
    static let td3BAC = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C<3UTO6908061F9406236ZE184226B<<<<<14"
}

/// `s` right-padded with '<' to `width` characters.
func pad(_ s: String, _ width: Int) -> String { s + String(repeating: "<", count: max(0, width - s.count)) }
