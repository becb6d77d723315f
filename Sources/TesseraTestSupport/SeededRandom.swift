import FoundationEssentials

/// The random source of randomized tests: SplitMix64 from a seed that a failure message names, so the same draws
/// can be made again. The seed is `TESSERA_TEST_SEED` when set (decimal or 0x hex), else a fresh one per process.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    /// This process's seed (the environment's, or one drawn once at first use).
    public static let processSeed: UInt64 = {
        if let text = ProcessInfo.processInfo.environment["TESSERA_TEST_SEED"] {
            let trimmed = text.trimmingWhitespace()
            let value =
                trimmed.hasPrefix("0x") ? UInt64(trimmed.dropFirst(2), radix: 16) : UInt64(trimmed, radix: 10)
            if let value { return value }
        }
        var system = SystemRandomNumberGenerator()
        return system.next()
    }()

    public let seed: UInt64
    private var state: UInt64

    /// A generator for one test: the process seed mixed with `stream` (e.g. the test's name), so tests draw
    /// independently of each other and of the order they run in.
    public init(stream: String) {
        var mixed = Self.processSeed
        for byte in stream.utf8 { mixed = (mixed ^ UInt64(byte)) &* 0x100_0000_01B3 }
        self.init(seed: mixed)
    }

    public init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    /// What a failure message says so the run can be repeated.
    public static var reproduce: String { "TESSERA_TEST_SEED=\(processSeed)" }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
