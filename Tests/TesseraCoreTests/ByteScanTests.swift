import TesseraCore
import Testing

/// `ByteScan` against the plain Swift answers it stands in for.
@Suite struct ByteScanTests {
    @Test(arguments: [
        ("", ""), ("a", "a"), ("method", "method"), ("method", "methoD"), ("params", "param"), ("", "x"),
        ("jsonrpc", "jsonrpc"),
    ])
    func equalIsElementwiseEquality(_ a: String, _ b: String) {
        let left = Array(("..." + a).utf8).dropFirst(3)  // a slice that does not start at 0
        let right = Array(b.utf8)
        #expect(right.withUnsafeBufferPointer { ByteScan.equal(left, $0) } == left.elementsEqual(right))
    }

    @Test func firstIndexFindsTheFirstAtOrAfterTheStart() {
        let bytes = Array("ab\ncd\n".utf8)
        bytes.withUnsafeBytes { raw in
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: raw, from: 0) == 2)
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: raw, from: 2) == 2)
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: raw, from: 3) == 5)
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: raw, from: 6) == nil)
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "\n"), in: raw, from: 60) == nil)
            #expect(ByteScan.firstIndex(of: UInt8(ascii: "x"), in: raw, from: 0) == nil)
        }
        [UInt8]().withUnsafeBytes { #expect(ByteScan.firstIndex(of: 0, in: $0, from: 0) == nil) }
    }
}
