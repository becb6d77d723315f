// The standard library's own canonical decomposition (FoundationEssentials has no
// `decomposedStringWithCanonicalMapping`; full Foundation's is ICU's).
@_spi(_Unicode) import Swift

extension MRZ {
    /// Output shape of `normalizeName(_:form:)`.
    public enum NameForm: Sendable {
        /// As the MRZ prints it: A–Z with '<' between name components, e.g. "ANNA<MARIA".
        case mrzFiller
        /// Components separated by single spaces, e.g. "ANNA MARIA": compare this form of both sides.
        case comparable
    }

    /// Normalises a name (visual-zone text, user input or MRZ text) for the MRZ or for matching:
    /// - Latin letters with diacritics follow the Doc 9303 Part 3 §6 recommended transliteration
    ///   (Ä→AE, Å→AA, Æ→AE, Ö→OE, Ø→OE, Ü→UE, ß→SS, Þ→TH, Œ→OE, Ĳ→IJ, Ð/Đ→D, Ł→L, others lose the mark:
    ///   É→E, Ñ→N, Ç→C, …), then upper case;
    /// - spaces, hyphens and commas separate components (one '<'), apostrophes are dropped
    ///   (Doc 9303 Part 4 §4.6: D'ARTAGNAN → DARTAGNAN), other punctuation, digits and non-Latin
    ///   characters are dropped;
    /// - '<' already present is kept (at most "<<", the primary/secondary separator); fillers at either end are removed.
    public static func normalizeName(_ name: String, form: NameForm = .mrzFiller) -> String {
        var out = ""
        var pendingFillers = 0
        var pendingSeparator = false
        func emit(_ letters: String) {
            if !out.isEmpty && (pendingFillers > 0 || pendingSeparator) {
                out += String(repeating: "<", count: max(1, min(2, pendingFillers)))
            }
            pendingFillers = 0
            pendingSeparator = false
            out += letters
        }
        for ch in name.uppercased() {
            if let a = ch.asciiValue {
                switch a {
                case 0x41...0x5A: emit(String(ch))
                case filler: pendingFillers += 1
                case 0x20, 0x09, 0x0A, 0x0D, 0x2C, 0x2D: pendingSeparator = true
                default: break  // apostrophe, other punctuation, digits
                }
                continue
            }
            if ch.isWhitespace || separatorCharacters.contains(ch) { pendingSeparator = true; continue }
            if apostropheCharacters.contains(ch) { continue }
            if let mapped = transliteration[ch] { emit(mapped); continue }
            // Fallback for Latin letters not listed: canonical decomposition, keep the A–Z base letter.
            let base = String(ch)._nfd.filter { ("A"..."Z").contains($0) }
            if !base.isEmpty { emit(String(String.UnicodeScalarView(base))) }
        }
        switch form {
        case .mrzFiller: return out
        case .comparable: return out.split(separator: "<").joined(separator: " ")
        }
    }

    /// `name` without its diacritics: canonically decomposed, combining marks removed ("Müller" → "Muller", "Ø" stays),
    /// as Foundation's diacritic-insensitive folding gave.
    public static func withoutDiacritics(_ name: String) -> String {
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: name._nfd.filter { $0.properties.generalCategory != .nonspacingMark })
        return String(scalars)
    }

    /// `normalizeName(name, form: .comparable)`: e.g. "Müller-Lüdenscheidt, Ånna" → "MUELLER LUEDENSCHEIDT AANNA".
    public static func comparableName(_ name: String) -> String { normalizeName(name, form: .comparable) }

    static let separatorCharacters: Set<Character> = [
        "\u{2010}", "\u{2011}", "\u{2012}", "\u{2013}", "\u{2014}",
        "\u{2015}", "\u{2212}", "\u{00A0}",
    ]
    static let apostropheCharacters: Set<Character> = ["\u{2018}", "\u{2019}", "\u{02BC}", "\u{00B4}", "\u{0060}"]

    /// Doc 9303 Part 3 §6 (Latin-based national characters), upper-case keys.
    static let transliteration: [Character: String] = {
        let groups: [(String, String)] = [
            ("ÀÁÂÃĀĂĄǍ", "A"), ("Ä", "AE"), ("Å", "AA"), ("Æ", "AE"),
            ("ÇĆĈĊČ", "C"), ("ÐĎĐ", "D"), ("ÈÉÊËĒĔĖĘĚ", "E"), ("ĜĞĠĢ", "G"), ("ĤĦ", "H"),
            ("ÌÍÎÏĨĪĬĮİ", "I"), ("Ĳ", "IJ"), ("Ĵ", "J"), ("Ķ", "K"), ("ĹĻĽĿŁ", "L"), ("ÑŃŅŇŊ", "N"),
            ("ÒÓÔÕŌŎŐ", "O"), ("Ö", "OE"), ("Ø", "OE"), ("Œ", "OE"), ("ŔŖŘ", "R"), ("ŚŜŞŠȘ", "S"), ("ẞ", "SS"),
            ("ŢŤŦȚ", "T"), ("Þ", "TH"), ("ÙÚÛŨŪŬŮŰŲ", "U"), ("Ü", "UE"), ("Ŵ", "W"), ("ÝŶŸ", "Y"), ("ŹŻŽ", "Z"),
        ]
        var table: [Character: String] = [:]
        for (chars, replacement) in groups { for c in chars { table[c] = replacement } }
        return table
    }()
}
