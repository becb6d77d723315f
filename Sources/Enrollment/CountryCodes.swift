import MRZ

/// ISO 3166-1 country codes, as mDL elements carry them (alpha-2) and as ICAO Doc 9303 MRZs, expected attributes
/// and identity bindings carry them (three letters).
public enum CountryCodes {
    /// The Doc 9303 three-letter code of an ISO 3166-1 alpha-2 code: the ISO 3166-1 alpha-3 code, except Germany,
    /// whose Doc 9303 code is "D", and ICAO's specimen state Utopia ("UT" → "UTO"), which test documents use.
    /// Nil for a code that is not assigned. Case-sensitive: codes are upper case.
    public static func docCode(alpha2: String) -> String? {
        switch alpha2 {
        case "DE": "D"
        case "UT": "UTO"
        default: alpha3[alpha2]
        }
    }

    /// Every officially assigned ISO 3166-1 code: alpha-2 → alpha-3.
    public static var alpha3: [String: String] { IssuingStateCodes.alpha3 }
}
