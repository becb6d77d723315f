import APDU
import TesseraCore
import Testing

@testable import ICAO

/// ICAO Doc 9303 Part 11 Appendix D.4: secure messaging worked example (3DES, KS from D.3, SSC 887022120C06C226).
@Suite struct SecureMessagingTests {
    static func d4Session() throws -> SecureMessagingSession {
        try SecureMessagingSession(
            cipher: .tripleDES, encryptionKey: ax("979EC13B1CBFE9DCD01AB0FED307EAE5"),
            macKey: ax("F1CB1F1FB5ADF208806B89DC579DC1F8"), ssc: ax("887022120C06C226"))
    }

    static let selectEFCOM = CommandAPDU(ins: 0xA4, p1: 0x02, p2: 0x0C, data: [0x01, 0x1E])
    static let readBinary4 = CommandAPDU(ins: 0xB0, p1: 0, p2: 0, ne: 4)
    static let readBinary18 = CommandAPDU(ins: 0xB0, p1: 0, p2: 4, ne: 0x12)
    static let protectedSelect = "0CA4020C158709016375432908C044F68E08BF8B92D635FF24F800"
    static let selectResponse = "990290008E08FA855A5D4C50A8ED9000"
    static let protectedRead4 = "0CB000000D9701048E08ED6705417E96BA5500"
    static let read4Response = "8709019FF0EC34F9922651990290008E08AD55CC17140B2DED9000"
    static let protectedRead18 = "0CB000040D9701128E082EA28A70F3C7B53500"
    static let read18Response = "871901FB9235F4E4037F2327DCC8964F1F9B8C30F42C8E2FFF224A990290008E08C8B2787EAEA07D749000"

    @Test func readerSideAppendixD4() throws {
        var sm = try Self.d4Session()
        #expect(try sm.protectCommand(Self.selectEFCOM).encoded() == ax(Self.protectedSelect))
        #expect(sm.ssc == ax("887022120C06C227"))
        let r1 = try sm.unprotectResponse(ResponseAPDU(parsing: ax(Self.selectResponse)))
        #expect(r1 == ResponseAPDU(data: [], sw: .success))
        #expect(try sm.protectCommand(Self.readBinary4).encoded() == ax(Self.protectedRead4))
        let r2 = try sm.unprotectResponse(ResponseAPDU(parsing: ax(Self.read4Response)))
        #expect(r2.data == ax("60145F01"))
        #expect(try sm.protectCommand(Self.readBinary18).encoded() == ax(Self.protectedRead18))
        let r3 = try sm.unprotectResponse(ResponseAPDU(parsing: ax(Self.read18Response)))
        #expect(r3.data == ax("04303130365F36063034303030305C026175"))
        #expect(sm.ssc == ax("887022120C06C22C"))
    }

    @Test func cardSideAppendixD4() throws {
        var chip = try Self.d4Session()
        let c1 = try chip.unprotectCommand(CommandAPDU(parsing: ax(Self.protectedSelect)))
        #expect(c1 == Self.selectEFCOM)
        #expect(try chip.protectResponse(ResponseAPDU(sw: .success)).encoded == ax(Self.selectResponse))
        let c2 = try chip.unprotectCommand(CommandAPDU(parsing: ax(Self.protectedRead4)))
        #expect(c2.ne == 4 && c2.ins == 0xB0 && c2.data.isEmpty)
        #expect(
            try chip.protectResponse(ResponseAPDU(data: ax("60145F01"), sw: .success)).encoded == ax(Self.read4Response)
        )
        let c3 = try chip.unprotectCommand(CommandAPDU(parsing: ax(Self.protectedRead18)))
        #expect(c3.ne == 0x12 && c3.p2 == 4)
        #expect(
            try chip.protectResponse(ResponseAPDU(data: ax("04303130365F36063034303030305C026175"), sw: .success))
                .encoded
                == ax(Self.read18Response))
    }

    @Test func rejectsMissingOrWrongMAC() throws {
        var sm = try Self.d4Session()
        _ = try sm.protectCommand(Self.selectEFCOM)
        var bad = ax(Self.selectResponse)
        bad[bad.count - 3] ^= 0x01
        do {
            _ = try sm.unprotectResponse(ResponseAPDU(parsing: bad))
            Issue.record("expected SECURE_MESSAGING_ERROR")
        } catch { #expect(error.code == .secureMessagingError) }

        var sm2 = try Self.d4Session()
        _ = try sm2.protectCommand(Self.selectEFCOM)
        do {
            _ = try sm2.unprotectResponse(ResponseAPDU(parsing: ax("99029000 9000")))
            Issue.record("expected SECURE_MESSAGING_ERROR for a missing DO'8E'")
        } catch { #expect(error.code == .secureMessagingError) }
        do {
            _ = try sm2.unprotectResponse(ResponseAPDU(sw: .success))
            Issue.record("expected SECURE_MESSAGING_ERROR for a plain 9000")
        } catch { #expect(error.code == .secureMessagingError) }

        var chip = try Self.d4Session()
        var badCommand = ax(Self.protectedRead4)
        badCommand[badCommand.count - 2] ^= 0x80
        do {
            _ = try chip.unprotectCommand(CommandAPDU(parsing: badCommand))
            Issue.record("expected SECURE_MESSAGING_ERROR")
        } catch { #expect(error.code == .secureMessagingError) }
    }

    /// A plain error status (no SM data objects) is passed through without advancing the SSC past it.
    @Test func plainErrorDoesNotAdvanceSSC() throws {
        var sm = try Self.d4Session()
        _ = try sm.protectCommand(Self.selectEFCOM)
        let plain = try sm.unprotectResponse(ResponseAPDU(sw: .fileNotFound))
        #expect(plain.sw == .fileNotFound)
        #expect(sm.ssc == ax("887022120C06C227"))
        do {
            _ = try sm.unprotectResponse(ResponseAPDU(sw: .smDataObjectsIncorrect))
            Issue.record("6988 must be reported as SECURE_MESSAGING_ERROR")
        } catch { #expect(error.code == .secureMessagingError) }
    }

    /// AES (16-byte SSC, IV = E(KSenc, SSC), CMAC/8) round trips with the Appendix G.1 session keys,
    /// including extended length, odd INS (DO'85') and protected error status words.
    @Test func aesRoundTrips() throws {
        let make = { () throws -> SecureMessagingSession in
            try SecureMessagingSession(
                cipher: .aes128, encryptionKey: ax("F5F0E35C0D7161EE6724EE513A0D9A7F"),
                macKey: ax("FE251C7858B356B24514B3BD5F4297D1"))
        }
        var reader = try make(), chip = try make()
        let commands = [
            CommandAPDU(ins: 0xA4, p1: 0x04, p2: 0x0C, data: ax("A0000002471001")),
            CommandAPDU(ins: 0xB0, p1: 0, p2: 0, ne: 1000),
            CommandAPDU(ins: 0xD6, p1: 0, p2: 0, data: [UInt8](repeating: 0x5A, count: 300)),
            CommandAPDU(ins: 0xB1, p1: 0, p2: 0, data: ax("54028000"), ne: 256),
        ]
        let responses = [
            ResponseAPDU(sw: .success),
            ResponseAPDU(data: (0..<1000).map { UInt8($0 & 0xFF) }, sw: .success),
            ResponseAPDU(sw: .fileNotFound),
            ResponseAPDU(data: ax("5310") + [UInt8](repeating: 1, count: 16), sw: .endOfFileWarning),
        ]
        for (command, response) in zip(commands, responses) {
            let wire = try reader.protectCommand(command).encoded()
            let parsed = try CommandAPDU(parsing: wire)
            if command.data.count > 200 || (command.ne ?? 0) > 256 { #expect(parsed.isExtended) }
            let received = try chip.unprotectCommand(parsed)
            #expect(received.data == command.data && received.ne == command.ne && received.ins == command.ins)
            let protected = try chip.protectResponse(response, oddINS: command.ins & 1 == 1)
            #expect(try reader.unprotectResponse(ResponseAPDU(parsing: protected.encoded)) == response)
        }
        #expect(reader.ssc == chip.ssc)
        #expect(reader.ssc == [UInt8](repeating: 0, count: 15) + [8])
    }
}
