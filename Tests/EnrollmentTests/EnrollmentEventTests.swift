import Enrollment
import TesseraCore
import Testing

@Suite struct EnrollmentEventTests {
    @Test func stepRequiredKeepsOnlyTheStepForOthers() {
        let full: JSONValue = [
            "enrollmentId": "e1", "key": "PHONE_OTP", "prompt": "Enter the code sent to +49 151 ****89",
            "to": "+49 151 ****89", "attemptsLeft": 3, "input": ["type": "object"],
        ]
        #expect(EnrollmentEvent.redact("enrollment.stepRequired", full) == ["enrollmentId": "e1", "key": "PHONE_OTP"])
    }

    @Test func finishedKeepsTheOutcomeAndTheErrorCode() {
        let success: JSONValue = [
            "enrollmentId": "e1", "outcome": "success",
            "credential": ["credentialId": "AAAA"], "document": ["surname": "ERIKSSON"],
        ]
        #expect(EnrollmentEvent.redact("enrollment.finished", success) == ["enrollmentId": "e1", "outcome": "success"])
        let failed: JSONValue = [
            "enrollmentId": "e1", "outcome": "failed", "step": "ATTRIBUTE_MATCHING",
            "error": [
                "code": "ATTRIBUTE_MISMATCH", "message": "the document does not match",
                "retryable": false, "mismatches": [["attribute": "surname", "actual": "ERIKSSON"]],
            ],
        ]
        #expect(
            EnrollmentEvent.redact("enrollment.finished", failed) == [
                "enrollmentId": "e1", "outcome": "failed", "step": "ATTRIBUTE_MATCHING",
                "error": ["code": "ATTRIBUTE_MISMATCH", "retryable": false],
            ])
    }

    @Test func eventsWithoutPersonalDataPassUnchanged() {
        let progress: JSONValue = [
            "enrollmentId": "e1", "step": "NFC_PHASE", "progress": ["step": "read", "file": "DG1"],
        ]
        for method in [
            "enrollment.started", "enrollment.busy", "enrollment.idle", "enrollment.progress",
            "enrollment.stepCompleted",
        ] {
            #expect(EnrollmentEvent(method: method, params: progress, owner: 1000).redacted == progress)
        }
    }

    @Test func ownerAndAdministratorsSeeEverything() {
        #expect(EnrollmentCaller(uid: 1000, isAdmin: false).owns(1000))
        #expect(!EnrollmentCaller(uid: 1001, isAdmin: false).owns(1000))
        #expect(EnrollmentCaller(uid: 1001, isAdmin: true).owns(1000))
        #expect(!EnrollmentCaller(uid: 1000, isAdmin: false).owns(nil))
    }
}
