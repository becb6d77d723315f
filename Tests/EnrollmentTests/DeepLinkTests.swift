import Enrollment
import Testing

@Suite struct DeepLinkTests {
    @Test(arguments: [
        ("tessera://phone-binding?otp=123456", EnrollmentDeepLink.otp(.phone, code: "123456")),
        ("tessera://email-binding?otp=004711", .otp(.email, code: "004711")),
        ("TESSERA://Phone-Binding/?otp=123456", .otp(.phone, code: "123456")),
        ("tessera://phone-binding?otp=%31%32%33456", .otp(.phone, code: "123456")),
        ("tessera://phone-binding?utm_source=sms&otp=123456#top", .otp(.phone, code: "123456")),
        ("tessera://phone-binding?otp=12%2034", .otp(.phone, code: "12 34")),
        ("tessera://enroll?token=eyJh.eyJp.c2ln", .enroll(token: "eyJh.eyJp.c2ln", force: false)),
        ("tessera://enroll?token=eyJh.eyJp.c2ln&force=true", .enroll(token: "eyJh.eyJp.c2ln", force: true)),
        ("tessera://enroll?force=false&token=a-b_c", .enroll(token: "a-b_c", force: false)),
        ("tessera://enroll?token=a%2Eb%2ec", .enroll(token: "a.b.c", force: false)),
    ])
    func parsed(url: String, link: EnrollmentDeepLink) {
        #expect(EnrollmentDeepLink(url: url) == link)
    }

    @Test(arguments: [
        "",
        "tessera://",
        "https://phone-binding?otp=123456",
        "tessera:phone-binding?otp=123456",
        "tessera:/phone-binding?otp=123456",
        "tesserax://phone-binding?otp=123456",
        "tessera://sms-binding?otp=123456",
        "tessera://phone-binding",
        "tessera://phone-binding?",
        "tessera://phone-binding?otp=",
        "tessera://phone-binding?otp",
        "tessera://phone-binding?code=123456",
        "tessera://phone-binding?otp=123456&otp=654321",
        "tessera://phone-binding?otp=1&o%74p=2",  // a repeat spelled differently
        "tessera://phone-binding/extra?otp=123456",
        "tessera://user@phone-binding?otp=123456",
        "tessera://phone-binding?otp=12%3",
        "tessera://phone-binding?otp=12%zz34",
        "tessera://phone-binding?otp=%FF%FE",  // not UTF-8
        "tessera://enroll",
        "tessera://enroll?force=true",
        "tessera://enroll?token=abc&force=yes",
        "tessera://enroll?token=abc&force=TRUE",
        "tessera://enroll?token=abc&token=def",
        "tessera://enroll?token=abc&force=true&force=false",
    ])
    func refused(url: String) {
        #expect(EnrollmentDeepLink(url: url) == nil)
    }

    @Test func channels() {
        #expect(EnrollmentDeepLink.Channel(rawValue: "phone") == .phone)
        #expect(EnrollmentDeepLink.Channel.email.rawValue == "email")
    }
}
