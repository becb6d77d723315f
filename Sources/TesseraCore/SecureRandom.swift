/// Random bytes for ids, handles, challenges and salts, from the system's cryptographically secure generator.
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var g = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &g) }
    }
}
