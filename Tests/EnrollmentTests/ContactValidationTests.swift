import Enrollment
import TesseraCore
import Testing

@Suite struct PhoneNumberTests {
    @Test(arguments: [
        ("+49 151 1234 5678", "+4915112345678"),
        ("+1 (555) 010-9999", "+15550109999"),
        ("+44.20.7946.0958", "+442079460958"),
        ("+12", "+12"),
        ("+123456789012345", "+123456789012345"),
    ])
    func accepted(input: String, canonical: String) throws {
        #expect(try ContactValidation.phoneNumber(input) == canonical)
    }

    @Test(arguments: [
        "",
        "015112345678",  // no country code
        "0049 151 12345678",  // international prefix instead of '+'
        "+0151123456",  // country code starting with 0
        "+1",  // one digit
        "+1234567890123456",  // 16 digits
        "+49 151 1234/5678",  // '/' is not removed
        "+49\u{00A0}151",  // only ASCII space is removed
        "+49 151 ١٢٣٤",  // Arabic-Indic digits
        "+49+151",
        "++49151",
        "+49151x",
    ])
    func refused(input: String) {
        let e = expectError(.invalidInput) { () throws(TesseraError) in try ContactValidation.phoneNumber(input) }
        #expect(e?.details["field"] == "phone")
    }

    @Test func masked() {
        #expect(ContactValidation.maskedPhone("+491511234567") == "+49••••••4567")
        #expect(ContactValidation.maskedPhone("+4915112345678") == "+49•••••••5678")
        #expect(ContactValidation.maskedPhone("+1234567") == "+1••••67")
        #expect(ContactValidation.maskedPhone("+12") == "+1•")
    }
}

@Suite struct EmailAddressTests {
    @Test(arguments: [
        ("anna@example.com", "anna@example.com"),
        ("  Anna.Maria@Example.COM \n", "Anna.Maria@example.com"),
        ("a!#$%&'*+-/=?^_`{|}~z@example.com", "a!#$%&'*+-/=?^_`{|}~z@example.com"),
        ("\"john doe\"@example.com", "\"john doe\"@example.com"),
        ("\"a@b\\\"c\"@example.com", "\"a@b\\\"c\"@example.com"),
        ("user@localhost", "user@localhost"),
        ("user@xn--mller-kva.example", "user@xn--mller-kva.example"),
        ("user@[192.0.2.1]", "user@[192.0.2.1]"),
        ("user@[IPv6:2001:DB8::1]", "user@[IPv6:2001:db8::1]"),
        ("user@[ipv6:2001:db8:0:0:0:0:0:1]", "user@[IPv6:2001:db8:0:0:0:0:0:1]"),
        ("user@[IPv6:::ffff:192.0.2.1]", "user@[IPv6:::ffff:192.0.2.1]"),
        ("user@[IPv6:1:2:3:4:5:6:192.0.2.1]", "user@[IPv6:1:2:3:4:5:6:192.0.2.1]"),
        ("user@[IPv6:::]", "user@[IPv6:::]"),
    ])
    func accepted(input: String, canonical: String) throws {
        #expect(try ContactValidation.emailAddress(input) == canonical)
    }

    @Test(arguments: [
        "",
        "   ",
        "anna",
        "anna@",
        "@example.com",
        "anna@@example.com",
        "a@b@example.com",
        ".anna@example.com",
        "anna.@example.com",
        "an..na@example.com",
        "an na@example.com",
        "anna(comment)@example.com",  // no comments
        "anna @example.com",  // no CFWS
        "müller@example.com",  // RFC 5322 is ASCII
        "\"unterminated@example.com",
        "\"a\"b@example.com",
        "\"bad\\\u{7F}\"@example.com",
        "anna@example..com",
        "anna@.example.com",
        "anna@example.com.",
        "anna@-example.com",
        "anna@example-.com",
        "anna@exa_mple.com",
        "anna@[192.0.2.256]",
        "anna@[192.0.2]",
        "anna@[IPv6:2001:db8::1::2]",
        "anna@[IPv6:1:2:3:4:5:6:7]",
        "anna@[IPv6:1:2:3:4:5:6:7:8:9]",
        "anna@[IPv6:1:2:3:4:5:6::7]",  // "::" stands for at least two groups (RFC 5321)
        "anna@[IPv6:12345::1]",
        "anna@[IPv6:1:2:3:4:5::1.2.3.4]",
        "anna@[tag:content]",
        "anna@[]",
        "anna@[IPv6::]",
    ])
    func refused(input: String) {
        let e = expectError(.invalidInput) { () throws(TesseraError) in try ContactValidation.emailAddress(input) }
        #expect(e?.details["field"] == "email")
    }

    @Test func lengthLimits() throws {
        let local64 = String(repeating: "a", count: 64)
        #expect(try ContactValidation.emailAddress(local64 + "@example.com") == local64 + "@example.com")
        expectError(.invalidInput) { () throws(TesseraError) in
            try ContactValidation.emailAddress(local64 + "a@example.com")
        }

        let label63 = String(repeating: "b", count: 63)
        #expect(try ContactValidation.emailAddress("a@" + label63 + ".com") == "a@" + label63 + ".com")
        expectError(.invalidInput) { () throws(TesseraError) in
            try ContactValidation.emailAddress("a@" + label63 + "b.com")
        }

        // 254 bytes in all: "a@", three 63-byte labels and a 60-byte one, three dots (2 + 189 + 60 + 3).
        let domain254 = [label63, label63, label63, String(repeating: "c", count: 60)].joined(separator: ".")
        let address254 = "a@" + domain254
        #expect(address254.utf8.count == 254)
        #expect(try ContactValidation.emailAddress(address254) == address254)
        expectError(.invalidInput) { () throws(TesseraError) in
            try ContactValidation.emailAddress("ab@" + domain254)
        }
    }

    @Test func masked() {
        #expect(ContactValidation.maskedEmail("anna@example.com") == "a•••@example.com")
        #expect(ContactValidation.maskedEmail("a@example.com") == "a•••@example.com")
        #expect(ContactValidation.maskedEmail("\"john doe\"@example.com") == "j•••@example.com")
    }
}
