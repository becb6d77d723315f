import TesseraCore
import Testing

@Suite struct ConstantTimeTests {
    @Test func equalOnlyForSameBytesAndLength() {
        #expect(ConstantTime.equal([1, 2, 3], [1, 2, 3]))
        #expect(ConstantTime.equal([], []))
        #expect(!ConstantTime.equal([1, 2, 3], [1, 2, 4]))
        #expect(!ConstantTime.equal([0x80, 2, 3], [0, 2, 3]))
        #expect(!ConstantTime.equal([1, 2], [1, 2, 3]))
    }
}
