import TesseraCore

/// An elementary file of the LDS 1 application (Doc 9303 Part 10 §3-4): EF.COM, EF.SOD or a data group 1…16.
public enum LDSFile: Hashable, Sendable, CustomStringConvertible, Comparable {
    case com
    case sod
    case dataGroup(Int)

    /// All LDS 1 files in reading order (COM, DG1…DG16, SOD).
    public static let all: [LDSFile] = [.com] + (1...16).map { .dataGroup($0) } + [.sod]

    /// The data group `n` (1…16), nil otherwise.
    public init?(dataGroup n: Int) {
        guard (1...16).contains(n) else { return nil }
        self = .dataGroup(n)
    }

    /// From a file identifier (0101…0110, 011D, 011E).
    public init?(fileID: UInt16) {
        switch fileID {
        case 0x011E: self = .com
        case 0x011D: self = .sod
        case 0x0101...0x0110: self = .dataGroup(Int(fileID - 0x0100))
        default: return nil
        }
    }

    /// From a short file identifier (1…16, 0x1D, 0x1E).
    public init?(sfi: UInt8) {
        switch sfi {
        case 0x1E: self = .com
        case 0x1D: self = .sod
        case 0x01...0x10: self = .dataGroup(Int(sfi))
        default: return nil
        }
    }

    /// From the file's outer tag (60, 77, 61, 75, 63…70).
    public init?(tag: UInt8) {
        switch tag {
        case 0x60: self = .com
        case 0x77: self = .sod
        default:
            guard let i = LDSFile.dataGroupTags.firstIndex(of: tag) else { return nil }
            self = .dataGroup(i + 1)
        }
    }

    private static let dataGroupTags: [UInt8] = [
        0x61, 0x75, 0x63, 0x76, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F, 0x70,
    ]

    /// The 2-byte file identifier.
    public var fileID: UInt16 {
        switch self {
        case .com: 0x011E
        case .sod: 0x011D
        case .dataGroup(let n): 0x0100 + UInt16(n)
        }
    }

    /// The short file identifier.
    public var sfi: UInt8 {
        switch self {
        case .com: 0x1E
        case .sod: 0x1D
        case .dataGroup(let n): UInt8(n)
        }
    }

    /// The outer tag of the file's content.
    public var tag: UInt8 {
        switch self {
        case .com: 0x60
        case .sod: 0x77
        case .dataGroup(let n): (1...16).contains(n) ? LDSFile.dataGroupTags[n - 1] : 0
        }
    }

    /// The data group number, nil for COM and SOD.
    public var dataGroupNumber: Int? { if case .dataGroup(let n) = self { return n }; return nil }

    /// "COM", "SOD", "DG1"…
    public var description: String {
        switch self {
        case .com: "COM"
        case .sod: "SOD"
        case .dataGroup(let n): "DG\(n)"
        }
    }

    private var order: Int {
        switch self {
        case .com: 0
        case .dataGroup(let n): n
        case .sod: 100
        }
    }

    public static func < (a: LDSFile, b: LDSFile) -> Bool { a.order < b.order }
}
