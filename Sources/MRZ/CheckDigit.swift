extension MRZ {
    /// The Doc 9303 Part 3 §4.9 check digit of `s`: weights 7-3-1 repeating, '0'–'9' = 0–9,
    /// 'A'–'Z' = 10–35, '<' = 0, sum modulo 10. Lower-case letters count as their upper-case
    /// form; any other character counts as 0 (validate input first where that matters).
    public static func checkDigit(_ s: String) -> Character {
        checkDigit(bytes: Array(s.utf8))
    }

    static func checkDigit<C: Collection>(bytes: C) -> Character where C.Element == UInt8 {
        let weights = [7, 3, 1]
        var sum = 0
        for (i, b) in bytes.enumerated() {
            sum += characterValue(b) * weights[i % 3]
        }
        return Character(Unicode.Scalar(UInt8(0x30 + sum % 10)))
    }

    static func characterValue(_ b: UInt8) -> Int {
        switch b {
        case 0x30...0x39: Int(b - 0x30)
        case 0x41...0x5A: Int(b - 0x41) + 10
        case 0x61...0x7A: Int(b - 0x61) + 10
        default: 0
        }
    }

    /// Whether `b` may appear in an MRZ: 'A'–'Z', '0'–'9' or the filler '<'.
    static func isMRZCharacter(_ b: UInt8) -> Bool {
        (0x41...0x5A).contains(b) || (0x30...0x39).contains(b) || b == filler
    }

    static let filler: UInt8 = 0x3C
}
