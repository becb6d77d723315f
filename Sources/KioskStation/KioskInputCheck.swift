import MRZ
import TesseraCore

/// Checks document access data while the person types it (the MRZ entry screen), with the MRZ module's own
/// parser: nothing reaches the daemon until it is complete and its check digits are right.
public enum KioskInputCheck {
    /// `{mrz}`, `{documentNumber, dateOfBirth, dateOfExpiry}` or `{can}` as typed so far →
    /// `{complete, valid, message?, field?, key?, params?}`: `complete` once every character is there, `valid` when it
    /// then parses; `key` and `params` name the catalogue text the page shows (`message` is for logs and tests).
    public static func check(_ input: JSONValue) -> JSONValue {
        if let mrz = input["mrz"]?.stringValue { return checkMRZ(mrz) }
        if let can = input["can"]?.stringValue {
            let digits = can.filter { !$0.isWhitespace }
            guard digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber) else {
                return result(
                    complete: false, valid: false, "the card access number has digits only", field: "can",
                    key: "check.canDigits")
            }
            guard digits.count == 6 else {
                return result(
                    complete: false, valid: false, "\(digits.count) of 6 digits", field: "can", key: "check.canCount",
                    params: ["count": .number(Double(digits.count))])
            }
            do throws(TesseraError) {
                _ = try DocumentAccessKey(can: digits)
                return result(complete: true, valid: true, nil, field: nil, key: "check.valid")
            } catch {
                return result(complete: true, valid: false, error.message, field: "can", key: "check.canDigits")
            }
        }
        let number = input["documentNumber"]?.stringValue ?? ""
        let birth = input["dateOfBirth"]?.stringValue ?? ""
        let expiry = input["dateOfExpiry"]?.stringValue ?? ""
        for (name, value) in [("dateOfBirth", birth), ("dateOfExpiry", expiry)] where value.count > 6 {
            return result(
                complete: false, valid: false, "\(name) is YYMMDD (6 digits)", field: name, key: "check.dateInvalid")
        }
        do throws(TesseraError) {
            _ = try DocumentAccessKey.fromFields(documentNumber: number, dateOfBirth: birth, dateOfExpiry: expiry)
            return result(complete: true, valid: true, nil, field: nil, key: "check.valid")
        } catch {
            let field = error.details["field"]?.stringValue
            let incomplete =
                (field == "documentNumber" && number.isEmpty) || (field == "dateOfBirth" && birth.count < 6)
                || (field == "dateOfExpiry" && expiry.count < 6)
            let key =
                field == "documentNumber" && number.isEmpty
                ? "check.number" : incomplete ? "check.date" : "check.fields"
            return result(complete: !incomplete, valid: false, error.message, field: field, key: key)
        }
    }

    /// An MRZ as typed: lines (newlines or spaces between them), upper-cased. Incomplete while a line is shorter
    /// than its format's; then `MRZ.parse` names the first wrong character or check digit.
    static func checkMRZ(_ text: String) -> JSONValue {
        let lines = text.uppercased().split(whereSeparator: { $0 == "\n" || $0 == "\r" || $0 == " " }).map(String.init)
        guard let first = lines.first else {
            return result(
                complete: false, valid: false, "type the lines at the bottom of the photo page", field: "mrz",
                key: "check.empty")
        }
        for (i, line) in lines.enumerated() {
            if let bad = line.firstIndex(where: { !(("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "<") }
            ) {
                let col = line.distance(from: line.startIndex, to: bad) + 1
                return result(
                    complete: false, valid: false, "line \(i + 1), position \(col): '\(line[bad])' cannot be in an MRZ",
                    field: "mrz", key: "check.character",
                    params: [
                        "line": .number(Double(i + 1)), "position": .number(Double(col)),
                        "character": .string(String(line[bad])),
                    ])
            }
        }
        // TD1: 3 lines of 30; TD2/MRV-B: 2 of 36; TD3/MRV-A: 2 of 44. A passport (P…) is TD3 from its first letter;
        // otherwise the first line's length tells, once it is longer than the shorter formats.
        let width = first.hasPrefix("P") || first.count > 36 ? 44 : first.count > 30 ? 36 : 30
        let count = width == 30 ? 3 : 2
        let typed = lines.prefix(count).reduce(0) { $0 + $1.count }
        if lines.count < count || lines.prefix(count).contains(where: { $0.count < width }) {
            return result(
                complete: false, valid: false, "\(typed) of \(width * count) characters", field: "mrz",
                key: "check.count", params: ["count": .number(Double(typed)), "total": .number(Double(width * count))])
        }
        do throws(TesseraError) {
            _ = try MRZ.parse(lines.joined(separator: "\n"))
            return result(complete: true, valid: true, nil, field: "mrz", key: "check.valid")
        } catch {
            return result(complete: true, valid: false, error.message, field: "mrz", key: "check.invalid")
        }
    }

    private static func result(
        complete: Bool, valid: Bool, _ message: String?, field: String?, key: String,
        params: [String: JSONValue] = [:]
    ) -> JSONValue {
        var o: [String: JSONValue] = [
            "complete": .bool(complete), "valid": .bool(valid), "key": .string(key), "params": .object(params),
        ]
        if let message { o["message"] = .string(message) }
        if let field { o["field"] = .string(field) }
        return .object(o)
    }
}
