import APDU
import FoundationEssentials
import NFC
import PN532Emulator
import TesseraCore
import Testing

/// The NFC module through libnfc's real pn532_uart driver against the software PN532 on a pty.
@Suite("libnfc initiator against the software PN532", .serialized)
struct LibNFCInitiatorTests {
    @Test("selects the ISO 14443-A target and exchanges short APDUs, incl. 256-byte responses and 255-byte commands")
    func exchangesAPDUs() async throws {
        let card = EchoCard()
        let emulator = try PN532Emulator(card: card)
        emulator.start()
        defer { emulator.stop() }
        let context = try NFCContext.shared()
        let device = try await NFCDevice.open(emulator.connstring, context: context)
        #expect(device.name.contains("pn532_uart"))
        let target = try #require(try await device.selectTarget())
        #expect(target.info.modulation == .iso14443A)
        #expect(target.info.uid == [0x08, 0x54, 0x53, 0x52])
        #expect(target.info.sak == 0x20 && target.info.isISODEP)
        #expect(target.info.ats == [0x78, 0x80, 0x70, 0x02])
        #expect(try await target.transmit([0x00, 0xA4, 0x04, 0x0C, 0x02, 0x3F, 0x00]) == [0x90, 0x00])
        let read = try await target.transmit([0x00, 0xB0, 0x00, 0x00, 0x00])
        #expect(read.count == 258 && read.suffix(2) == [0x90, 0x00] && read[255] == 0xFF)
        let payload = (0..<255).map { UInt8(($0 * 7) & 0xFF) }
        let echoed = try await target.transmit([0x80, 0xCA, 0x00, 0x00, 0xFF] + payload)
        #expect(echoed == payload + [0x90, 0x00])
        #expect(await card.commands.count == 3)
        #expect(await target.isPresent())
        await target.release()
        await device.close()
    }

    @Test("target lost mid-exchange → CARD_REMOVED, then a fresh selection reads again")
    func targetLossAndRecovery() async throws {
        let card = EchoCard()
        let emulator = try PN532Emulator(card: card, options: .init(removeAfterAPDUs: 2))
        emulator.start()
        defer { emulator.stop() }
        let context = try NFCContext.shared()
        let device = try await NFCDevice.open(emulator.connstring, context: context)
        let target = try #require(try await device.selectTarget())
        _ = try await target.transmit([0x00, 0xA4, 0x04, 0x0C, 0x02, 0x3F, 0x00])
        _ = try await target.transmit([0x00, 0xB0, 0x00, 0x00, 0x10])
        await #expect(throws: TesseraError.self) { _ = try await target.transmit([0x00, 0xB0, 0x00, 0x10, 0x10]) }
        do {
            _ = try await target.transmit([0x00, 0xB0, 0x00, 0x10, 0x10])
            Issue.record("a lost target must not answer")
        } catch {
            #expect(error.code == .cardRemoved, "\(error)")
        }
        #expect(!(await target.isPresent()))
        await target.release()
        let again = try #require(try await device.selectTarget())
        #expect(try await again.transmit([0x00, 0xB0, 0x00, 0x00, 0x04]) == [0, 1, 2, 3, 0x90, 0x00])
        #expect(await card.powerOns == 2, "the card was powered up again for the new activation")
        await device.close()
    }

    @Test("the first failing exchange itself reports CARD_REMOVED")
    func firstFailureIsCardRemoved() async throws {
        let emulator = try PN532Emulator(card: EchoCard(), options: .init(removeAfterAPDUs: 0))
        emulator.start()
        defer { emulator.stop() }
        let device = try await NFCDevice.open(emulator.connstring, context: try NFCContext.shared())
        let target = try #require(try await device.selectTarget())
        do {
            _ = try await target.transmit([0x00, 0xA4, 0x04, 0x0C, 0x02, 0x3F, 0x00])
            Issue.record("expected CARD_REMOVED")
        } catch {
            #expect(error.code == .cardRemoved, "\(error)")
        }
        await device.close()
    }

    @Test("no card in the field → selectTarget returns nil")
    func emptyField() async throws {
        let emulator = try PN532Emulator(card: EchoCard())
        emulator.setCardInField(false)
        emulator.start()
        defer { emulator.stop() }
        let device = try await NFCDevice.open(emulator.connstring, context: try NFCContext.shared())
        #expect(try await device.selectTarget() == nil)
        await device.close()
    }

    @Test("a missing port is NO_READER; a port already open in this process is DEVICE_BUSY")
    func openFailures() async throws {
        let context = try NFCContext.shared()
        do {
            _ = try await NFCDevice.open("pn532_uart:/nonexistent/tty", context: context)
            Issue.record("expected NO_READER")
        } catch {
            #expect(error.code == .noReader, "\(error)")
        }
        let emulator = try PN532Emulator(card: EchoCard())
        emulator.start()
        defer { emulator.stop() }
        let first = try await NFCDevice.open(emulator.connstring, context: context)
        do {
            _ = try await NFCDevice.open(emulator.connstring, context: context)
            Issue.record("expected DEVICE_BUSY")
        } catch {
            #expect(error.code == .deviceBusy, "\(error)")
        }
        await first.close()
        // Released: it opens again.
        let second = try await NFCDevice.open(emulator.connstring, context: context)
        await second.close()
        do {
            _ = try await NFCDevice.open("pn53x_usb:001:001", context: context)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .deviceBusy || error.code == .noReader, "\(error)")
            #expect(error.message.contains("tessera-blacklist-pn533.conf"), "\(error)")
        }
    }
}
