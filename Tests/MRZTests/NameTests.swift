import MRZ
import Testing

@Suite struct NameTests {
    /// Doc 9303 Part 3 §6 recommended transliterations and Part 4 §4.6 punctuation rules.
    @Test(arguments: [
        ("Gößmann", "GOESSMANN"),
        ("Müller", "MUELLER"),
        ("Hämäläinen", "HAEMAELAEINEN"),
        ("Ångström", "AANGSTROEM"),
        ("Ørsted", "OERSTED"),
        ("Ægir", "AEGIR"),
        ("Þórunn", "THORUNN"),
        ("Thérèse Cañon", "THERESE<CANON"),
        ("Œdipe", "OEDIPE"),
        ("IJsselmeer", "IJSSELMEER"),
        ("Ĳssel", "IJSSEL"),
        ("Łukasz Żółć", "LUKASZ<ZOLC"),
        ("Đorđe Ðuric", "DORDE<DURIC"),
        ("Marie-Elise", "MARIE<ELISE"),
        ("D'Artagnan", "DARTAGNAN"),
        ("O’Brien", "OBRIEN"),
        ("Anna  Maria ", "ANNA<MARIA"),
        ("Jean – Luc", "JEAN<LUC"),
        ("St. John", "ST<JOHN"),
        ("Nguyễn Thị", "NGUYEN<THI"),
        ("Mu\u{308}ller", "MUELLER"),
        ("ERIKSSON<<ANNA<MARIA<<<<<<<", "ERIKSSON<<ANNA<MARIA"),
        ("<<Anna<<<<Maria", "ANNA<<MARIA"),
        ("Иван", ""),
        ("R2-D2", "R<D"),
    ])
    func mrzFillerForm(input: String, expected: String) {
        #expect(MRZ.normalizeName(input) == expected)
        #expect(MRZ.normalizeName(input, form: .mrzFiller) == expected)
    }

    @Test func comparableForm() throws {
        #expect(MRZ.comparableName("Müller-Lüdenscheidt, Ånna") == "MUELLER LUEDENSCHEIDT AANNA")
        #expect(MRZ.normalizeName("ERIKSSON<<ANNA<MARIA", form: .comparable) == "ERIKSSON ANNA MARIA")
        let m = try MRZ(Specimen.td3)
        #expect(MRZ.comparableName("Anna-María") == MRZ.comparableName(m.secondaryIdentifier))
        #expect(MRZ.comparableName("eriksson") == m.primaryIdentifier)
    }
}

@Suite struct DiacriticFoldingTests {
    /// What Foundation's `folding(options: .diacriticInsensitive, locale: nil)` gave, for the names a kiosk compares:
    /// marks go, letters that are not a base letter with a mark (Ø, Æ, ß) stay.
    @Test func marksAreRemovedAndOtherLettersKept() {
        #expect(MRZ.withoutDiacritics("Müller-Lüdenscheidt") == "Muller-Ludenscheidt")
        #expect(MRZ.withoutDiacritics("Ånna María Ǘ") == "Anna Maria U")
        #expect(MRZ.withoutDiacritics("E\u{301}lodie") == "Elodie")
        #expect(MRZ.withoutDiacritics("Øre Æsir Straße") == "Øre Æsir Straße")
        #expect(MRZ.comparableName(MRZ.withoutDiacritics("Müller")) == "MULLER")
    }
}
