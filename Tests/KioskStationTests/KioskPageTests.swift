import RPC
import TesseraCore
import Testing

@testable import KioskStation

/// The station page's words, languages and pictures: the catalogues, the language choice, the plain progress
/// stages, the workflow's own wording, and the keys the as-typed check names.
@Suite struct KioskPageTests {
    private func keys(_ c: JSONValue) -> Set<String> { Set((c["messages"]?.objectValue ?? [:]).keys) }

    /// The `{name}`s a text fills in.
    private func placeholders(_ text: String) -> Set<String> {
        var out: Set<String> = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            out.insert(String(rest[rest.index(after: open)..<close]))
            rest = rest[rest.index(after: close)...]
        }
        return out
    }

    @Test func everyCatalogueParsesAndHasEveryKey() throws {
        #expect(KioskCatalogues.catalogues.count == KioskCatalogues.sources.count)
        #expect(KioskCatalogues.languages == ["en", "de"])
        let english = try #require(KioskCatalogues.catalogues.first { $0.code == "en" }?.json)
        for (code, c) in KioskCatalogues.catalogues {
            #expect(keys(c) == keys(english), "catalogue \(code): \(keys(c).symmetricDifference(keys(english)))")
            #expect(c["name"]?.stringValue?.isEmpty == false)
            #expect(["DMY", "MDY", "YMD"].contains(c["dateOrder"]?.stringValue ?? ""))
            for (key, text) in c["messages"]?.objectValue ?? [:] {
                let s = try #require(text.stringValue, "\(code) \(key)")
                #expect(!s.isEmpty, "\(code) \(key)")
                let theirs = english["messages"]?[key]?.stringValue ?? ""
                #expect(placeholders(s) == placeholders(theirs), "\(code) \(key)")
            }
        }
        #expect(KioskCatalogues.message("language.label", language: "de") == "Sprache")
        let served = try JSONValue.parse(KioskCatalogues.json)
        #expect(served["languages"]?.arrayValue?.map { $0["name"] } == ["English", "Deutsch"])
    }

    /// Every key the page asks for by name (`t('…')`) is in the catalogues; no text of the page is English in
    /// the code itself.
    @Test func thePageUsesOnlyCatalogueKeys() throws {
        let english = keys(try #require(KioskCatalogues.catalogues.first?.json))
        var used: Set<String> = []
        let script = Substring(KioskAssets.script)
        var rest = script
        while let r = rest.firstRange(of: "t('") {
            let after = rest[r.upperBound...]
            guard let end = after.firstIndex(of: "'") else { break }
            // `t(` itself, not `get(` or `Event(`; a key ending in "." is completed at run time (`'stage.' + s`).
            let before = r.lowerBound > script.startIndex ? script[script.index(before: r.lowerBound)] : " "
            let key = String(after[..<end])
            if !(before.isLetter || before.isNumber || before == "_" || before == "."), !key.hasSuffix(".") {
                used.insert(key)
            }
            rest = after[end...]
        }
        #expect(used.count > 40)
        #expect(used.subtracting(english).isEmpty, "\(used.subtracting(english))")
    }

    @Test func theLanguageComesFromTheStationOrTheBrowser() {
        #expect(KioskCatalogues.choose(acceptLanguage: "de-DE,de;q=0.9,en;q=0.8", forced: nil) == "de")
        #expect(KioskCatalogues.choose(acceptLanguage: "fr-FR, en;q=0.5, de;q=0.4", forced: nil) == "en")
        #expect(KioskCatalogues.choose(acceptLanguage: "en;q=0.2, de;q=0.9", forced: nil) == "de")
        #expect(KioskCatalogues.choose(acceptLanguage: "fr", forced: nil) == "en")
        #expect(KioskCatalogues.choose(acceptLanguage: nil, forced: nil) == "en")
        #expect(KioskCatalogues.choose(acceptLanguage: "de;q=0", forced: nil) == "en")
        #expect(KioskCatalogues.choose(acceptLanguage: "en-US,en", forced: "de") == "de")
        #expect(KioskCatalogues.choose(acceptLanguage: "de", forced: "xx") == "de")
        let page = KioskAssets.html(language: "de")
        #expect(page.contains(#"<html lang="de" data-default-language="de">"#))
        #expect(page.contains("<title>Registrierungsstation</title>"))
    }

    @Test func theDocumentReadIsShownInFourPlainStages() {
        var p = DocumentProgress()
        #expect(p.json["waitingForCard"] == true)
        #expect(p.json["percent"] == 0)
        var seen: [String] = []
        let events: [JSONValue] = [
            ["step": "connect"], ["step": "access"], ["step": "read", "file": "COM", "bytesRead": 0],
            ["step": "read", "file": "SOD", "bytesRead": 900, "totalBytes": 1800],
            ["step": "read", "file": "DG1", "bytesRead": 93, "totalBytes": 93],
            ["step": "read", "file": "DG2", "bytesRead": 5000, "totalBytes": 10000],
            ["step": "read", "file": "DG11", "bytesRead": 40, "totalBytes": 40], ["step": "verify"],
        ]
        var percents: [Double] = []
        for e in events {
            p.apply(e)
            let stage = p.json["stage"]?.stringValue ?? ""
            if seen.last != stage { seen.append(stage) }
            percents.append(p.json["percent"]?.doubleValue ?? -1)
        }
        #expect(seen == ["connect", "details", "photo", "verify"])
        #expect(percents == percents.sorted(), "\(percents)")
        #expect(percents.last == 75)
        // Half of DG2 read: half-way through the photo stage.
        var q = DocumentProgress()
        q.apply(["step": "read", "file": "DG2", "bytesRead": 5000, "totalBytes": 10000])
        #expect(q.json["percent"] == 63)
    }

    @Test func aWorkflowsOwnWordingGoesToThePageUntilTheWipe() throws {
        var s = KioskSession(workflow: "w")
        _ = try s.call(for: .start(activationToken: nil))
        try s.started([
            "enrollmentId": "e1", "workflow": "w", "steps": ["NFC_MRZ"],
            "messages": ["en": ["start.title": "Welcome to the bank"]],
        ])
        #expect(s.view["messages"]?["en"]?["start.title"] == "Welcome to the bank")
        s.wipe(notice: "notice.idle")
        #expect(s.view["messages"] == nil)
        #expect(s.view["notice"] == "notice.idle")
    }

    @Test func theCheckNamesItsCatalogueText() {
        let count = KioskInputCheck.check(["mrz": "P<UTOERIKSSON"])
        #expect(count["key"] == "check.count")
        #expect(count["params"]?["count"] == 13)
        #expect(count["params"]?["total"] == 88)
        #expect(KioskInputCheck.check(["mrz": "P<UTO%"])["key"] == "check.character")
        #expect(KioskInputCheck.check(["mrz": ""])["key"] == "check.empty")
        #expect(KioskInputCheck.check(["can": "12a"])["key"] == "check.canDigits")
        #expect(
            KioskInputCheck.check(["documentNumber": "", "dateOfBirth": "", "dateOfExpiry": ""])["key"]
                == "check.number")
        #expect(
            KioskInputCheck.check(["documentNumber": "L898902C3", "dateOfBirth": "7408", "dateOfExpiry": ""])["key"]
                == "check.date")
        for key in ["check.count", "check.character", "check.empty", "check.canDigits", "check.number", "check.date"] {
            #expect(KioskCatalogues.message(key, language: "de") != nil)
        }
    }

    @Test func theDrawingsAreServedByName() {
        #expect(KioskDrawings.svg(path: "/drawings/passport-mrz.svg")?.hasPrefix("<svg") == true)
        #expect(KioskDrawings.svg(path: "/drawings/../kiosk.js") == nil)
        #expect(KioskDrawings.svg(path: "/drawings/nothing.svg") == nil)
        for (name, svg) in KioskDrawings.all { #expect(svg.contains("</svg>"), "\(name)") }
    }
}
