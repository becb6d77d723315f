import TesseraCore

/// The message catalogues of the station's page: every text a person reads, keyed by step and field (`start.title`,
/// `step.NFC_MRZ.help`, `field.dateOfBirth`, `stage.photo`, `error.ACCESS_DENIED`, …), one catalogue per language.
/// A workflow may override any key per language (`messages` in its config). Adding a language is adding one
/// `KioskCatalogue+CODE.swift` file and naming it in `sources`; every catalogue has every key (a test).
public enum KioskCatalogues {
    /// The language the page starts in when neither `--language` nor the browser's Accept-Language names one.
    public static let fallback = "en"

    /// Each catalogue's JSON text: `{language, name (in its own language), dateOrder ("DMY", "MDY" or "YMD"),
    /// messages: {key: text}}`.
    static let sources = [english, german]

    /// The parsed catalogues by language code. A catalogue that does not parse is a build defect (the unit tests
    /// parse every one), so it is left out rather than taking the station down.
    static let catalogues: [(code: String, json: JSONValue)] = sources.compactMap { text in
        guard let json = try? JSONValue.parse(Array(text.utf8)), let code = json["language"]?.stringValue else {
            return nil
        }
        return (code, json)
    }

    /// The language codes there is a catalogue for, in the order of the language buttons.
    public static var languages: [String] { catalogues.map(\.code) }

    /// The language to start in: `forced` (the station's `--language`) when there is a catalogue for it, else the
    /// first language of `acceptLanguage` (an HTTP Accept-Language value, by quality) that has one, else `fallback`.
    public static func choose(acceptLanguage: String?, forced: String?) -> String {
        let known = Set(languages)
        if let forced, known.contains(forced) { return forced }
        var ranked: [(code: String, q: Double, order: Int)] = []
        for (i, item) in (acceptLanguage ?? "").split(separator: ",").enumerated() {
            let parts = item.split(separator: ";").map { $0.filter { !$0.isWhitespace } }
            guard let tag = parts.first?.lowercased(), !tag.isEmpty else { continue }
            var q = 1.0
            for p in parts.dropFirst() where p.hasPrefix("q=") { q = Double(p.dropFirst(2)) ?? 0 }
            let code = String(tag.split(separator: "-").first ?? "")
            if q > 0, known.contains(code) { ranked.append((code, q, i)) }
        }
        return ranked.sorted { $0.q != $1.q ? $0.q > $1.q : $0.order < $1.order }.first?.code ?? fallback
    }

    /// `GET /catalogues.json`: `{languages: [{code, name}], catalogues: {code: catalogue}}`.
    static let json: [UInt8] = {
        let list: [JSONValue] = catalogues.map {
            ["code": .string($0.code), "name": $0.json["name"] ?? .string($0.code)]
        }
        var all: [String: JSONValue] = [:]
        for c in catalogues { all[c.code] = c.json }
        let o: JSONValue = ["languages": .array(list), "catalogues": .object(all)]
        return o.serialized()
    }()
}

extension KioskCatalogues {
    /// The text of `key` in `language` (else in `fallback`), without filling in its `{name}`s.
    static func message(_ key: String, language: String) -> String? {
        for code in [language, fallback] {
            if let text = catalogues.first(where: { $0.code == code })?.json["messages"]?[key]?.stringValue {
                return text
            }
        }
        return nil
    }
}
