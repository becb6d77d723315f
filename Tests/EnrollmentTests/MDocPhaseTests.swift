import CBOR
import MRZ
import TesseraCore
import Testing

@testable import Enrollment
@testable import MDoc

@Suite struct MDocPhaseTests {
    func parse(_ text: String) throws(TesseraError) -> EnrollmentConfiguration {
        try EnrollmentConfiguration(json: try JSONValue.parse(Array(text.utf8)))
    }

    // MARK: workflow validation

    @Test func mdocPhaseStandsWhereNFCPhaseDoes() throws {
        let c = try parse(
            """
            {"workflows": {"mdl": {"remote": true, "expected": {"surname": "MUSTERMANN"},
               "steps": [{"key": "MDOC_PHASE", "reader": "r0", "cardWaitSeconds": 5,
                          "elements": ["portrait", "org.iso.18013.5.1.aamva/DHS_compliance"]},
                         "ATTRIBUTE_MATCHING", {"key": "PASSKEY_CREATION", "rpId": "example.com"}]},
                           "both": {"remote": true, "steps": ["NFC_MRZ", "NFC_PHASE", "MDOC_PHASE", "ATTRIBUTE_MATCHING"]}}}
            """)
        let w = try #require(c.workflow(named: "mdl"))
        #expect(w.steps.map(\.kind) == [.mdocPhase, .attributeMatching, .passkeyCreation])
        #expect(w.needs == ["document", "token"])
        #expect(w.steps[0].kind.performedBy == "daemon")
        #expect(!w.needsActivationToken)
        #expect(try #require(c.workflow(named: "both")).steps.map(\.kind).contains(.mdocPhase))
        let elements = EnrollmentEngine.mdocElements(w.steps[0])
        #expect(elements[MDL.namespace] == DocumentAttributes.mdlElements + ["portrait"])
        #expect(elements["org.iso.18013.5.1.aamva"] == ["DHS_compliance"])
        #expect(
            EnrollmentEngine.mdocElements(WorkflowStep(key: "MDOC_PHASE", kind: .mdocPhase, settings: [:])) == [
                MDL.namespace: DocumentAttributes.mdlElements
            ])
    }

    @Test func mdocPhaseIsNotACustomStep() {
        #expect(throws: TesseraError.self) { _ = try WorkflowStep.custom(["key": "MDOC_PHASE"]) }
    }

    // MARK: country codes

    @Test func alpha2MapsToTheDoc9303Code() {
        // ISO 3166-1: 249 officially assigned codes.
        #expect(CountryCodes.alpha3.count == 249)
        #expect(Set(CountryCodes.alpha3.values).count == 249)
        #expect(CountryCodes.alpha3.allSatisfy { $0.key.utf8.count == 2 && $0.value.utf8.count == 3 })
        #expect(CountryCodes.docCode(alpha2: "FR") == "FRA")
        #expect(CountryCodes.docCode(alpha2: "US") == "USA")
        #expect(CountryCodes.docCode(alpha2: "GB") == "GBR")
        #expect(CountryCodes.docCode(alpha2: "NL") == "NLD")
        #expect(CountryCodes.docCode(alpha2: "AX") == "ALA")
        #expect(CountryCodes.docCode(alpha2: "SS") == "SSD")
        // Doc 9303 writes Germany as "D"; ICAO's specimen state Utopia is "UTO".
        #expect(CountryCodes.docCode(alpha2: "DE") == "D")
        #expect(CountryCodes.alpha3["DE"] == "DEU")
        #expect(CountryCodes.docCode(alpha2: "UT") == "UTO")
        #expect(CountryCodes.docCode(alpha2: "ZZ") == nil)
        #expect(CountryCodes.docCode(alpha2: "fr") == nil)
        #expect(CountryCodes.docCode(alpha2: "FRA") == nil)
    }

    // MARK: mDL elements → attributes

    static let sample: [String: CBORValue] = [
        "family_name": "Müller", "given_name": "Erika Anna", "birth_date": MDocDate.fullDate("1964-08-12"),
        "document_number": "t2200-0129", "issuing_country": "DE", "expiry_date": .tagged(0, "2034-01-14T00:00:00Z"),
        "sex": 2, "nationality": "FR", "portrait": .byteString([0xFF, 0xD8]),
    ]

    @Test func mdlElementsMapToDocumentAttributes() throws {
        let a = try DocumentAttributes(mdl: Self.sample, docType: MDL.docType)
        #expect(
            a
                == DocumentAttributes(
                    surname: "Müller", givenNames: "Erika Anna", documentNumber: "t2200-0129", issuingState: "D",
                    nationality: "FRA", dateOfBirth: "1964-08-12", dateOfExpiry: "2034-01-14", sex: "F",
                    documentType: MDL.docType))
        #expect(try DocumentAttributes(json: a.json) == a)
        var minimal = Self.sample
        for k in ["expiry_date", "sex", "nationality"] { minimal[k] = nil }
        let m = try DocumentAttributes(mdl: minimal, docType: MDL.docType)
        #expect(m.dateOfExpiry == nil && m.sex == nil && m.nationality == nil)
        #expect(try DocumentAttributes(json: m.json) == m)
        for (code, sex) in [(1, "M"), (0, "X"), (9, "X")] {
            var e = Self.sample
            e["sex"] = .unsigned(UInt64(code))
            #expect(try DocumentAttributes(mdl: e, docType: MDL.docType).sex == sex)
        }
    }

    @Test(
        arguments: [
            ("family_name", nil, "family_name"), ("birth_date", nil, "birth_date"),
            ("birth_date", CBORValue.textString("12.08.1964"), "birth_date"),
            ("birth_date", MDocDate.fullDate("1964-02-30"), "birth_date"),
            ("birth_date", CBORValue.tagged(1, .unsigned(0)), "birth_date"),
            ("issuing_country", CBORValue.textString("XX"), "issuing_country"),
            ("issuing_country", CBORValue.textString("DEU"), "issuing_country"),
            ("document_number", nil, "document_number"),
            ("sex", CBORValue.unsigned(3), "sex"), ("expiry_date", CBORValue.unsigned(2034), "expiry_date"),
            ("given_name", CBORValue.unsigned(1), "given_name"),
        ] as [(String, CBORValue?, String)])
    func malformedElementsAreNamed(_ id: String, _ value: CBORValue?, _ named: String) {
        var e = Self.sample
        e[id] = value
        #expect {
            _ = try DocumentAttributes(mdl: e, docType: MDL.docType)
        } throws: { error in
            (error as? TesseraError)?.code == .malformedData
                && (error as? TesseraError)?.details["element"] == .string(named)
        }
    }

    // MARK: matching

    static let reference = MRZDate(year: 2026, month: 11, day: 27)!

    func mismatches(_ expected: ExpectedAttributes) throws -> [String] {
        let a = try DocumentAttributes(mdl: Self.sample, docType: MDL.docType)
        return AttributeMatcher.compare(expected, with: a, relativeTo: Self.reference).map(\.attribute)
    }

    @Test func matchingAttributesMatch() throws {
        #expect(
            try mismatches(
                ExpectedAttributes(
                    surname: "MUELLER", givenNames: "erika anna", documentNumber: "T22000129", nationality: "FRA",
                    issuingState: "DEU", dateOfBirth: "1964-08-12", dateOfExpiry: "2034-01-14", sex: "F")) == [])
        // Transliteration either way, Doc 9303's "D".
        #expect(try mismatches(ExpectedAttributes(surname: "Müller", issuingState: "D")) == [])
        #expect(try mismatches(ExpectedAttributes(surname: "MULLER", givenNames: "Erika  Anna")) == [])
    }

    @Test func mismatchingAttributesAreReported() throws {
        #expect(
            try mismatches(
                ExpectedAttributes(
                    surname: "MUSTERMANN", givenNames: "ERIKA", documentNumber: "T22000128", nationality: "DEU",
                    issuingState: "FRA", dateOfBirth: "1964-08-13", dateOfExpiry: "2034-01-15", sex: "M",
                    documentType: "P"))
                == [
                    "surname", "givenNames", "documentNumber", "nationality", "issuingState", "dateOfBirth",
                    "dateOfExpiry", "sex", "documentType",
                ])
        let a = try DocumentAttributes(mdl: Self.sample, docType: MDL.docType)
        let shown = AttributeMatcher.compare(
            ExpectedAttributes(surname: "Schmidt"), with: a, relativeTo: Self.reference)
        #expect(shown == [AttributeMismatch(attribute: "surname", expected: "SCHMIDT", actual: "MUELLER")])
        // No truncation rule: the mDL's full name must be the expected one.
        #expect(try mismatches(ExpectedAttributes(surname: "MUELLERSCHMIDT")) == ["surname"])
        // Absent optional elements do not match an expectation.
        var minimal = Self.sample
        for k in ["expiry_date", "sex", "nationality"] { minimal[k] = nil }
        let m = try DocumentAttributes(mdl: minimal, docType: MDL.docType)
        #expect(
            AttributeMatcher.compare(
                ExpectedAttributes(nationality: "FRA", dateOfExpiry: "2034-01-14", sex: "F"), with: m,
                relativeTo: Self.reference
            ).map(\.actual) == ["", "", ""])
        // A birth date in the future never matches.
        var future = Self.sample
        future["birth_date"] = MDocDate.fullDate("2030-01-01")
        let f = try DocumentAttributes(mdl: future, docType: MDL.docType)
        #expect(
            AttributeMatcher.compare(ExpectedAttributes(dateOfBirth: "2030-01-01"), with: f, relativeTo: Self.reference)
                .map(\.attribute) == ["dateOfBirth"])
    }

    @Test func summaryFeedsTheIdentityBinding() throws {
        let a = try DocumentAttributes(mdl: Self.sample, docType: MDL.docType)
        let summary = JSONValue.object(a.summary(Self.verification(.authentic)))
        let identity = try #require(DocumentIdentity(summary: summary))
        #expect(
            identity
                == DocumentIdentity(
                    issuingState: "D", documentType: MDL.docType, documentNumber: "T22000129", surname: "MUELLER",
                    givenNames: "ERIKA ANNA", birthDate: "1964-08-12"))
        #expect(summary["verdict"] == "authentic")
    }

    static func verification(_ verdict: MDocVerification.Verdict) -> MDocVerification {
        MDocVerification(
            docType: MDL.docType, verdict: verdict, reasons: verdict == .authentic ? [] : [.untrustedIssuer],
            issuerSignature: .valid, certificateChain: verdict == .authentic ? .valid : .invalid, digests: .valid,
            validity: .valid, deviceAuthentication: .valid, deviceAuthenticationKind: "deviceSignature", elements: [],
            documentSigner: nil, mso: nil)
    }

    @Test func aNotAuthenticMDLFailsWithItsReasons() {
        let e = Self.verification(.notAuthentic).notAuthenticError
        #expect(e.code == .documentNotAuthentic)
        #expect(e.details["verdict"] == "notAuthentic")
        #expect(e.details["reasons"] == ["UNTRUSTED_ISSUER"])
    }
}
