import TesseraCore
import Testing

@testable import Enrollment

@Suite struct WorkflowConfigurationTests {
    func parse(_ text: String) throws(TesseraError) -> EnrollmentConfiguration {
        try EnrollmentConfiguration(json: try JSONValue.parse(Array(text.utf8)))
    }

    @Test func fullWorkflowParsesWithSettings() throws {
        let c = try parse(
            """
            {"idleTimeoutSeconds": 600, "otp": {"attempts": 3, "ttlSeconds": 60, "maxResends": 0},
             "notifier": {"directory": "/tmp/x"},
             "workflows": {"badge": {"remote": true, "expected": {"surname": "ERIKSSON"},
               "steps": ["EMAIL_INFO", "PHONE_INFO", "PHONE_OTP", "NFC_MRZ",
                         {"key": "NFC_PHASE", "dataGroups": ["DG1"], "allowUnverified": false, "allowClonable": true},
                         "ATTRIBUTE_MATCHING", {"key": "TERMS", "client": true, "prompt": "ok?"},
                         {"key": "PASSKEY_CREATION", "rpId": "example.com", "attestation": "packed"}]}}}
            """)
        #expect(c.idleTimeout == 600 && c.otpAttempts == 3 && c.otpTTL == 60 && c.otpMaxResends == 0)
        #expect(c.notifier == .directory("/tmp/x"))
        let w = try #require(c.workflow(named: "badge"))
        #expect(
            w.steps.map(\.kind) == [
                .emailInfo, .phoneInfo, .phoneOTP, .nfcMRZ, .nfcPhase, .attributeMatching, .client, .passkeyCreation,
            ])
        #expect(w.steps[4].settings["dataGroups"] == ["DG1"])
        #expect(w.steps[4].settings["allowClonable"] == true)
        #expect(w.unavailableReasons(notifier: c.notifier, faceMatcher: false).isEmpty)
        #expect(!w.needsActivationToken)
    }

    @Test(arguments: [
        (#"{"workflows": {"w": {"steps": ["EMAIL_INFO", "SELFIE_DANCE"]}}}"#, "unknown step key SELFIE_DANCE"),
        (#"{"workflows": {"w": {"steps": ["PHONE_OTP", "PHONE_INFO"]}}}"#, "PHONE_OTP needs PHONE_INFO before it"),
        (#"{"workflows": {"w": {"steps": ["ATTRIBUTE_MATCHING"]}}}"#, "needs NFC_PHASE or MDOC_PHASE before it"),
        (
            #"{"workflows": {"w": {"steps": ["ATTRIBUTE_MATCHING", "MDOC_PHASE"]}}}"#,
            "needs NFC_PHASE or MDOC_PHASE before it"
        ),
        (
            #"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "dataGroups": ["DG1"]}]}}}"#,
            "unknown setting dataGroups"
        ),
        (#"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "elements": "portrait"}]}}}"#, "elements must list"),
        (#"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "elements": ["ns/"]}]}}}"#, "elements must list"),
        (#"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "cardWaitSeconds": 0}]}}}"#, "cardWaitSeconds"),
        (#"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "reader": 1}]}}}"#, "reader must be a string"),
        (#"{"workflows": {"w": {"steps": [{"key": "MDOC_PHASE", "client": true}]}}}"#, "cannot be a client step"),
        (#"{"workflows": {"w": {"steps": [{"key": "PASSKEY_CREATION"}]}}}"#, "rpId is required"),
        (#"{"workflows": {"w": {"steps": [{"key": "NFC_MRZ", "colour": "red"}]}}}"#, "unknown setting colour"),
        (
            #"{"workflows": {"w": {"steps": ["NFC_MRZ", {"key": "NFC_PHASE", "allowClonable": "yes"}]}}}"#,
            "allowClonable must be true or false"
        ),
        (
            #"{"workflows": {"w": {"steps": ["NFC_MRZ", {"key": "NFC_PHASE", "allowUnverified": 1}]}}}"#,
            "allowUnverified must be true or false"
        ),
        (
            #"{"workflows": {"w": {"steps": ["NFC_MRZ", {"key": "NFC_PHASE", "allowClonabel": true}]}}}"#,
            "unknown setting allowClonabel"
        ),
        (#"{"workflows": {"w": {"steps": ["EMAIL_INFO", "EMAIL_INFO"]}}}"#, "lists step EMAIL_INFO twice"),
        (#"{"workflows": {"w": {"steps": [{"key": "bad key", "client": true}]}}}"#, "must be UPPER_SNAKE"),
        (#"{"workflows": {"w": {"steps": [{"key": "EMAIL_INFO", "client": true}]}}}"#, "cannot be a client step"),
        (#"{"workflows": {"w": {"steps": []}}}"#, "non-empty steps"),
        (#"{"notifier": {"smtp": "x"}}"#, "notifier must be"),
        (#"{"surprise": 1}"#, "unknown setting surprise"),
    ])
    func configErrorsNameTheProblem(_ text: String, _ fragment: String) {
        #expect {
            _ = try parse(text)
        } throws: { error in
            guard let e = error as? TesseraError else { return false }
            return e.code == .invalidInput && e.message.contains(fragment)
        }
    }

    @Test func unavailableStepsAndMissingNotifierMakeACandidateUnavailable() throws {
        let c = try parse(
            """
            {"workflows": {"face": {"remote": true, "steps": ["NFC_MRZ", "NFC_PHASE", "FACE_MATCHING", {"key": "PASSKEY_CREATION", "rpId": "a.example"}]},
                           "docauth": {"remote": true, "steps": ["DOC_AUTH"]},
                           "otp": {"remote": true, "steps": ["PHONE_INFO", "PHONE_OTP"]},
                           "match": {"remote": true, "steps": ["NFC_MRZ", "NFC_PHASE", "ATTRIBUTE_MATCHING"]}}}
            """)
        let face = try #require(c.workflow(named: "face"))
        #expect(face.unavailableReasons(notifier: nil, faceMatcher: false).first?.contains("face matcher") == true)
        #expect(face.unavailableReasons(notifier: nil, faceMatcher: true).isEmpty)
        #expect(
            try #require(c.workflow(named: "docauth")).unavailableReasons(notifier: nil, faceMatcher: true).first?
                .contains("DOC_AUTH") == true)
        #expect(
            try #require(c.workflow(named: "otp")).unavailableReasons(notifier: nil, faceMatcher: true).first?.contains(
                "no OTP notifier") == true)
        #expect(
            try #require(c.workflow(named: "otp")).unavailableReasons(notifier: .directory("/x"), faceMatcher: false)
                .isEmpty)
        #expect(try #require(c.workflow(named: "match")).needsActivationToken)
    }

    @Test(arguments: [
        (#"["FACE_MATCHING"]"#, "needs NFC_PHASE or MDOC_PHASE"),
        (#"["NFC_MRZ", {"key": "NFC_PHASE", "dataGroups": ["DG1"]}, "FACE_MATCHING"]"#, "DG2"),
        (#"["NFC_MRZ", "NFC_PHASE", "LIVENESS_CHALLENGE_PHASE"]"#, "LIVENESS_CHALLENGE_SESSION_CREATION"),
        (#"["NFC_MRZ", "NFC_PHASE", {"key": "LIVENESS_CHALLENGE_SESSION_CREATION", "actions": ["nod"]}]"#, "actions"),
        (#"["NFC_MRZ", "NFC_PHASE", {"key": "LIVENESS_CHALLENGE_SESSION_CREATION", "length": 9}]"#, "length"),
        (#"["NFC_MRZ", "NFC_PHASE", {"key": "FACE_MATCHING", "keepTemplate": "yes"}]"#, "keepTemplate"),
        (#"["NFC_MRZ", "NFC_PHASE", {"key": "MID_SELFIE_MATCHING", "keepTemplate": true}]"#, "keepTemplate"),
        (#"["MID_SELFIE_MATCHING"]"#, "needs NFC_PHASE or MDOC_PHASE"),
    ])
    func faceStepsAreValidated(steps: String, fragment: String) {
        #expect {
            _ = try parse(#"{"workflows": {"f": {"steps": "# + steps + "}}}")
        } throws: { error in
            guard let e = error as? TesseraError else { return false }
            return e.code == .invalidInput && e.message.contains(fragment)
        }
    }

    /// A workflow's own wording for the kiosk screen: language → key → text, and nothing else.
    @Test func workflowMessagesParse() throws {
        let c = try parse(
            #"{"workflows": {"bank": {"steps": ["NFC_MRZ"], "messages": {"en": {"start.title": "Welcome to the bank"}}}}}"#
        )
        #expect(c.workflow(named: "bank")?.messages?["en"]?["start.title"] == "Welcome to the bank")
        #expect(try parse(#"{"workflows": {"w": ["NFC_MRZ"]}}"#).workflow(named: "w")?.messages == nil)
        for bad in [#""hello""#, #"{"en": "hello"}"#, #"{"en": {"start.title": 1}}"#] {
            #expect(throws: TesseraError.self) {
                try parse(#"{"workflows": {"w": {"steps": ["NFC_MRZ"], "messages": "# + bad + "}}}")
            }
        }
    }

    @Test func faceWorkflowParses() throws {
        let c = try parse(
            """
            {"workflows": {"f": {"steps": ["NFC_MRZ", "NFC_PHASE", {"key": "FACE_MATCHING", "keepTemplate": true},
              {"key": "LIVENESS_CHALLENGE_SESSION_CREATION", "actions": ["turnLeft", "turnRight"], "length": 4},
              "LIVENESS_CHALLENGE_PHASE", "MID_SELFIE_MATCHING"]}}}
            """)
        let w = try #require(c.workflow(named: "f"))
        #expect(
            w.steps.map(\.kind) == [.nfcMRZ, .nfcPhase, .faceMatching, .livenessSession, .livenessPhase, .midSelfie])
        #expect(w.needs.contains("camera"))
        let challenge = EnrollmentEngine.livenessChallenge(w.steps[3])
        #expect(challenge.count == 4)
        #expect(challenge.allSatisfy { ["turnLeft", "turnRight"].contains($0) })
        #expect(zip(challenge, challenge.dropFirst()).allSatisfy { $0 != $1 })
    }

    @Test func aWorkflowMayBeJustItsSteps() throws {
        let c = try parse(
            #"{"workflows": {"employee-badge": ["EMAIL_INFO", "PHONE_INFO"], "token-only": {"remote": false, "steps": ["EMAIL_INFO"]}}}"#
        )
        let w = try #require(c.workflow(named: "employee-badge"))
        #expect(w.remote && w.steps.map(\.kind) == [.emailInfo, .phoneInfo])
        #expect(try #require(c.workflow(named: "token-only")).remote == false)
    }

    @Test func customStepsGoBeforePasskeyCreation() throws {
        let c = try parse(
            #"{"workflows": {"w": {"steps": ["EMAIL_INFO", {"key": "PASSKEY_CREATION", "rpId": "a.example"}]}}}"#)
        let custom = try WorkflowStep.custom(["key": "TERMS_ACCEPTANCE", "prompt": "Accept?"])
        let steps = try EnrollmentEngine.insertCustomSteps([custom], into: try #require(c.workflow(named: "w")).steps)
        #expect(steps.map(\.key) == ["EMAIL_INFO", "TERMS_ACCEPTANCE", "PASSKEY_CREATION"])
        #expect(throws: TesseraError.self) { try WorkflowStep.custom(["key": "NFC_PHASE"]) }
        #expect(throws: TesseraError.self) { try EnrollmentEngine.insertCustomSteps([custom, custom], into: steps) }
    }
}
