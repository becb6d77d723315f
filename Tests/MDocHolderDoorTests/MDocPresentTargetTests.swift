import MDocHolderDoor
import TesseraCore
import Testing

/// Where `mdoc.present` presents, and which devices a caller without `admin` may open.
@Suite struct MDocPresentTargetTests {
    /// `HOST:PORT` is a vpcd reader (empty host: 127.0.0.1); anything else, libnfc driver names included, is a
    /// libnfc connstring.
    @Test func deviceStringsNameAVPCDReaderOrALibnfcDevice() {
        #expect(MDocPresentTarget(device: "127.0.0.1:35963") == .vpcd(host: "127.0.0.1", port: 35963))
        #expect(MDocPresentTarget(device: ":35964") == .vpcd(host: "127.0.0.1", port: 35964))
        #expect(MDocPresentTarget(device: "reader-host.lan:1") == .vpcd(host: "reader-host.lan", port: 1))
        #expect(MDocPresentTarget(device: "pn532_uart:/dev/pts/3") == .libnfc("pn532_uart:/dev/pts/3"))
        #expect(MDocPresentTarget(device: "pcsc:1") == .libnfc("pcsc:1"))
        #expect(MDocPresentTarget(device: "host:70000") == .libnfc("host:70000"))
        #expect(MDocPresentTarget(device: "host:0") == .libnfc("host:0"))
    }

    /// A configured device is allowed however it is spelled (`:35963` is `127.0.0.1:35963`); any other is
    /// UNAUTHORIZED with `data.field` `device`.
    @Test func onlyConfiguredDevicesAreOpened() async throws {
        let devices = MDocPresentDevices(configured: [":35963"], nfcDevices: ["pn532_uart:/dev/ttyUSB0"])
        try await devices.check("127.0.0.1:35963")
        try await devices.check("pn532_uart:/dev/ttyUSB0")
        for device in ["127.0.0.1:35964", "pn532_uart:/dev/ttyUSB1", "other:35963"] {
            do {
                try await devices.check(device)
                Issue.record("\(device) was allowed")
            } catch {
                #expect(error.code == .unauthorized)
                #expect(error.details["field"]?.stringValue == "device")
            }
        }
    }
}
