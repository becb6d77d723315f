import TesseraCore

/// One field of a step's input form, read from its JSON Schema.
public struct FormField: Sendable, Equatable {
    /// `imageFiles`: an array of `{mediaType, data}` images (the face steps), typed as file paths.
    public enum Kind: Sendable { case string, boolean, integer, number, imageFiles }
    public var name: String
    public var label: String
    public var kind: Kind
    public var optional: Bool
    /// Asked without echo (PINs, one-time codes, CANs, passwords, `format: password`, `writeOnly`).
    public var secret: Bool
    public var choices: [String]
    public var constant: JSONValue?

    public init(
        name: String, label: String, kind: Kind, optional: Bool, secret: Bool, choices: [String],
        constant: JSONValue?
    ) {
        self.name = name
        self.label = label
        self.kind = kind
        self.optional = optional
        self.secret = secret
        self.choices = choices
        self.constant = constant
    }
}

/// What one typed line gives a field.
public enum FieldInput: Sendable, Equatable {
    /// The field's value (nil: an optional field left empty).
    case value(JSONValue?)
    /// A line of a multi-line MRZ; the next line is needed.
    case more
    /// Rejected, with the reason to show.
    case invalid(String)
}

/// The question-by-question form `tessera enroll-station` derives from a step's input JSON Schema
/// (docs/ENROLLMENT.md): pure, no I/O.
public enum InputForm {
    /// The alternatives of an input schema (oneOf/anyOf, each merged with the common properties) as fields, and
    /// whether one alternative is just `{resend}` (then offered as an empty line at the code instead).
    public static func alternatives(_ schema: JSONValue) -> (alternatives: [[FormField]], offersResend: Bool) {
        let baseProps = schema["properties"]?.objectValue ?? [:]
        let baseRequired = (schema["required"]?.arrayValue ?? []).compactMap(\.stringValue)
        let alts = schema["oneOf"]?.arrayValue ?? schema["anyOf"]?.arrayValue ?? []
        guard !alts.isEmpty else {
            return ([fields(baseProps, required: baseRequired, listed: Array(baseProps.keys))], false)
        }
        var result: [[FormField]] = []
        var resend = false
        for alt in alts {
            let ownProps = alt["properties"]?.objectValue ?? [:]
            let props = baseProps.merging(ownProps) { $1 }
            let ownRequired = (alt["required"]?.arrayValue ?? []).compactMap(\.stringValue)
            let required = baseRequired + ownRequired
            // An alternative names its fields by its own properties, else by what it requires.
            var listed = Array(ownProps.keys) + ownRequired
            if listed.isEmpty { listed = Array(props.keys) }
            if Set(listed) == ["resend"] { resend = true; continue }
            result.append(fields(props, required: required, listed: listed))
        }
        return (result, resend)
    }

    /// Required fields first (in schema order), then the optional ones by name.
    static func fields(_ props: [String: JSONValue], required: [String], listed: [String]) -> [FormField] {
        var names: [String] = []
        for n in required where !names.contains(n) { names.append(n) }
        for n in listed.sorted() where !names.contains(n) { names.append(n) }
        return names.map { name in
            let s = props[name] ?? .null
            let type = s["type"]?.stringValue ?? s["type"]?.arrayValue?.compactMap(\.stringValue).first { $0 != "null" }
            let constant = s["const"]
            let kind: FormField.Kind
            switch type ?? constant.map(typeName) ?? "string" {
            case "boolean": kind = .boolean
            case "integer": kind = .integer
            case "number": kind = .number
            case "array" where s["items"]?["properties"]?["mediaType"] != nil: kind = .imageFiles
            default: kind = .string
            }
            let secret =
                ["pin", "otp", "code", "can", "password"].contains(name.lowercased())
                || s["format"]?.stringValue == "password" || s["writeOnly"]?.boolValue == true
            let label =
                name == "otp"
                ? "one-time code"
                : s["title"]?.stringValue ?? s["description"]?.stringValue.map { "\(name) (\($0))" } ?? name
            return FormField(
                name: name, label: label, kind: kind, optional: !required.contains(name), secret: secret,
                choices: (s["enum"]?.arrayValue ?? []).compactMap(\.stringValue), constant: constant)
        }
    }

    private static func typeName(_ v: JSONValue) -> String {
        switch v {
        case .bool: return "boolean"
        case .number: return "number"
        default: return "string"
        }
    }

    /// Reads one typed line (already trimmed) for `field`. An MRZ may come as its lines separated by spaces, or one
    /// line after the other (`mrzLines` collects them; `.more` until the format's line count is reached).
    public static func parse(_ text: String, _ field: FormField, mrzLines: inout [String]) -> FieldInput {
        if text.isEmpty {
            return field.optional && mrzLines.isEmpty ? .value(nil) : .invalid("\(field.name) is required")
        }
        switch field.kind {
        case .boolean:
            switch text.lowercased() {
            case "y", "yes", "true", "1": return .value(true)
            case "n", "no", "false", "0": return .value(false)
            default: return .invalid("answer y or n")
            }
        case .integer:
            guard let n = Int(text) else { return .invalid("\(field.name) must be a whole number") }
            return .value(.number(Double(n)))
        case .number:
            guard let n = Double(text) else { return .invalid("\(field.name) must be a number") }
            return .value(.number(n))
        case .imageFiles:
            // The paths of the image files, separated by spaces; the command reads them.
            let paths = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map { JSONValue.string(String($0)) }
            return .value(.array(paths))
        case .string:
            if !field.choices.isEmpty, !field.choices.contains(text) {
                return .invalid("answer one of \(field.choices.joined(separator: ", "))")
            }
            guard field.name == "mrz" else { return .value(.string(text)) }
            // MRZ lines have no spaces: several on one line are split; a full TD1/TD2/TD3 line asks for the next.
            let parts = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            if parts.count > 1, mrzLines.isEmpty { return .value(.string(parts.joined(separator: "\n"))) }
            mrzLines.append(text)
            let first = mrzLines[0].count
            if [30, 36, 44].contains(first), mrzLines.count < (first == 30 ? 3 : 2) { return .more }
            defer { mrzLines = [] }
            return .value(.string(mrzLines.joined(separator: "\n")))
        }
    }
}
