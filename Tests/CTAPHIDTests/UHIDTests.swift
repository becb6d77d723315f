import FoundationEssentials
import TesseraTestSupport
import Testing

@testable import CTAPHID

/// The uhid event encoding against the kernel's own `struct uhid_event` (linux/uhid.h, compiled here with cc).
struct UHIDTests {
    /// sizeof and offsetof from the installed kernel header.
    func kernelLayout() async throws -> [Int] {
        let dir = URL(fileURLWithPath: Scratch.directory("uhid"))
        let source = dir.appendingPathComponent("layout.c")
        try """
        #include <linux/uhid.h>
        #include <stddef.h>
        #include <stdio.h>
        #define O(m) (int)offsetof(struct uhid_event, m)
        int main(void) {
            printf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\\n", (int)sizeof(struct uhid_event),
                O(u.create2.name), O(u.create2.phys), O(u.create2.uniq), O(u.create2.rd_size), O(u.create2.bus),
                O(u.create2.vendor), O(u.create2.product), O(u.create2.version), O(u.create2.country),
                O(u.create2.rd_data), O(u.input2.size), O(u.input2.data), O(u.output.data), O(u.output.size),
                O(u.output.rtype), UHID_CREATE2, UHID_INPUT2, UHID_OUTPUT);
            return 0;
        }
        """.write(to: source, atomically: true, encoding: .utf8)
        let binary = dir.appendingPathComponent("layout").path
        let cc = try await Subprocess.run("/usr/bin/cc", [source.path, "-o", binary])
        #expect(cc.status == 0, "cc: \(cc.stderrText)")
        let out = try await Subprocess.run(binary, [])
        return out.stdoutText.split(separator: " ").compactMap {
            Int(String($0.filter { !$0.isWhitespace }))
        }
    }

    @Test func layoutMatchesTheKernelHeader() async throws {
        let k = try await kernelLayout()
        try #require(k.count == 19)
        #expect(
            k == [
                UHID.eventSize, UHID.create2Name, UHID.create2Phys, UHID.create2Uniq, UHID.create2RDSize,
                UHID.create2Bus, UHID.create2Vendor, UHID.create2Product, UHID.create2Version,
                UHID.create2Country, UHID.create2RDData, UHID.input2Size, UHID.input2Data, UHID.outputData,
                UHID.outputSize, UHID.outputRType, Int(UHID.EventType.create2.rawValue),
                Int(UHID.EventType.input2.rawValue), Int(UHID.EventType.output.rawValue),
            ])
    }

    @Test func create2CarriesTheFIDODescriptor() {
        let e = UHID.create2(name: "Tessera CTAP", vendor: 0x1209, product: 0x7E55)
        #expect(e.count == 4380)
        #expect(Array(e[0..<4]) == [11, 0, 0, 0])
        #expect(Array(e[4..<16]) == Array("Tessera CTAP".utf8))
        #expect(e[16] == 0)
        let size = UHID.fidoReportDescriptor.count
        #expect(Array(e[260..<262]) == [UInt8(size), 0])
        #expect(Array(e[262..<264]) == [3, 0], "BUS_USB")
        #expect(Array(e[264..<268]) == [0x09, 0x12, 0, 0])
        #expect(Array(e[280..<280 + size]) == UHID.fidoReportDescriptor)
        // Usage page 0xF1D0, usage 1; 64-byte input and output reports.
        #expect(UHID.fidoReportDescriptor.starts(with: [0x06, 0xD0, 0xF1, 0x09, 0x01]))
        #expect(UHID.fidoReportDescriptor.count == 34)
    }

    @Test func input2AndOutput() {
        let report = (0..<64).map { UInt8($0) }
        let e = UHID.input2(report)
        #expect(Array(e[0..<4]) == [12, 0, 0, 0])
        #expect(Array(e[4..<6]) == [64, 0])
        #expect(Array(e[6..<70]) == report)

        var out = [UInt8](repeating: 0, count: UHID.eventSize)
        out[0] = 6
        out.replaceSubrange(4..<69, with: [0] + report)
        out[4100] = 65
        #expect(UHID.parse(out) == .output(report), "report number 0 removed")
        out.replaceSubrange(4..<68, with: report)
        out[4100] = 64
        #expect(UHID.parse(out) == .output(report))
        #expect(UHID.parse([4, 0, 0, 0]) == .open)
        #expect(UHID.parse([2, 0]) == nil)
    }
}
