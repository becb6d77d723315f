import CLISupport
import TesseraCore
import Testing

/// The forms `tessera enroll-station` asks from step input schemas (the schemas are the daemon's, docs/ENROLLMENT.md).
@Suite struct InputFormTests {
    /// NFC_MRZ: three alternatives (the MRZ, the three MRZ fields, or the CAN), each with its own fields only.
    static let mrzSchema: JSONValue = [
        "type": "object",
        "properties": [
            "mrz": ["type": "string", "description": "the 2 or 3 MRZ lines"],
            "documentNumber": ["type": "string"], "dateOfBirth": ["type": "string", "pattern": "^[0-9]{6}$"],
            "dateOfExpiry": ["type": "string", "pattern": "^[0-9]{6}$"],
            "can": ["type": "string", "pattern": "^[0-9]{6}$"],
        ],
        "oneOf": [
            ["required": ["mrz"]], ["required": ["documentNumber", "dateOfBirth", "dateOfExpiry"]],
            ["required": ["can"]],
        ],
    ]

    @Test func oneOfAlternativesKeepRequiredOrder() {
        let (alternatives, resend) = InputForm.alternatives(Self.mrzSchema)
        #expect(!resend)
        #expect(
            alternatives.map { $0.map(\.name) } == [
                ["mrz"], ["documentNumber", "dateOfBirth", "dateOfExpiry"], ["can"],
            ])
        #expect(alternatives[0][0].label == "mrz (the 2 or 3 MRZ lines)")
        #expect(alternatives[2][0].secret, "a CAN is typed without echo")
        #expect(!alternatives[1][0].secret)
        #expect(alternatives.allSatisfy { $0.allSatisfy { !$0.optional && $0.kind == .string } })
    }

    /// PHONE_OTP: the `{resend}` alternative is not a form of its own but an empty line at the code.
    @Test func resendAlternativeBecomesAnEmptyLine() {
        let schema: JSONValue = [
            "type": "object",
            "properties": ["otp": ["type": "string", "pattern": "^[0-9]{6}$"], "resend": ["type": "boolean"]],
            "oneOf": [["required": ["otp"]], ["required": ["resend"]]],
        ]
        let (alternatives, resend) = InputForm.alternatives(schema)
        #expect(resend)
        #expect(alternatives.count == 1)
        let otp = alternatives[0][0]
        #expect(otp.name == "otp" && otp.label == "one-time code" && otp.secret && !otp.optional)
    }

    @Test func plainSchemaRequiredFirstThenOptionalByName() {
        let schema: JSONValue = [
            "type": "object",
            "properties": [
                "zeta": ["type": "string"], "alpha": ["type": ["integer", "null"]],
                "email": ["type": "string", "title": "Your email"],
                "consent": ["type": "boolean"], "pw": ["type": "string", "format": "password"],
                "role": ["enum": ["user", "admin"]], "version": ["const": 2],
            ],
            "required": ["email", "consent"],
        ]
        let (alternatives, resend) = InputForm.alternatives(schema)
        #expect(!resend && alternatives.count == 1)
        let fields = alternatives[0]
        #expect(fields.map(\.name) == ["email", "consent", "alpha", "pw", "role", "version", "zeta"])
        #expect(fields[0].label == "Your email" && !fields[0].optional)
        #expect(fields[1].kind == .boolean && !fields[1].optional)
        #expect(fields[2].kind == .integer && fields[2].optional, "the first non-null type counts")
        #expect(fields[3].secret, "format: password")
        #expect(fields[4].choices == ["user", "admin"])
        #expect(fields[5].constant == 2 && fields[5].kind == .number, "a const gives its type")
    }

    @Test func emptySchemaHasOneEmptyAlternative() {
        let (alternatives, _) = InputForm.alternatives(["type": "object"])
        #expect(alternatives == [[]])
    }

    static func field(_ name: String, _ kind: FormField.Kind, optional: Bool = false, choices: [String] = [])
        -> FormField
    {
        FormField(
            name: name, label: name, kind: kind, optional: optional, secret: false, choices: choices, constant: nil)
    }

    @Test func parsesTypedValues() {
        var lines: [String] = []
        #expect(InputForm.parse("yes", Self.field("ok", .boolean), mrzLines: &lines) == .value(true))
        #expect(InputForm.parse("N", Self.field("ok", .boolean), mrzLines: &lines) == .value(false))
        #expect(InputForm.parse("maybe", Self.field("ok", .boolean), mrzLines: &lines) == .invalid("answer y or n"))
        #expect(InputForm.parse("42", Self.field("n", .integer), mrzLines: &lines) == .value(42))
        #expect(
            InputForm.parse("4.5", Self.field("n", .integer), mrzLines: &lines) == .invalid("n must be a whole number"))
        #expect(InputForm.parse("4.5", Self.field("x", .number), mrzLines: &lines) == .value(4.5))
        #expect(InputForm.parse("", Self.field("x", .string), mrzLines: &lines) == .invalid("x is required"))
        #expect(InputForm.parse("", Self.field("x", .string, optional: true), mrzLines: &lines) == .value(nil))
        #expect(
            InputForm.parse("root", Self.field("role", .string, choices: ["user", "admin"]), mrzLines: &lines)
                == .invalid("answer one of user, admin"))
        #expect(
            InputForm.parse("admin", Self.field("role", .string, choices: ["user", "admin"]), mrzLines: &lines)
                == .value("admin"))
    }

    @Test func faceStepImagesAreAskedAsFilePaths() {
        // FACE_MATCHING's input (docs/ENROLLMENT.md): {images: [{mediaType, data}]}.
        let schema: JSONValue = [
            "type": "object", "required": ["images"],
            "properties": [
                "images": [
                    "type": "array", "minItems": 1,
                    "items": [
                        "type": "object", "properties": ["mediaType": ["type": "string"], "data": ["type": "string"]],
                    ],
                ]
            ],
        ]
        let (alternatives, _) = InputForm.alternatives(schema)
        let field = alternatives[0][0]
        #expect(field.name == "images" && field.kind == .imageFiles && !field.optional)
        var lines: [String] = []
        #expect(InputForm.parse("a.jpg  b.jp2", field, mrzLines: &lines) == .value(["a.jpg", "b.jp2"]))
        #expect(InputForm.parse("", field, mrzLines: &lines) == .invalid("images is required"))
    }

    static let td3 = ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]
    static let td1 = [
        "I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6",
        "ERIKSSON<<ANNA<MARIA<<<<<<<<<<",
    ]

    @Test func mrzOnOneLineSeparatedBySpaces() {
        var lines: [String] = []
        let mrz = Self.field("mrz", .string)
        #expect(
            InputForm.parse(Self.td3.joined(separator: " "), mrz, mrzLines: &lines)
                == .value(.string(Self.td3.joined(separator: "\n"))))
        #expect(lines.isEmpty)
    }

    @Test func mrzLineAfterLine() {
        var lines: [String] = []
        let mrz = Self.field("mrz", .string)
        #expect(InputForm.parse(Self.td3[0], mrz, mrzLines: &lines) == .more)
        #expect(
            InputForm.parse(Self.td3[1], mrz, mrzLines: &lines) == .value(.string(Self.td3.joined(separator: "\n"))))
        #expect(lines.isEmpty)
        // TD1 has three lines of 30.
        #expect(InputForm.parse(Self.td1[0], mrz, mrzLines: &lines) == .more)
        #expect(InputForm.parse(Self.td1[1], mrz, mrzLines: &lines) == .more)
        #expect(
            InputForm.parse(Self.td1[2], mrz, mrzLines: &lines) == .value(.string(Self.td1.joined(separator: "\n"))))
        // An empty line in the middle of an MRZ is not "left empty", even for an optional field.
        #expect(InputForm.parse(Self.td3[0], Self.field("mrz", .string, optional: true), mrzLines: &lines) == .more)
        #expect(
            InputForm.parse("", Self.field("mrz", .string, optional: true), mrzLines: &lines)
                == .invalid("mrz is required"))
    }
}

@Suite struct ProgressTextTests {
    @Test func stepWithoutFile() {
        let (key, text) = ProgressText.describe(["step": "pace"], bar: true)
        #expect(key == "pace" && text == "pace")
    }

    @Test func fileWithBar() {
        let event: JSONValue = ["step": "reading", "file": "DG2", "bytesRead": 9000, "totalBytes": 15324]
        let (key, text) = ProgressText.describe(event, bar: true)
        #expect(key == "reading DG2")
        #expect(text == "reading DG2 [#################.............] 9000/15324 bytes")
        #expect(ProgressText.describe(event, bar: false).text == "reading DG2")
    }

    @Test func barStaysInItsWidth() {
        let over: JSONValue = ["step": "reading", "file": "DG1", "bytesRead": 200, "totalBytes": 100]
        #expect(
            ProgressText.describe(over, bar: true).text == "reading DG1 [" + String(repeating: "#", count: 30)
                + "] 200/100 bytes")
        let negative: JSONValue = ["step": "reading", "file": "DG1", "bytesRead": -5, "totalBytes": 100]
        #expect(
            ProgressText.describe(negative, bar: true).text == "reading DG1 [" + String(repeating: ".", count: 30)
                + "] -5/100 bytes")
        let noTotal: JSONValue = ["step": "reading", "file": "SOD", "bytesRead": 10]
        #expect(ProgressText.describe(noTotal, bar: true).text == "reading SOD")
    }

    @Test func mdocPhaseWithTheExchangeSoFar() {
        let (key, text) = ProgressText.describe(["phase": "response", "apdus": 9, "bytes": 812], bar: true)
        #expect(key == "response" && text == "mdoc response (9 APDUs, 812 bytes)")
        #expect(ProgressText.describe(["phase": "engagement"], bar: false).text == "mdoc engagement (0 APDUs, 0 bytes)")
    }
}
