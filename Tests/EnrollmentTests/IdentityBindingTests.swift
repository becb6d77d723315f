import Enrollment
import FoundationEssentials
import MRZ
import TesseraCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct IdentityBindingTests {
    let secret = [UInt8](repeating: 7, count: 32)

    var anna: DocumentIdentity { DocumentIdentity(mrz: try! MRZ.parse(Specimen.td3)) }

    @Test func fromTheMRZ() throws {
        let a = anna
        #expect(a.issuingState == "UTO" && a.documentType == "P" && a.documentNumber == "L898902C3")
        #expect(a.birthDate == "1974-08-12" && a.surname.contains("ERIKSSON") && a.givenNames.contains("MARIA"))
    }

    @Test func keepsNoPlainValue() throws {
        let b = IdentityBinding(identity: anna, secret: secret, enrollmentId: "e-1")
        let text = b.text
        for plain in ["L898902C3", "ERIKSSON", "ANNA", "1974", "740812"] { #expect(!text.contains(plain), "\(plain)") }
        #expect(text.contains("\"issuingState\":\"UTO\"") && text.contains("e-1"))
        #expect(IdentityBinding(text: text) == b)
    }

    @Test func matchesTheSamePersonOnly() throws {
        let b = IdentityBinding(identity: anna, secret: secret, enrollmentId: nil)
        #expect(b.mismatches(anna, secret: secret).isEmpty)
        // The enrollment summary's form (comparable names) of the same document matches too.
        let summary: JSONValue = [
            "issuingState": "UTO", "documentType": "P", "documentNumber": "L898902C3",
            "surname": "ERIKSSON", "givenNames": "ANNA MARIA", "dateOfBirth": "1974-08-12",
        ]
        #expect(b.mismatches(try #require(DocumentIdentity(summary: summary)), secret: secret).isEmpty)
        var renewed = anna
        renewed.documentNumber = "X12345678"
        #expect(b.mismatches(renewed, secret: secret) == ["documentNumber"])
        #expect(b.isSamePerson(renewed, secret: secret))
        var other = anna
        other.givenNames = "JOHN"
        other.birthDate = "1980-01-01"
        #expect(b.mismatches(other, secret: secret) == ["names", "birthDate"])
        #expect(!b.isSamePerson(other, secret: secret))
        // Another daemon secret: nothing matches.
        #expect(
            b.mismatches(anna, secret: [UInt8](repeating: 8, count: 32)) == ["documentNumber", "names", "birthDate"])
    }

    @Test func saltsDiffer() {
        let a = IdentityBinding(identity: anna, secret: secret, enrollmentId: nil)
        let b = IdentityBinding(identity: anna, secret: secret, enrollmentId: nil)
        #expect(a.salt != b.salt && a.namesHash != b.namesHash)
    }
}
