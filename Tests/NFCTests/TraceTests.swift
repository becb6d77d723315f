import FoundationEssentials
import NFC
import PN532Emulator
import TesseraCore
import Testing

/// APDU traces: pcap with LINKTYPE_ISO_14443, read back and decoded by the real tshark.
@Suite("APDU traces")
struct TraceTests {
    @Test("both roles' exchanges are written as pcap that tshark decodes as ISO 7816 APDUs")
    func pcapDecodedByTshark() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cardSide = try APDUTraceWriter(path: dir + "/card.pcap")
        let readerSide = try APDUTraceWriter(path: dir + "/reader.pcap")
        let emulator = try PN532Emulator(card: EchoCard()) { event in
            switch event {
            case .fieldOn: cardSide.fieldOn()
            case .activated(let uid, let atqa, let sak, let ats):
                cardSide.activationA(uid: uid, atqa: atqa, sak: sak, ats: ats)
            case .exchange(let c, let r, let t1, let t2):
                cardSide.exchange(command: c, response: r, commandTime: t1, responseTime: t2)
            default: break
            }
        }
        emulator.start()
        defer { emulator.stop() }
        let device = try await NFCDevice.open(emulator.connstring, context: try NFCContext.shared())
        let target = try #require(try await device.selectTarget())
        target.onExchange { c, r, t in readerSide.exchange(command: c, response: r, commandTime: t) }
        _ = try await target.transmit([0x00, 0xA4, 0x04, 0x0C, 0x07, 0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01])
        _ = try await target.transmit([0x00, 0xB0, 0x00, 0x00, 0x04])
        await device.close()
        cardSide.close(); readerSide.close()

        // Our own reader sees both roles' records.
        let parsed = try APDUTraceReader.parse([UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/card.pcap"))))
        let apdus = parsed.records.compactMap(\.apdu)
        #expect(apdus.contains([0x00, 0xB0, 0x00, 0x00, 0x04]))
        #expect(apdus.contains([0x00, 0x01, 0x02, 0x03, 0x90, 0x00]))
        #expect(parsed.records.contains { $0.kind == .toCard && $0.data == [0xE0, 0x80] }, "RATS recorded")
        let readerRecords = try APDUTraceReader.parse(
            [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/reader.pcap")))
        ).records
        #expect(readerRecords.count == 4)

        // tshark (Debian's Wireshark 4) decodes the I-block payloads as ISO 7816 with the decode-as entry.
        let config = dir + "/wireshark"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try APDUTraceWriter.wiresharkDecodeAs.write(
            toFile: config + "/decode_as_entries", atomically: true, encoding: .utf8)
        for file in ["card.pcap", "reader.pcap"] {
            let summary = try await run(
                "/usr/bin/tshark", ["-r", dir + "/" + file], environment: ["WIRESHARK_CONFIG_DIR": config])
            #expect(summary.status == 0, "\(summary.output)")
            #expect(summary.output.contains("ISO 7816"), "\(summary.output)")
            #expect(summary.output.contains("Select file"), "\(summary.output)")
            let fields = try await run(
                "/usr/bin/tshark",
                [
                    "-r", dir + "/" + file, "-Y", "iso7816.apdu.ins",
                    "-T", "fields", "-e", "iso7816.apdu.ins", "-e", "iso7816.apdu.body",
                ],
                environment: ["WIRESHARK_CONFIG_DIR": config])
            #expect(fields.output.contains("0xa4"), "\(fields.output)")
            #expect(fields.output.contains("0xb0"), "\(fields.output)")
            #expect(fields.output.contains("a0000002471001"), "APDU bytes visible: \(fields.output)")
        }
        let plain = try await run("/usr/bin/tshark", ["-r", dir + "/card.pcap"])
        #expect(plain.output.contains("RATS") && plain.output.contains("I-block"), "\(plain.output)")
    }

    @Test("a foreign file is MALFORMED_DATA")
    func foreignFile() {
        #expect(throws: TesseraError.self) { try APDUTraceReader.parse([UInt8](repeating: 0x41, count: 40)) }
    }
}
