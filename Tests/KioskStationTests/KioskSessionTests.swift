import RPC
import TesseraCore
import Testing

@testable import KioskStation

private let mrzAnna = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"

extension JSONValue {
    fileprivate func merging(_ other: [String: JSONValue]) -> JSONValue {
        .object((objectValue ?? [:]).merging(other) { $1 })
    }
}

private func note(_ method: String, _ params: JSONValue) -> RPCNotification {
    RPCNotification(method: method, params: params)
}

/// A session that started enrollment "e1" of workflow "w" with steps NFC_MRZ, NFC_PHASE, PASSKEY_CREATION.
private func started() throws -> KioskSession {
    var s = KioskSession(workflow: "w")
    _ = try s.call(for: .start(activationToken: nil))
    try s.started(["enrollmentId": "e1", "workflow": "w", "steps": ["NFC_MRZ", "NFC_PHASE", "PASSKEY_CREATION"]])
    return s
}

private let mrzStep: JSONValue = [
    "enrollmentId": "e1", "key": "NFC_MRZ", "prompt": "The MRZ of your document",
    "input": [
        "type": "object",
        "oneOf": [
            ["required": ["mrz"], "properties": ["mrz": ["type": "string"]]],
            [
                "required": ["documentNumber", "dateOfBirth", "dateOfExpiry"],
                "properties": [
                    "documentNumber": ["type": "string"], "dateOfBirth": ["type": "string"],
                    "dateOfExpiry": ["type": "string"],
                ],
            ],
            ["required": ["can"], "properties": ["can": ["type": "string"]]],
        ],
    ],
]

/// FACE_MATCHING as the engine asks for it: an array of {mediaType, data} images.
private let faceStep: JSONValue = [
    "enrollmentId": "e1", "key": "FACE_MATCHING", "prompt": "Look into the camera",
    "input": [
        "type": "object", "required": ["images"],
        "properties": [
            "images": [
                "type": "array",
                "items": [
                    "type": "object",
                    "properties": ["mediaType": ["type": "string"], "data": ["type": "string"]],
                ],
            ]
        ],
    ],
]

@Suite struct KioskSessionTests {
    @Test func startsOnlyTheStationsWorkflow() throws {
        var s = KioskSession(workflow: "employee-badge")
        #expect(s.view["screen"] == "start")
        let call = try s.call(for: .start(activationToken: nil))
        #expect(
            call == KioskCall(method: "enrollment.start", params: ["type": ["remote": ["candidate": "employee-badge"]]])
        )
        // A second start while one runs is refused without a daemon call.
        #expect(throws: TesseraError.self) { try s.call(for: .start(activationToken: nil)) }
        // A token for another workflow is not this station's.
        var t = KioskSession(workflow: "employee-badge")
        let tokenCall = try t.call(for: .start(activationToken: "eyJ.x.y"))
        #expect(tokenCall?.params["type"]?["activationToken"] == "eyJ.x.y")
        #expect(throws: TesseraError.self) { try t.started(["enrollmentId": "e2", "workflow": "other", "steps": []]) }
        // --take-over: the start interrupts what this uid left active.
        var f = KioskSession(workflow: "employee-badge", takeOver: true)
        #expect(try f.call(for: .start(activationToken: nil))?.params["force"] == true)
        #expect(call?.params["force"] == nil)
        // The interrupted enrollment's `finished`, before the start's answer, is not this station's.
        #expect(f.apply(note("enrollment.finished", ["enrollmentId": "old", "outcome": "interrupted"])) == [])
        _ = f.apply(
            note("enrollment.started", ["enrollmentId": "new", "workflow": "employee-badge", "steps": ["NFC_MRZ"]]))
        _ = f.apply(note("enrollment.stepRequired", mrzStep.merging(["enrollmentId": "new"])))
        #expect(f.view["screen"] == "NFC_MRZ")
        #expect(f.enrollmentId == "new")
    }

    @Test func everyCallIsAnAllowedEnrollmentMethod() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepRequired", mrzStep))
        let calls = [
            try s.call(for: .submit(step: "NFC_MRZ", payload: ["mrz": .string(mrzAnna)])), try s.call(for: .cancel),
        ]
        for c in calls.compactMap({ $0 }) { #expect(KioskSession.allowedMethods.contains(c.method)) }
        #expect(!KioskSession.allowedMethods.contains("passkey.authenticate"))
        #expect(!KioskSession.allowedMethods.contains("credentials.list"))
    }

    @Test func submitOnlyForTheStepAskedFor() throws {
        var s = try started()
        #expect(throws: TesseraError.self) { try s.call(for: .submit(step: "NFC_MRZ", payload: ["can": "123456"])) }
        _ = s.apply(note("enrollment.stepRequired", mrzStep))
        #expect(throws: TesseraError.self) { try s.call(for: .submit(step: "PASSKEY_CREATION", payload: ["pin": "1"])) }
        #expect(throws: TesseraError.self) { try s.call(for: .retry) }
        let call = try s.call(for: .submit(step: "NFC_MRZ", payload: ["can": "123456"]))
        #expect(call?.method == "enrollment.submit")
        #expect(call?.params["stepKey"] == "NFC_MRZ")
    }

    @Test func theStepsFormComesFromItsSchema() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepRequired", mrzStep))
        let v = s.view
        #expect(v["screen"] == "NFC_MRZ")
        #expect(v["kind"] == "form")
        let alts = v["form"]?["alternatives"]?.arrayValue ?? []
        #expect(alts.count == 3)
        #expect(alts[0].arrayValue?.compactMap { $0["name"]?.stringValue } == ["mrz"])
        #expect(
            alts[1].arrayValue?.compactMap { $0["name"]?.stringValue } == [
                "documentNumber", "dateOfBirth", "dateOfExpiry",
            ])
        #expect(alts[2].arrayValue?.first?["secret"] == true)
    }

    @Test func aStepWithImagesIsTheCamera() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepRequired", faceStep))
        #expect(s.view["kind"] == "camera")
        #expect(s.view["screen"] == "FACE_MATCHING")
        #expect(s.view["form"]?["alternatives"]?.arrayValue?.first?.arrayValue == [])
        #expect(s.view["form"]?["imageField"] == "images")
    }

    @Test func documentProgressThenPortraitAndResult() throws {
        var s = try started()
        _ = s.apply(note("enrollment.busy", ["enrollmentId": "e1", "step": "NFC_PHASE", "expectedInterval": "long"]))
        #expect(s.view["kind"] == "document")
        _ = s.apply(
            note(
                "enrollment.progress",
                ["enrollmentId": "e1", "step": "NFC_PHASE", "progress": ["step": "waitingForCard"]]))
        #expect(s.view["progress"]?["waitingForCard"] == true)
        for read in [0, 600, 1200] {
            _ = s.apply(
                note(
                    "enrollment.progress",
                    [
                        "enrollmentId": "e1", "step": "NFC_PHASE",
                        "progress": [
                            "step": "read", "file": "DG2", "bytesRead": .number(Double(read)), "totalBytes": 1200,
                        ],
                    ]))
        }
        let files = s.view["progress"]?["files"]?.arrayValue ?? []
        #expect(files.count == 1)
        #expect(files.first?["bytesRead"] == 1200)
        #expect(s.view["progress"]?["waitingForCard"] == false)
        // Another enrollment's notifications are not this station's.
        #expect(s.apply(note("enrollment.stepCompleted", ["enrollmentId": "e9", "key": "NFC_PHASE"])) == [])
        #expect(
            s.apply(note("enrollment.stepCompleted", ["enrollmentId": "e1", "key": "NFC_PHASE", "index": 1]))
                == [.fetchTransactionData])
        s.transactionData([
            "enrollmentId": "e1", "data": ["facePortrait": ["mediaType": "image/jpeg", "data": "/9j/"]],
        ])
        let done = s.apply(
            note(
                "enrollment.finished",
                [
                    "enrollmentId": "e1", "outcome": "success",
                    "document": ["surname": "ERIKSSON", "givenNames": "ANNA MARIA", "dateOfBirth": "1974-08-12"],
                    "credential": ["rpId": "badge.example.com", "credentialId": "abc", "publicKey": "pk"],
                ]))
        #expect(done == [.finished(outcome: "success", errorCode: nil)])
        let v = s.view
        #expect(v["screen"] == "done")
        #expect(v["result"]?["surname"] == "ERIKSSON")
        #expect(v["result"]?["dateOfBirth"] == nil)
        #expect(v["portrait"]?["data"] == "/9j/")
        #expect(!s.enrollmentActive)
    }

    @Test func retryableFailureOffersRetryAndCardHints() throws {
        var s = try started()
        _ = s.apply(
            note(
                "enrollment.finished",
                [
                    "enrollmentId": "e1", "outcome": "failedWithRetryPossibility", "step": "NFC_PHASE",
                    "error": ["code": "CARD_REMOVED", "message": "the card was removed", "retryable": true],
                ]))
        #expect(s.view["screen"] == "error")
        #expect(s.view["error"]?["retryable"] == true)
        // The page words it from its catalogue by code; the daemon's message is not on the screen's view.
        #expect(s.view["error"]?["code"] == "CARD_REMOVED")
        #expect(KioskCatalogues.message("error.CARD_REMOVED", language: "en")?.contains("reader") == true)
        #expect(s.enrollmentActive)
        #expect(try s.call(for: .retry) == KioskCall(method: "enrollment.retry", params: [:]))
        // Not retryable: only start over.
        var f = try started()
        _ = f.apply(
            note(
                "enrollment.finished",
                [
                    "enrollmentId": "e1", "outcome": "failed",
                    "error": ["code": "DOCUMENT_NOT_AUTHENTIC", "message": "x"],
                ]))
        #expect(f.view["error"]?["retryable"] == false)
        #expect(throws: TesseraError.self) { try f.call(for: .retry) }
        #expect(try f.call(for: .restart) == nil)
        #expect(f.view["screen"] == "start")
    }

    @Test func aRejectedAnswerStaysOnItsStep() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepRequired", mrzStep))
        let action = KioskAction.submit(step: "NFC_MRZ", payload: ["can": "000000"])
        _ = try s.call(for: action)
        s.callFailed(action, TesseraError(.otpInvalid, "wrong code", details: ["attemptsLeft": 2]))
        #expect(s.view["screen"] == "NFC_MRZ")
        #expect(s.view["answerError"]?["code"] == "OTP_INVALID")
        #expect(s.view["answerError"]?["attemptsLeft"] == 2)
    }

    @Test func aRefusedCaptureAsksAgainEvenAfterTheDaemonWasBusy() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepRequired", faceStep))
        let action = KioskAction.submit(step: "FACE_MATCHING", payload: ["images": []])
        _ = try s.call(for: action)
        _ = s.apply(
            note("enrollment.busy", ["enrollmentId": "e1", "step": "FACE_MATCHING", "expectedInterval": "short"]))
        #expect(s.view["kind"] == "working")
        s.callFailed(action, TesseraError(.invalidInput, "no face", retryable: true))
        #expect(s.view["kind"] == "camera")
        #expect(s.view["answerError"]?["code"] == "INVALID_INPUT")
        // The same busy, handled after the refusal, is stale.
        _ = s.apply(
            note("enrollment.busy", ["enrollmentId": "e1", "step": "FACE_MATCHING", "expectedInterval": "short"]))
        #expect(s.view["kind"] == "camera")
        _ = try s.call(for: action)
        _ = s.apply(
            note("enrollment.busy", ["enrollmentId": "e1", "step": "FACE_MATCHING", "expectedInterval": "short"]))
        #expect(s.view["kind"] == "working")
    }

    @Test func aPortraitOfAnEnrollmentThatEndedIsDropped() throws {
        // e1's chip was read; its transactionData answer is still on its way when e1 is cancelled and the next
        // person starts e2 and finishes it: e1's portrait never shows on e2's result screen.
        var s = try started()
        #expect(
            s.apply(note("enrollment.stepCompleted", ["enrollmentId": "e1", "key": "NFC_PHASE", "index": 1]))
                == [.fetchTransactionData])
        _ = s.apply(note("enrollment.finished", ["enrollmentId": "e1", "outcome": "cancelled"]))
        _ = try s.call(for: .start(activationToken: nil))
        try s.started(["enrollmentId": "e2", "workflow": "w", "steps": ["NFC_MRZ", "NFC_PHASE", "PASSKEY_CREATION"]])
        let stale: JSONValue = [
            "enrollmentId": "e1", "data": ["facePortrait": ["mediaType": "image/jpeg", "data": "/9j/FIRST"]],
        ]
        s.transactionData(stale)
        // An answer without an enrollment id is nobody's.
        s.transactionData(["data": ["facePortrait": ["mediaType": "image/jpeg", "data": "/9j/NOBODY"]]])
        _ = s.apply(note("enrollment.finished", ["enrollmentId": "e2", "outcome": "success", "document": [:]]))
        #expect(s.view["screen"] == "done")
        #expect(s.view["portrait"] == nil)
        // After a wipe, no enrollment is shown: nothing is taken.
        s.wipe(notice: nil)
        s.transactionData(stale)
        #expect(!String(decoding: s.view.serialized(), as: UTF8.self).contains("FIRST"))
    }

    @Test func wipeLeavesNoPersonalData() throws {
        var s = try started()
        _ = s.apply(note("enrollment.stepCompleted", ["enrollmentId": "e1", "key": "NFC_PHASE", "index": 1]))
        s.transactionData(
            ["enrollmentId": "e1", "data": ["facePortrait": ["mediaType": "image/jpeg", "data": "/9j/PORTRAIT"]]])
        _ = s.apply(
            note(
                "enrollment.finished",
                [
                    "enrollmentId": "e1", "outcome": "success",
                    "document": ["surname": "ERIKSSON", "givenNames": "ANNA"],
                ]))
        #expect(s.waitsForPerson)
        s.wipe(notice: "idle")
        let text = String(decoding: s.view.serialized(), as: UTF8.self)
        #expect(!text.contains("ERIKSSON"))
        #expect(!text.contains("PORTRAIT"))
        #expect(s.view["screen"] == "start")
        #expect(s.enrollmentId == nil)
        // A cancel notification wipes too.
        var c = try started()
        _ = c.apply(note("enrollment.stepRequired", mrzStep))
        _ = c.apply(note("enrollment.finished", ["enrollmentId": "e1", "outcome": "cancelled"]))
        #expect(c.view["screen"] == "start")
        #expect(!c.waitsForPerson)
    }

    @Test func actionsFromThePage() throws {
        #expect(try KioskAction(json: ["action": "start", "activationToken": "  "]) == .start(activationToken: nil))
        #expect(
            try KioskAction(json: ["action": "submit", "step": "X", "payload": ["a": 1]])
                == .submit(step: "X", payload: ["a": 1]))
        #expect(throws: TesseraError.self) { try KioskAction(json: ["action": "call", "method": "credentials.list"]) }
        #expect(throws: TesseraError.self) {
            try KioskAction(json: ["action": "submit", "step": "X", "payload": "no"])
        }
    }

    @Test func mrzIsCheckedAsTyped() {
        #expect(KioskInputCheck.check(["mrz": "P<UTOERIKSSON"])["complete"] == false)
        #expect(KioskInputCheck.check(["mrz": "P<UTOERIKSSON"])["message"] == "13 of 88 characters")
        #expect(KioskInputCheck.check(["mrz": "I<UTOD23145890"])["message"] == "14 of 90 characters")
        #expect(KioskInputCheck.check(["mrz": "p<uto eriksson"])["valid"] == false)
        #expect(KioskInputCheck.check(["mrz": .string(mrzAnna)])["valid"] == true)
        // A wrong document number check digit (6 for 5) is named once the lines are complete.
        let wrong = mrzAnna.replacing("L898902C36", with: "L898902C35")
        let r = KioskInputCheck.check(["mrz": .string(wrong)])
        #expect(r["complete"] == true)
        #expect(r["valid"] == false)
        #expect(r["message"]?.stringValue?.contains("check digit") == true)
        #expect(KioskInputCheck.check(["mrz": "P<UTO%"])["message"]?.stringValue?.contains("'%'") == true)
        #expect(
            KioskInputCheck.check(["documentNumber": "L898902C3", "dateOfBirth": "740812", "dateOfExpiry": "1204"])[
                "complete"] == false)
        #expect(
            KioskInputCheck.check(["documentNumber": "L898902C3", "dateOfBirth": "741312", "dateOfExpiry": "120415"])[
                "field"] == "dateOfBirth")
        #expect(
            KioskInputCheck.check(["documentNumber": "L898902C3", "dateOfBirth": "740812", "dateOfExpiry": "120415"])[
                "valid"] == true)
        #expect(KioskInputCheck.check(["can": "12345"])["complete"] == false)
        #expect(KioskInputCheck.check(["can": "123456"])["valid"] == true)
    }
}
